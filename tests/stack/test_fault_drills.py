"""Fault drills on the real native stack (one stack for the module): kill -9 of vLLM's EngineCore, its
worker or its API server -> supervised restart, `VLLMDown` fires and resolves, nothing of the old
process tree left, and the exporter re-discovers the processes and takes a new baseline; EngineCore
dead under a hung API server -> `VLLMEngineDown` fires, and resolves after the restart; a Prometheus
restart keeps its TSDB and the firing Watchdog fires again; an Alertmanager restart keeps its
silences and its notification log (storage on disk). Everything through the stack's basic auth.

The stack runs the production rules and routing with two changes, so that these short outages show:
VLLMDown and VLLMEngineDown wait SHORT_FOR instead of minutes, and the Watchdog's heartbeat route
posts to a recorder in this test (repeating after HEARTBEAT_REPEAT) instead of to nobody."""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
import requests
import yaml

from leakwatch import webauth
from leakwatch.drill.config import with_scrape_interval
from leakwatch.exporter.derived import WARMUP_REQUESTS
from leakwatch.generate.alertmanager_config import compose_alertmanager_config
from leakwatch.native.runner import NativeStack
from leakwatch.promapi import Prometheus
from leakwatch.rules.config import ALERTS_FILE
from leakwatch.rules.render import write_rule_copy
from leakwatch.settings import load as load_settings
from leakwatch.topology import VLLM_PROGRAM

from ..conftest import environ, running_native_stack
from ..healer_support import wait_for
from . import vllm_tree

# One stack for the module (its own xdist group: the kills restart its vLLM three times).
pytestmark = [pytest.mark.stack, pytest.mark.slow, pytest.mark.xdist_group("fault_drills_stack")]


# Production waits 5m (VLLMDown) and 2m (VLLMEngineDown), longer than these outages last here. The
# drill stack scrapes and evaluates every SCRAPE_INTERVAL_S and waits one interval: an alert fires on
# the second failed evaluation in a row, at most ~3 intervals after the outage begins. (At the
# production 15 s a supervised vLLM restart, 30-60 s here, could end before VLLMDown fired.)
SCRAPE_INTERVAL_S = 5
SHORT_FOR = {"down_for": f"{SCRAPE_INTERVAL_S}s", "engine_down_for": f"{SCRAPE_INTERVAL_S}s"}
# Longer than this module runs: every Watchdog notification after the first one is a re-send.
HEARTBEAT_REPEAT = "3h"


