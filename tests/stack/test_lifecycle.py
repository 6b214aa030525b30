"""The README's `make up` / `make down` on the real native stack: vLLM (CPU), Prometheus,
Alertmanager and node exporter under supervisord; traffic, scrapes and a clean stop. A crash (kill -9
of the worker) and supervisord's restart are tests/stack/test_exporter_leak.py's, on the shared stack."""

from __future__ import annotations

import os
import subprocess

import psutil
import pytest
import requests

from leakwatch.native.runner import NativeStack
from leakwatch.paths import REPO_ROOT
from leakwatch.promapi import Prometheus
from tests.support.native_stack import assert_no_vllm_running, environ, short_state_dir, stack_port_env

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
    assert_no_vllm_running("`make up`")
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
