"""Fault drills on the real native stack (tests/support/fault_drills.py's stack, one for the module):
kill -9 of vLLM's EngineCore or its worker -> supervised restart, `VLLMDown` fires and resolves,
nothing of the old process tree left, a new exporter baseline; EngineCore dead under a hung API server
-> `VLLMEngineDown` fires, and resolves after the restart; a Prometheus restart keeps its TSDB and the
firing Watchdog fires again; an Alertmanager restart keeps its silences and its notification log
(storage on disk). The API server's kill -9 runs in `make test` (tests/stack/test_fault_drills.py)."""

from __future__ import annotations

import signal
import time
from datetime import datetime, timedelta, timezone

import pytest
import requests

from leakwatch.core import webauth
from leakwatch.core.promapi import Prometheus
from leakwatch.native.runner import NativeStack
from tests.support.fault_drills import (
    WebhookRecorder,
    am_alert_names,
    fault_drill_stack,
    kill_9_and_watch_the_restart,
    ok as _ok,
    prom_start,
    replaced,
    restart_program,
    vllm_processes,
)
from tests.support.healer_support import wait_for
from tests.support.native_stack import environ

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def heartbeats():
    recorder = WebhookRecorder()
    yield recorder
    recorder.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, heartbeats):
    with fault_drill_stack(tmp_path_factory.mktemp("fault-drills"), heartbeats.url) as running:
        yield running


def test_alertmanager_restart_keeps_its_silences(stack):
    with environ(stack.env):
        am = stack.url("alertmanager")
        auth = webauth.auth_for(am)
    assert auth is not None
    now = datetime.now(timezone.utc)
    silence = {
        "matchers": [{"name": "alertname", "value": "DrillSilence", "isRegex": False}],
        "createdBy": "drill",
        "comment": "kept across a restart",
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }
    resp = requests.post(f"{am}/api/v2/silences", json=silence, auth=auth, timeout=10)
    assert resp.status_code == 200, resp.text
    silence_id = resp.json()["silenceID"]
    restart_program(stack, "alertmanager")
    wait_for(lambda: _ok(f"{am}/-/ready", auth), timeout=120, what="Alertmanager back")
    kept = requests.get(f"{am}/api/v2/silence/{silence_id}", auth=auth, timeout=10)
    assert kept.status_code == 200 and kept.json()["status"]["state"] == "active", kept.text


def test_alertmanager_restart_keeps_its_notification_log(stack, heartbeats):
    """Alertmanager remembers what it has notified (its nflog, on disk): after a restart it does not
    notify again for an alert group it notified before, until the route's repeat interval. Without
    the log every restart would re-page for every firing alert; the second half shows this check
    sees the difference (the same restart with the nflog file removed notifies at once)."""
    with environ(stack.env):
        am = stack.url("alertmanager")
        auth = webauth.auth_for(am)
        nflog = NativeStack().layout.alertmanager_data / "nflog"
    wait_for(lambda: heartbeats.count("Watchdog") >= 1, timeout=300, interval=2, what="a Watchdog notification")
    sent = heartbeats.count("Watchdog")

    def restart_and_wait_for_the_watchdog(while_stopped=lambda: None) -> None:
        restart_program(stack, "alertmanager", while_stopped)
        wait_for(lambda: _ok(f"{am}/-/ready", auth), timeout=120, what="Alertmanager back")
        # Alertmanager keeps no alerts across a restart: Prometheus resends the firing Watchdog.
        wait_for(lambda: "Watchdog" in am_alert_names(am, auth), timeout=300, interval=2, what="Watchdog resent")

    restart_and_wait_for_the_watchdog()
    # The route's group_wait is 0: a re-send would come at once, or at the latest one group_interval later.
    time.sleep(75)
    assert heartbeats.count("Watchdog") == sent, heartbeats.notifications

    restart_and_wait_for_the_watchdog(while_stopped=lambda: nflog.unlink())
    wait_for(lambda: heartbeats.count("Watchdog") > sent, timeout=120, interval=2, what="re-sent without the nflog")


def test_prometheus_restart_keeps_its_tsdb_and_the_watchdog_fires_again(stack):
    with environ(stack.env):
        prom = Prometheus(stack.url("prometheus"))
        am = stack.url("alertmanager")
        auth = webauth.auth_for(am)
    prom.wait_for('ALERTS{alertname="Watchdog", alertstate="firing"}', timeout=300)
    at = time.time()
    window = f'count_over_time(up{{job="prometheus"}}[{int(at - prom_start(prom)) + 60}s])'
    before = prom.scalar(window)
    assert before and before > 1
    restart_program(stack, "prometheus")
    wait_for(lambda: _ok(f"{stack.url('prometheus')}/-/ready", auth), timeout=180, what="Prometheus back")
    # The samples from before the restart are still there (the TSDB is on disk, not in memory only).
    after = prom.query(window, at=at)
    assert after and float(after[0]["value"][1]) == pytest.approx(before, abs=1)
    prom.wait_for('ALERTS{alertname="Watchdog", alertstate="firing"}', timeout=300)
    # Prometheus resends firing alerts on its own schedule after a restart: wait for Alertmanager to have it.
    wait_for(lambda: "Watchdog" in am_alert_names(am, auth), timeout=300, interval=5, what="Watchdog in Alertmanager")


@pytest.mark.timeout(2400)  # vLLM restarts slowly on a loaded 2-core machine
@pytest.mark.parametrize("role", ["engine_core", "worker"])
def test_kill_9_of_a_vllm_process_restarts_vllm_and_the_exporter_takes_a_new_baseline(stack, role):
    kill_9_and_watch_the_restart(stack, role)


@pytest.mark.timeout(2400)
def test_engine_core_dead_under_a_hung_api_server_fires_vllm_engine_down_until_the_restart(stack):
    """EngineCore gone while the API server lives (here: stopped with SIGSTOP, so vLLM's engine
    monitor in it cannot notice) -> the exporter sees an API server without its engine and
    VLLMEngineDown fires (VLLMDown too: the stopped server answers no scrape). Once the API server
    runs again it notices, exits, supervisord restarts vLLM, and both alerts resolve."""
    with environ(stack.env):
        prom = Prometheus(stack.url("prometheus"))
    before = vllm_processes(stack)
    assert all(len(procs) == 1 for procs in before.values()), before
    old = [p for procs in before.values() for p in procs]
    api_server = before["api_server"][0]
    api_server.suspend()
    try:
        before["engine_core"][0].send_signal(signal.SIGKILL)
        for alertname in ("VLLMEngineDown", "VLLMDown"):
            prom.wait_for(f'ALERTS{{alertname="{alertname}", alertstate="firing"}}', timeout=300)
    finally:
        api_server.resume()
    wait_for(
        lambda: replaced(stack, old),
        timeout=900,
        interval=2,
        what="vLLM restarted by supervisord after its API server noticed its dead engine",
    )
    prom.wait_for('absent(ALERTS{alertname=~"VLLMEngineDown|VLLMDown"})', timeout=180)
    wait_for(lambda: not [p for p in old if p.is_running()], timeout=120, what="no process of the old vLLM left")
