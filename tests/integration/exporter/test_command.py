"""`leakwatch exporter` as a process: its HTTP endpoint, its errors, and what its image contains."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import requests
from prometheus_client import CollectorRegistry

from leakwatch.cli import main
from leakwatch.core.paths import REPO_ROOT
from leakwatch.core.ports import free_port
from leakwatch.exporter.server import HEALTH_PATH, serve
from tests.support.exporter_scrape import VllmEndpoint


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--vllm-url", "localhost:8000"], "must start with http:// or https://"),
        (["--warmup-requests", "-1"], "--warmup-requests -1 must be >= 0"),
        (["--sample-interval", "0"], "--sample-interval 0.0 must be > 0"),
        (["--retention-idle", "-5"], "--retention-idle -5.0 must be >= 0"),
        (["--vllm-listen-port", "70000"], "--vllm-listen-port 70000 is outside 1-65535"),
        (["--port", "0"], "--port 0 is outside 1-65535"),
        (["--vllm-url", "http://127.0.0.1:notaport"], "--vllm-url 'http://127.0.0.1:notaport'"),
        (["--vllm-url", "http://:8000"], "is not an http(s) URL"),
        (["--proc-root", "/nonexistent/proc"], "--proc-root /nonexistent/proc is not a directory"),
        (["--state-file", "/nonexistent/dir/state.json"], "/nonexistent/dir is not a directory"),
    ],
)
def test_bad_arguments_are_clear_errors(argv, message, capsys):
    assert main(["exporter", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("leakwatch exporter: error: ") and message in err


def test_a_port_in_use_is_a_clear_error(capsys):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert main(["exporter", "--port", str(port), "--listen-address", "127.0.0.1"]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "LEAKWATCH_EXPORTER_PORT" in err


def test_http_paths():
    registry = CollectorRegistry()
    server = serve(registry, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert requests.get(f"{base}{HEALTH_PATH}", timeout=5).text == "ok\n"
        metrics = requests.get(f"{base}/metrics", timeout=5)
        assert metrics.status_code == 200 and metrics.headers["Content-Type"].startswith("text/plain")
        openmetrics = requests.get(f"{base}/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=5)
        assert openmetrics.text.endswith("# EOF\n")
        assert requests.get(f"{base}/nope", timeout=5).status_code == 404
    finally:
        server.shutdown()


def image_context(tmp_path):
    """What docker/leakwatch.Dockerfile copies, per its COPY lines (and .dockerignore allows)."""
    dockerfile = (REPO_ROOT / "docker" / "leakwatch.Dockerfile").read_text()
    allowed = {
        line[1:].rstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    copied = []
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            copied += line.split()[1:-1]
    assert copied and set(copied) <= allowed, (copied, allowed)
    tmp_path.mkdir(parents=True)
    for name in copied:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tmp_path / name)
    return tmp_path


def test_the_image_contents_are_enough_to_run_the_exporter(tmp_path):
    """No Docker engine here: run the exporter from exactly the files the image copies."""
    context = image_context(tmp_path / "context")
    vllm = VllmEndpoint()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(context), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leakwatch",
            "exporter",
            "--vllm-url",
            vllm.url,
            "--port",
            str(port),
            "--listen-address",
            "127.0.0.1",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                break
            except requests.ConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                time.sleep(0.2)
        assert "leakwatch_vllm_up 1.0" in body and "leakwatch_vllm_metrics_series 430.0" in body
        probe = subprocess.run(
            [sys.executable, "-c", "import leakwatch.core.paths as p; print(p.REPO_ROOT)"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert probe.stdout.strip() == str(context)  # the copy was used, not this checkout
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        vllm.close()
    assert proc.returncode == 0


def test_the_gpu_check_script_says_clearly_when_there_is_no_gpu():
    """scripts/gpu/check_exporter.py runs on GPU hosts only (docs/exporter.md); here it must refuse
    clearly instead of passing or crashing."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "gpu" / "check_exporter.py"), "--steps", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no CUDA GPU here" in result.stderr or "needs PyTorch with CUDA" in result.stderr
