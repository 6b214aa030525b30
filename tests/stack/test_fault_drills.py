"""Fault drills on the real native stack (one stack for the module): kill -9 of vLLM's EngineCore, its
worker or its API server -> supervised restart, nothing of the old process tree left, and the
exporter re-discovers the processes and takes a new baseline; a Prometheus restart keeps its TSDB
and the firing Watchdog fires again; an Alertmanager restart keeps its silences (storage on disk).
Everything through the stack's basic auth."""

from __future__ import annotations

import signal
import time
from datetime import datetime, timedelta, timezone

import psutil
import pytest
import requests

from leakwatch import webauth
from leakwatch.exporter.derived import WARMUP_REQUESTS
from leakwatch.native.programs import VLLM_PROGRAM
from leakwatch.native.runner import NativeStack
from leakwatch.promapi import Prometheus

from ..conftest import environ, running_native_stack
from ..healer_support import wait_for

# One stack for the module (its own xdist group: the kills restart its vLLM three times).
pytestmark = [pytest.mark.stack, pytest.mark.slow, pytest.mark.xdist_group("fault_drills_stack")]


@pytest.fixture(scope="module")
def stack():
    with running_native_stack("lw-fault-") as running:
        yield running


def rpc(stack):
    with environ(stack.env):
        return NativeStack().rpc()


def restart_program(stack, name: str) -> None:
    server = rpc(stack)
    server.stopProcess(name, True)
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
    wait_for(
        lambda: (
            "Watchdog"
            in {a["labels"]["alertname"] for a in requests.get(f"{am}/api/v2/alerts", auth=auth, timeout=10).json()}
        ),
        timeout=300,
        interval=5,
        what="Watchdog in Alertmanager",
    )


# EngineCore and the worker, below the API server, are titled by vLLM.
TITLES = {"engine_core": "VLLM::EngineCor", "worker": "VLLM::Worker"}


def vllm_processes(stack) -> dict[str, list[psutil.Process]]:
    """By role; the supervised program is leakwatch/native/orphan_reaper.py, the API server its child."""
    reaper = psutil.Process(rpc(stack).getProcessInfo(VLLM_PROGRAM)["pid"])
    api = [p for p in reaper.children() if "vllm.entrypoints" in " ".join(p.cmdline())]
    children = [c for p in api for c in p.children(recursive=True)]
    found = {"api_server": api}
    for role, title in TITLES.items():
        found[role] = [p for p in children if p.name().startswith(title)]
    return found


def serving(stack) -> bool:
    try:
        return requests.get(f"{stack.vllm_url}/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.timeout(2400)  # vLLM restarts slowly on a loaded 2-core machine
@pytest.mark.parametrize("role", ["engine_core", "worker", "api_server"])
def test_kill_9_of_a_vllm_process_restarts_vllm_and_the_exporter_takes_a_new_baseline(stack, role):
    """kill -9 of one process of vLLM's tree: vLLM's own watchdog stops the API server when EngineCore
    or the worker is gone, supervisord starts the program again, nothing of the old tree is left
    behind (an orphaned EngineCore or worker keeps its memory), and the exporter sees one process per
    role, counts the restart and takes a new baseline after its warm-up."""
    with environ(stack.env):
        prom = Prometheus(stack.url("prometheus"))
    before = vllm_processes(stack)
    assert all(len(procs) == 1 for procs in before.values()), before
    old = [p for procs in before.values() for p in procs]
    restarts_before = prom.scalar("sum(leakwatch_vllm_restarts_total)") or 0
    killed_at = time.time()
    before[role][0].send_signal(signal.SIGKILL)

    def restarted() -> bool:
        if not serving(stack):
            return False
        now = vllm_processes(stack)
        return all(len(now[r]) == 1 and now[r][0] not in old for r in now)

    wait_for(restarted, timeout=900, interval=2, what=f"vLLM restarted by supervisord after kill -9 of {role}")
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


def prom_start(prom: Prometheus) -> float:
    return prom.scalar('process_start_time_seconds{job="prometheus"}') or time.time() - 600


def _ok(url: str, auth) -> bool:
    try:
        return requests.get(url, auth=auth, timeout=5).status_code == 200
    except requests.RequestException:
        return False