class WebhookRecorder:
    """An Alertmanager webhook receiver on 127.0.0.1 that keeps the alert names of every notification."""

    def __init__(self):
        self.notifications: list[list[str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                recorder.notifications.append([a["labels"]["alertname"] for a in body["alerts"]])
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, alertname: str) -> int:
        return sum(alertname in names for names in self.notifications)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def heartbeats():
    recorder = WebhookRecorder()
    yield recorder
    recorder.close()


def drill_rules(folder: Path) -> Path:
    """The production rules rendered from config/alerts.yaml with only SHORT_FOR changed."""
    thresholds = yaml.safe_load(ALERTS_FILE.read_text())
    thresholds["serving"].update(SHORT_FOR)
    config = folder / "alerts.yaml"
    config.write_text(yaml.safe_dump(thresholds))
    rules = folder / "rules"
    write_rule_copy(rules, f"Fault drills' copy: production rules with {SHORT_FOR}.", config=config)
    return rules


def drill_alertmanager(heartbeat_url: str) -> dict:
    """The production routing with the Watchdog's heartbeat receiver posting to heartbeat_url."""
    doc = compose_alertmanager_config(load_settings())
    (route,) = [r for r in doc["route"]["routes"] if r.get("matchers") == ['alertname="Watchdog"']]
    route["repeat_interval"] = HEARTBEAT_REPEAT
    (receiver,) = [r for r in doc["receivers"] if r["name"] == route["receiver"]]
    receiver["webhook_configs"] = [{"url": heartbeat_url, "send_resolved": False}]
    return doc


@pytest.fixture(scope="module")
def stack(tmp_path_factory, heartbeats):
    rules = drill_rules(tmp_path_factory.mktemp("fault-drills"))
    with running_native_stack(
        "lw-fault-",
        settings=with_scrape_interval(load_settings(), SCRAPE_INTERVAL_S),
        rules_dir=rules,
        alertmanager_config=drill_alertmanager(heartbeats.url),
    ) as running:
        yield running


def rpc(stack):
    with environ(stack.env):
        return NativeStack().rpc()


def restart_program(stack, name: str, while_stopped=lambda: None) -> None:
    server = rpc(stack)
    server.stopProcess(name, True)
    while_stopped()
    server.startProcess(name, True)


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


def am_alert_names(am: str, auth) -> set[str]:
    try:
        return {a["labels"]["alertname"] for a in requests.get(f"{am}/api/v2/alerts", auth=auth, timeout=10).json()}
    except (requests.RequestException, ValueError):
        return set()


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


def vllm_processes(stack) -> dict[str, list[psutil.Process]]:
    """By role (api_server, engine_core, worker); the supervised program is
    leakwatch/native/orphan_reaper.py, the API server its child."""
    reaper = psutil.Process(rpc(stack).getProcessInfo(VLLM_PROGRAM)["pid"])
    api = [p for p in reaper.children() if vllm_tree.is_api_server(p)]
    trees = [vllm_tree.by_role(p) for p in api]
    return {role: [p for tree in trees for p in tree[role]] for role in ("api_server", "engine_core", "worker")}


def serving(stack) -> bool:
    try:
        return requests.get(f"{stack.vllm_url}/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def replaced(stack, old: list[psutil.Process]) -> bool:
    """vLLM serves again, with one new process per role."""
    if not serving(stack):
        return False
    return all(len(procs) == 1 and procs[0] not in old for procs in vllm_processes(stack).values())


@pytest.mark.timeout(2400)  # vLLM restarts slowly on a loaded 2-core machine
@pytest.mark.parametrize("role", ["engine_core", "worker", "api_server"])
def test_kill_9_of_a_vllm_process_restarts_vllm_and_the_exporter_takes_a_new_baseline(stack, role):
    """kill -9 of one process of vLLM's tree: vLLM's own watchdog stops the API server when EngineCore
    or the worker is gone, supervisord starts the program again, VLLMDown fires while vLLM is down
    and resolves once it is back, nothing of the old tree is left behind (an orphaned EngineCore or
    worker keeps its memory), and the exporter sees one process per role, counts the restart and
    takes a new baseline after its warm-up."""
    with environ(stack.env):
        prom = Prometheus(stack.url("prometheus"))
    before = vllm_processes(stack)
    assert all(len(procs) == 1 for procs in before.values()), before
    old = [p for procs in before.values() for p in procs]
    restarts_before = prom.scalar("sum(leakwatch_vllm_restarts_total)") or 0
    killed_at = time.time()
    before[role][0].send_signal(signal.SIGKILL)
    wait_for(
        lambda: replaced(stack, old),
        timeout=900,
        interval=2,
        what=f"vLLM restarted by supervisord after kill -9 of {role}",
    )
    assert fired_since(prom, "VLLMDown", killed_at)
    prom.wait_for('absent(ALERTS{alertname="VLLMDown"})', timeout=120)
    wait_for(
        lambda: not [p for p in old if p.is_running()],
        timeout=120,
        what="no process of the old vLLM left: " + ", ".join(f"{p.pid}" for p in old if p.is_running()),
    )
    for i in range(WARMUP_REQUESTS):  # the exporter's warm-up before it takes a baseline
        requests.post(
            f"{stack.vllm_url}/v1/completions",
            timeout=120,
            json={"model": stack.model, "prompt": f"after kill -9 of {role} {i}", "max_tokens": 8},
        ).raise_for_status()
    for r in before:
        prom.wait_for(f'leakwatch_processes{{role="{r}"}} == 1', timeout=300)
    prom.wait_for(f"sum(leakwatch_vllm_restarts_total) > {restarts_before}", timeout=300)
    prom.wait_for(f"max(leakwatch_baseline_timestamp_seconds) > {killed_at:.0f}", timeout=600)


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


def fired_since(prom: Prometheus, alertname: str, since: float) -> bool:
    span = int(time.time() - since) + 1
    return bool(prom.query(f'max_over_time(ALERTS{{alertname="{alertname}", alertstate="firing"}}[{span}s])'))


def prom_start(prom: Prometheus) -> float:
    return prom.scalar('process_start_time_seconds{job="prometheus"}') or time.time() - 600


def _ok(url: str, auth) -> bool:
    try:
        return requests.get(url, auth=auth, timeout=5).status_code == 200
    except requests.RequestException:
        return False
