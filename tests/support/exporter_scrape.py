"""Fixtures for the exporter's unit tests: /proc trees, a stand-in vLLM HTTP endpoint, a clock, NVML.

The stand-ins replace only what cannot run in a unit test (a vLLM server costs ~40 s to start; NVML
needs a GPU). tests/stack/test_exporter_live.py runs the same code against the real vLLM server.
"""

from __future__ import annotations

import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "exporter"
# A verbatim /metrics of the real vLLM 0.32 CPU server (demo model) after 410 requests.
VLLM_METRICS = (FIXTURES / "vllm_metrics.txt").read_text()
VLLM_PORT = 8000  # the port the fixture /proc tree's API server (pid 100) listens on
KIB = 1024


def proc_tree(tmp_path: Path) -> Path:
    """A writable copy of tests/fixtures/exporter/proc (pid 100 = API server, 102 = EngineCore,
    103/104 = workers TP0/TP1, 101 = resource tracker; 200/201 = another vLLM on port 8100)."""
    target = tmp_path / "proc"
    shutil.copytree(FIXTURES / "proc", target, symlinks=True)
    return target


def cgroup_tree(tmp_path: Path) -> Path:
    target = tmp_path / "cgroup"
    shutil.copytree(FIXTURES / "cgroup_v2", target)
    return target


def vllm_metrics(served: float, in_flight: float = 0) -> str:
    """The captured /metrics with the request counter and the running gauge set."""
    lines = []
    for line in VLLM_METRICS.splitlines():
        if line.startswith("vllm:request_success_total{"):
            value = served if 'finished_reason="length"' in line else 0.0
            line = f"{line.rsplit(' ', 1)[0]} {value}"
        elif line.startswith("vllm:num_requests_running{"):
            line = f"{line.rsplit(' ', 1)[0]} {float(in_flight)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


class Scraped:
    """A parsed exposition: families by name and `value(name, **labels)` like get_sample_value."""

    def __init__(self, text: str):
        from prometheus_client.parser import text_string_to_metric_families

        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}

    @classmethod
    def get(cls, url: str) -> Scraped:
        import requests

        resp = requests.get(url, timeout=30)
        resp.raise_for_status()
        return cls(resp.text)

    def value(self, name: str, **labels: str) -> float | None:
        for family in self.families.values():
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return sample.value
        return None

    def samples(self, name: str) -> list:
        return [s for f in self.families.values() for s in f.samples if s.name == name]


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class VllmEndpoint:
    """An HTTP server on 127.0.0.1 answering /metrics and /health like vLLM, with settable content."""

    def __init__(self):
        self.metrics = vllm_metrics(0)
        self.health_status = 200
        self.requests: list[str] = []
        # Set: /metrics waits for it before answering (a stalled event loop).
        self.release = threading.Event()
        self.release.set()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                endpoint.requests.append(self.path)
                if self.path == "/metrics":
                    endpoint.release.wait(timeout=60)
                    status, body = 200, endpoint.metrics.encode()
                elif self.path == "/health":
                    status, body = endpoint.health_status, b""
                else:
                    status, body = 404, b""
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def set(self, served: float, in_flight: float = 0) -> None:
        self.metrics = vllm_metrics(served, in_flight)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeNvml:
    """The slice of pynvml the exporter calls, for two GPUs; set `fail` to make reads raise."""

    class NVMLError(Exception):
        pass

    def __init__(self, devices: list[tuple[int, int]], processes: dict[int, list[tuple[int, int | None]]]):
        self.devices = devices  # [(used, total)] per device index
        self.processes = processes  # device index -> [(pid, used bytes or None)]
        self.fail = False
        self.initialised = False

    def nvmlInit(self):
        self.initialised = True

    def nvmlShutdown(self):
        self.initialised = False

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMemoryInfo(self, handle):
        if self.fail:
            raise self.NVMLError("GPU is lost")
        used, total = self.devices[handle]
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle:08d}-fake"

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes.get(handle, [])]
