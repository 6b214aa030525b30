"""The README's `make up` / `make down` on the real native stack: vLLM (CPU), Prometheus,
Alertmanager and node exporter under supervisord; traffic, scrapes and a clean stop.

These act on the shared stack (one vLLM start fewer in `make test`): `make up` with its ports and
state folder finds it running and checks its health, and `make down`, the last of its tests (the
`stops_stack` mark), stops it. A cold `make up` takes the same path into NativeStack.up as every
stack of this tier (leakwatch/stack/command.py's run); the compose tier starts its stack cold with `make up`.
A crash (kill -9 of the worker) and supervisord's restart are tests/stack/test_exporter_leak.py's."""

from __future__ import annotations

import os
import subprocess

import psutil
import pytest
import requests

from leakwatch.core.paths import REPO_ROOT
from leakwatch.core.promapi import Prometheus
from leakwatch.native.runner import NativeStack
from tests.support.native_stack import RunningStack, environ

pytestmark = [pytest.mark.slow]


def make(target: str, stack: RunningStack, timeout: int = 900) -> subprocess.CompletedProcess:
    """`make <target>` as a user types it, in the shared stack's ports and state folder."""
    return subprocess.run(
        ["make", "--no-print-directory", target, f"MODEL={stack.model}", "STACK=native"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env={**os.environ, **stack.env},
    )


def test_make_up_on_a_running_stack_checks_its_health_prints_the_urls_and_starts_nothing(native_stack):
    before = {p.pid for p in native_stack.stack.processes()}
    result = make("up", native_stack)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "already running" in result.stdout
    assert f"{native_stack.vllm_url}/v1" in result.stdout
    assert native_stack.url("prometheus") in result.stdout
    assert {p.pid for p in native_stack.stack.processes()} == before


def test_prometheus_sees_traffic_and_every_target(native_stack):
    for i in range(5):
        resp = requests.post(
            f"{native_stack.vllm_url}/v1/completions",
            timeout=60,
            json={"model": native_stack.model, "prompt": f"request {i}", "max_tokens": 16},
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] == 16
    with environ(native_stack.env):  # finds this stack's Prometheus credentials (leakwatch/core/webauth.py)
        prom = Prometheus(native_stack.url("prometheus"))
    prom.wait_for(f'sum(vllm:request_success_total{{model_name="{native_stack.model}"}}) >= 5', timeout=90)
    assert prom.query("node_memory_MemAvailable_bytes"), "node exporter memory has no samples"
    prom.wait_for("count(up == 0) == 0 or absent(up == 0)", timeout=60)
    targets = prom.targets()
    jobs = {t["labels"]["job"] for t in targets}
    assert {"vllm", "prometheus", "alertmanager", "node"} <= jobs
    assert all(t["health"] == "up" for t in targets), [(t["labels"]["job"], t["lastError"]) for t in targets]


@pytest.mark.stops_stack
def test_make_down_leaves_no_process_behind(native_stack):
    pids = [p.pid for p in native_stack.stack.processes()]
    assert len(pids) >= 6, "expected supervisord, Prometheus, Alertmanager, node exporter and vLLM's processes"
    result = make("down", native_stack, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stopped" in result.stdout
    with environ(native_stack.env):
        assert NativeStack().processes() == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    for service in ("vllm", "prometheus", "alertmanager", "node_exporter"):
        with pytest.raises(requests.ConnectionError):
            requests.get(native_stack.url(service), timeout=5)
