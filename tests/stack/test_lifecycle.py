"""The README's `make up` / `make down` on the real native stack: vLLM (CPU), Prometheus,
Alertmanager and node exporter under supervisord; traffic, scrapes, a crash and a clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime, timezone

import psutil
import pytest
import requests

from leakwatch.native.runner import NativeStack
from leakwatch.paths import REPO_ROOT
from leakwatch.promapi import Prometheus
from tests.support import vllm_tree
from tests.support.native_stack import environ, short_state_dir, stack_port_env

pytestmark = [pytest.mark.slow]


def make(target: str, env: dict, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", target, "MODEL=demo", "STACK=native"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env={**os.environ, **env},
    )


@pytest.fixture(scope="module")
def stack_env():
    env = {**stack_port_env(), "LEAKWATCH_STATE_DIR": str(short_state_dir("lw-life-"))}
    yield env
    with environ(env):  # a failing test must not leave a stack behind
        NativeStack().down()


def url(env, port_env):
    return f"http://127.0.0.1:{env[port_env]}"


def complete(env, n: int) -> None:
    for i in range(n):
        resp = requests.post(
            f"{url(env, 'VLLM_PORT')}/v1/completions",
            timeout=60,
            json={"model": "demo", "prompt": f"request {i}", "max_tokens": 16},
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] == 16


def test_make_up_starts_a_healthy_stack(stack_env):
    result = make("up", stack_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"http://127.0.0.1:{stack_env['VLLM_PORT']}/v1" in result.stdout
    assert f"http://127.0.0.1:{stack_env['PROMETHEUS_PORT']}" in result.stdout
    assert requests.get(f"{url(stack_env, 'VLLM_PORT')}/health", timeout=10).status_code == 200


def test_make_up_twice_is_harmless(stack_env):
    with environ(stack_env):
        before = {p.pid for p in NativeStack().processes()}
    result = make("up", stack_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "already running" in result.stdout
    with environ(stack_env):
        assert {p.pid for p in NativeStack().processes()} == before


def test_prometheus_sees_traffic_and_every_target(stack_env):
    complete(stack_env, 5)
    with environ(stack_env):  # finds this stack's Prometheus credentials (leakwatch/webauth.py)
        prom = Prometheus(url(stack_env, "PROMETHEUS_PORT"))
    prom.wait_for('sum(vllm:request_success_total{model_name="demo"}) >= 5', timeout=90)
    assert prom.query("node_memory_MemAvailable_bytes"), "node exporter memory has no samples"
    prom.wait_for("count(up == 0) == 0 or absent(up == 0)", timeout=60)
    targets = prom.targets()
    jobs = {t["labels"]["job"] for t in targets}
    assert {"vllm", "prometheus", "alertmanager", "node"} <= jobs
    assert all(t["health"] == "up" for t in targets), [(t["labels"]["job"], t["lastError"]) for t in targets]
    up = prom.query("up")
    assert up and all(float(s["value"][1]) == 1 for s in up)


def test_supervisor_restarts_vllm_after_worker_is_killed(stack_env):
    with environ(stack_env):
        stack = NativeStack()
        (api,) = [p for p in stack.processes() if vllm_tree.is_api_server(p)]
        workers = vllm_tree.by_role(api)["worker"]
        assert len(workers) == 1, [p.name() for p in stack.processes()]
        old_api_pids = {api.pid}
    killed_at = time.time()
    os.kill(workers[0].pid, signal.SIGKILL)

    health = f"{url(stack_env, 'VLLM_PORT')}/health"
    deadline = time.monotonic() + 600  # generous: a loaded 2-core machine restarts vLLM slowly
    while time.monotonic() < deadline:
        try:
            ok = requests.get(health, timeout=5).status_code == 200
        except requests.RequestException:
            ok = False
        with environ(stack_env):
            new_api = {p.pid for p in NativeStack().processes() if vllm_tree.is_api_server(p)}
        if ok and new_api and not new_api & old_api_pids:
            break
        time.sleep(1)
    else:
        pytest.fail("vLLM did not come back healthy within 600 s after its worker was killed")
    complete(stack_env, 1)

    with environ(stack_env):  # finds this stack's Prometheus credentials (leakwatch/webauth.py)
        prom = Prometheus(url(stack_env, "PROMETHEUS_PORT"))

    def scraped_after_restart(_):
        target = next(t for t in prom.targets() if t["labels"]["job"] == "vllm")
        # RFC 3339 with nanoseconds; seconds precision is enough here.
        scraped = datetime.fromisoformat(target["lastScrape"][:19]).replace(tzinfo=timezone.utc).timestamp()
        return target["health"] == "up" and scraped > killed_at + 1

    prom.wait_for('up{job="vllm"} == 1', predicate=scraped_after_restart, timeout=120)
    # The new process is what Prometheus scrapes now.
    started = prom.scalar('process_start_time_seconds{job="vllm"}')
    assert started is not None and started > killed_at


def test_make_down_leaves_no_process_behind(stack_env):
    with environ(stack_env):
        pids = [p.pid for p in NativeStack().processes()]
    assert len(pids) >= 6, "expected supervisord, Prometheus, Alertmanager, node exporter and vLLM's processes"
    result = make("down", stack_env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stopped" in result.stdout
    with environ(stack_env):
        assert NativeStack().processes() == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    for port_env in ("VLLM_PORT", "PROMETHEUS_PORT", "ALERTMANAGER_PORT", "NODE_EXPORTER_PORT"):
        with pytest.raises(requests.ConnectionError):
            requests.get(url(stack_env, port_env), timeout=5)
