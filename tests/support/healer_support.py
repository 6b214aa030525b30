"""A running healer for tests: the real HTTP server and policy, restarting a stand-in target under a
real supervisord through its XML-RPC socket."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import requests

from leakwatch.core.ports import free_port
from leakwatch.core.state_layout import StateLayout
from leakwatch.heal import healer_settings
from leakwatch.heal.decisions import Healer
from leakwatch.heal.healer_metrics import HealerMetrics
from leakwatch.heal.http_server import HealerServer
from leakwatch.heal.policy import Policy
from leakwatch.heal.restarters import SupervisorRestarter
from leakwatch.heal.vllm_probe import VllmProbe
from leakwatch.native import supervisor
from leakwatch.native.programs import Program
from tests.support.native_stack import short_state_dir

STANDIN = Path(__file__).with_name("standin_target.py")
TOKEN = secrets.token_urlsafe(32)


@dataclasses.dataclass
class Target:
    layout: StateLayout
    url: str

    def rpc(self):
        return supervisor.client(self.layout.supervisor_socket).supervisor

    def pid(self) -> int:
        return self.rpc().getProcessInfo("vllm")["pid"]

    def starts(self) -> list[int]:
        """PIDs of every start of the target so far (written by the target itself)."""
        path = self.layout.root / "starts.log"
        return [int(x) for x in path.read_text().split()] if path.exists() else []


@contextlib.contextmanager
def supervised_standin(stop_wait_s: int = 5, ignore_sigterm: bool = False):
    """The stand-in target under a real supervisord. ignore_sigterm: it stops only when supervisord
    SIGKILLs it after stop_wait_s (a vLLM whose drain outlasts the healer's patience)."""
    layout = StateLayout(short_state_dir("lw-heal-"))
    layout.make_dirs()
    port = free_port()
    program = Program(
        "vllm",
        "vllm",
        [sys.executable, str(STANDIN), str(port), str(layout.root / "starts.log")],
        environment={"LEAKWATCH_STANDIN_IGNORE_SIGTERM": "1"} if ignore_sigterm else {},
        stop_wait_s=stop_wait_s,
    )
    layout.supervisord_conf.write_text(supervisor.render_conf(layout, [program], {}))
    subprocess.run([str(Path(sys.executable).with_name("supervisord")), "-c", str(layout.supervisord_conf)], check=True)
    target = Target(layout, f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while not VllmProbe(target.url).healthy():
            assert time.monotonic() < deadline, "stand-in target did not start"
            time.sleep(0.2)
        yield target
    finally:
        try:
            target.rpc().shutdown()
        except Exception:  # noqa: BLE001 - already gone
            pass
        deadline = time.monotonic() + 30
        while layout.supervisord_pid.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        shutil.rmtree(layout.root, ignore_errors=True)


@contextlib.contextmanager
def running_healer(target: Target, state_file: Path | None = None, stop_timeout_s: float = 60.0, **overrides):
    cfg = dataclasses.replace(healer_settings.load(), **{"idle_wait_s": 1.0, "ready_timeout_s": 60.0, **overrides})
    healer = Healer(
        cfg,
        TOKEN,
        Policy(cfg, state_file),
        SupervisorRestarter(target.layout.supervisor_socket, stop_timeout_s=stop_timeout_s),
        VllmProbe(target.url),
        HealerMetrics(),
    )
    server = HealerServer(healer, "127.0.0.1", free_port())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", healer
    finally:
        server.shutdown()
        server.server_close()
        if healer.worker is not None:
            healer.worker.join(timeout=120)


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def alert(
    status: str = "firing",
    name: str = "HostMemoryLeak",
    remediate: str | None = "true",
    fingerprint: str = "a1b2c3d4e5f60718",
    starts_at: float | None = None,
    **labels,
) -> dict:
    all_labels = {"alertname": name, "severity": "critical", "job": "leakwatch", "instance": "127.0.0.1:9405", **labels}
    if remediate is not None:
        all_labels["remediate"] = remediate
    return {
        "status": status,
        "labels": all_labels,
        "annotations": {"summary": "test"},
        "startsAt": rfc3339(starts_at if starts_at is not None else time.time() - 60),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint,
    }


def notification(*alerts: dict, status: str = "firing") -> dict:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="x"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "remediation",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


def post(url: str, body, token: str | None = TOKEN, headers: dict | None = None) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    return requests.post(f"{url}/alerts", data=data, headers=hdrs, timeout=30)


def metric(url: str, name: str, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise KeyError(f"{name}{labels} not exposed")


@dataclasses.dataclass
class HealerProcess:
    """A real `leakwatch heal` process; its log goes to a file the test reads."""

    proc: subprocess.Popen
    url: str
    log: Path
    token: str

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def post(self, body, **kw) -> requests.Response:
        return post(self.url, body, token=kw.pop("token", self.token), **kw)

    def rss_kib(self) -> int:
        return _status_field(self.proc.pid, "VmRSS")

    def threads(self) -> int:
        return _status_field(self.proc.pid, "Threads")


def _status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise KeyError(name)


def policy_file(folder: Path, **overrides) -> Path:
    """config/healer.yaml with some keys changed, as written there (cooldown="0s"; drain.* as
    drain_idle_wait / drain_ready_timeout)."""
    import yaml

    raw = yaml.safe_load(healer_settings.CONFIG_FILE.read_text())
    raw["drain"].update({"idle_wait": "1s", "ready_timeout": "60s"})
    for key, value in overrides.items():
        if key.startswith("drain_"):
            raw["drain"][key.removeprefix("drain_")] = value
        else:
            raw[key] = value
    path = folder / "healer.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def start_healer_process(
    target: Target, folder: Path, *extra: str, state_file: Path | None = None, wait: bool = True, **policy
) -> HealerProcess:
    from leakwatch.heal.token import ensure_file

    token_file = ensure_file(folder / "token")
    port = free_port()
    log = folder / f"healer-{port}.log"
    args = [
        sys.executable,
        "-m",
        "leakwatch",
        "heal",
        "--token-file",
        str(token_file),
        "--port",
        str(port),
        "--supervisor-socket",
        str(target.layout.supervisor_socket),
        "--vllm-url",
        target.url,
        "--config",
        str(policy_file(folder, **policy)),
        *extra,
    ]
    if state_file is not None:
        args += ["--state-file", str(state_file)]
    with open(log, "w") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT)
    healer = HealerProcess(proc, f"http://127.0.0.1:{port}", log, token_file.read_text().strip())
    if wait:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"healer exited {proc.returncode}: {healer.log_text()[-2000:]}"
            try:
                if requests.get(f"{healer.url}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "healer did not start"
            time.sleep(0.2)
    return healer


@contextlib.contextmanager
def healer_process(target: Target, folder: Path, *extra: str, **kw):
    healer = start_healer_process(target, folder, *extra, **kw)
    try:
        yield healer
    finally:
        stop_healer(healer)


def stop_healer(healer: HealerProcess) -> None:
    if healer.proc.poll() is None:
        healer.proc.terminate()
        try:
            healer.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            healer.proc.kill()
            healer.proc.wait(timeout=10)


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout:.0f}s")
