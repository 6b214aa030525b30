"""The optional vLLM API key, on a real vLLM (CPU) started the way the native runner starts it with a
key: `python -m leakwatch.core.vllm_key FILE -- ...`. /v1 asks for the key; /health and /metrics (the
exporter's and Prometheus's) stay open; the key is on no command line."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time

import psutil
import pytest
import requests

from leakwatch.core import profiles as model_profiles
from leakwatch.core.ports import free_port
from leakwatch.demo_model import command as demo_model
from tests.support.native_stack import assert_no_vllm_running

pytestmark = [pytest.mark.slow]


def test_vllm_with_a_key_file_guards_v1_and_leaves_health_and_metrics_open(tmp_path):
    model = demo_model.build(tmp_path / "demo")
    key_file = tmp_path / "vllm-api-key"
    key = secrets.token_urlsafe(24)
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    profile = model_profiles.load("demo")
    port = free_port()
    assert_no_vllm_running("the API-key vLLM")
    log = open(tmp_path / "vllm.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leakwatch.core.vllm_key",
            str(key_file),
            "--",
            *model_profiles.vllm_engine_args(profile, str(model)),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **model_profiles.vllm_environment(profile)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900
        while True:
            assert proc.poll() is None, (tmp_path / "vllm.log").read_text()[-3000:]
            try:
                if requests.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "vLLM did not start"
            time.sleep(2)
        assert requests.get(f"{url}/v1/models", timeout=30).status_code == 401
        assert (
            requests.get(
                f"{url}/v1/models", headers={"Authorization": "Bearer wrong-key-1234567890"}, timeout=30
            ).status_code
            == 401
        )
        models = requests.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert models.status_code == 200
        assert requests.get(f"{url}/metrics", timeout=30).status_code == 200
        # exec kept the PID: supervisord and the exporter see vLLM itself; the key is on no command line.
        me = psutil.Process(proc.pid)
        assert "vllm.entrypoints.openai.api_server" in " ".join(me.cmdline())
        for p in [me, *me.children(recursive=True)]:
            assert key not in " ".join(p.cmdline())
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
