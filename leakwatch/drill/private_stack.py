"""The drill's private native stack and how the drill talks to it: `PrivateStack` takes free ports
and a state directory of its own, writes the drill's time-compressed rules and Alertmanager config,
starts the stack (`DrillStack`: the native stack with the exporters sampling at the drill's pace)
with the environment pointing at it, and on the way out stops it, restores the environment and
removes the state directory; in between it answers for the stack's services (their URLs, Prometheus,
the healer's own metrics, the remediation alerts Alertmanager holds, a notification replayed to the
healer, vLLM's processes and readiness). What the drill does with them is leakwatch.drill.orchestrator's.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import psutil
import requests

from ..core import webauth
from ..core.paths import STATE_DIR_ENV
from ..core.ports import free_port
from ..core.promapi import Prometheus
from ..core.settings import load as load_settings, ready_path
from ..core.state_layout import StateLayout
from ..core.topology import CANARY_SERVICES, HEALER_WEBHOOK_PATH, LOOPBACK_ADDRESS
from ..generate.alertmanager_config import compose_alertmanager_config
from ..native.runner import NativeStack
from . import warmup_sweep
from .drill_settings import DrillConfig, scaled_alertmanager, with_scrape_interval, write_rules

# Both sides' exporters sample at the drill's pace (the canary's with `make up CANARY=1`'s layout).
EXPORTER_SERVICES = ("leakwatch_exporter", CANARY_SERVICES["leakwatch"])


def pss_total(pids: list[int]) -> int:
    """The processes' proportional set sizes together (a process that is gone counts nothing)."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            continue
    return total


class DrillStack(NativeStack):
    """The native stack with the exporter's own sampling sped up by the compression: its PSS
    (smaps) refresh, 60 s in production, would otherwise be two production hours in a drill."""

    compression = 1.0

    def programs(self, profile, *args, **kwargs):
        programs = super().programs(profile, *args, **kwargs)
        out = []
        for prog in programs:
            if prog.service in EXPORTER_SERVICES:
                extra = [
                    "--sample-interval",
                    f"{max(5.0 / self.compression, 0.5):g}",
                    "--smaps-interval",
                    f"{max(60.0 / self.compression, 1.0):g}",
                    "--baseline-idle-wait",
                    f"{max(60.0 / self.compression, 2.0):g}",
                    # The baseline comes after the warm-up's batch-size sweep, not in one of its pauses.
                    "--warmup-requests",
                    str(warmup_sweep.SWEEP_REQUESTS),
                ]
                prog = dataclasses.replace(prog, command=[*prog.command, *extra])
            out.append(prog)
        return out


def vllm_pids(stack: NativeStack | None) -> list[int]:
    """vLLM's processes in `stack` (its API server and engine cores)."""
    pids: list[int] = []
    for proc in stack.processes() if stack else []:
        try:
            if proc.name().startswith("VLLM::") or "vllm.entrypoints" in " ".join(proc.cmdline()):
                pids.append(proc.pid)
        except Exception:  # noqa: BLE001 - a process that just exited
            continue
    return pids


class PrivateStack:
    """The drill's stack: free ports and a state directory of its own (taken when it is made), the
    environment pointing at it while it runs."""

    def __init__(self, cfg: DrillConfig):
        self.cfg = cfg
        settings = load_settings()
        self.settings = with_scrape_interval(settings, cfg.scrape_interval_s)
        self.state = Path(tempfile.mkdtemp(prefix="lw-drill-", dir="/tmp"))  # short: supervisord's socket path
        self.ports = {svc.port_env: str(free_port()) for svc in settings.services.values()}
        self.stack: DrillStack | None = None
        self._env_before: dict[str, str | None] = {}

    def url(self, service: str) -> str:
        return f"http://{LOOPBACK_ADDRESS}:{self.ports[self.settings.service(service).port_env]}"

    @property
    def prom(self) -> Prometheus:
        return Prometheus(self.url("prometheus"))

    def up(self, alert: str, vllm_options: Callable[[], dict], say: Callable[[str], None]) -> None:
        """Writes the time-compressed rules (for `alert`) and the production Alertmanager routing
        (its webhook at this stack's healer) time-scaled, points the environment at the stack and
        starts it with `vllm_options()` (NativeStack.up's vLLM arguments)."""
        cfg = self.cfg
        layout = StateLayout(self.state)
        layout.make_dirs()
        rules_dir = layout.conf / "rules"
        write_rules(rules_dir, cfg.time_compression, cfg.scrape_interval_s, alert)
        # The production routing (the runner points its webhook at this stack's healer), time-scaled.
        am = scaled_alertmanager(compose_alertmanager_config(self.settings), cfg.time_compression, repeat_s=5.0)
        self._env_before = {k: os.environ.get(k) for k in [*self.ports, STATE_DIR_ENV]}
        os.environ.update({**self.ports, STATE_DIR_ENV: str(self.state)})
        stack = self.stack = DrillStack(layout, self.settings)
        stack.compression = cfg.time_compression
        say(
            f"starting a native stack in {self.state} (time compression x{cfg.time_compression:g}, "
            f"scrape every {cfg.scrape_interval_s:g}s)"
        )
        stack.up("demo", rules_dir=rules_dir, alertmanager_config=am, out=io.StringIO(), **vllm_options())

    def down(self) -> None:
        """Stops the stack, if it was started."""
        if self.stack is not None:
            self.stack.down(out=io.StringIO())

    def clean_up(self, keep_state: bool) -> None:
        """The environment as it was before `up`; the state directory removed unless `keep_state`."""
        for key, value in self._env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if not keep_state:
            shutil.rmtree(self.state, ignore_errors=True)

    def vllm_pids(self) -> list[int]:
        return vllm_pids(self.stack)

    def vllm_ready(self) -> bool:
        """vLLM's readiness endpoint answers 200."""
        try:
            return requests.get(f"{self.url('vllm')}{ready_path('vllm')}", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def healer_metric(self, name: str, **labels) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        text = requests.get(f"{self.url('healer')}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0

    def remediation_alerts(self, matcher: str) -> list[dict]:
        """The firing alerts `matcher` selects (the remediation alerts) from Alertmanager's API:
        fingerprint, startsAt and labels exactly as its webhook sends them."""
        try:
            am = self.url("alertmanager")
            resp = requests.get(
                f"{am}/api/v2/alerts",
                timeout=10,
                auth=webauth.auth_for(am),
                params={"filter": matcher, "active": "true"},
            )
            resp.raise_for_status()
        except requests.RequestException:
            return []
        return [
            {
                "status": "firing",
                "labels": a["labels"],
                "annotations": a.get("annotations", {}),
                "startsAt": a["startsAt"],
                "endsAt": a.get("endsAt", ""),
                "generatorURL": a.get("generatorURL", ""),
                "fingerprint": a["fingerprint"],
            }
            for a in resp.json()
        ]

    def replay_to_healer(self, alerts: list[dict]) -> list[str]:
        """What Alertmanager's repeat_interval does: the notification of `alerts` again, straight to
        the healer; its decisions (or the HTTP status)."""
        token = StateLayout(self.state).healer_token.read_text().strip()
        body = {
            "version": "4",
            "status": "firing",
            "receiver": "remediation",
            "groupKey": "drill-repeat",
            "groupLabels": {},
            "commonLabels": {},
            "commonAnnotations": {},
            "externalURL": self.url("alertmanager"),
            "truncatedAlerts": 0,
            "alerts": alerts,
        }
        resp = requests.post(
            self.url("healer") + HEALER_WEBHOOK_PATH,
            json=body,
            timeout=10,
            headers={"Authorization": f"Bearer {token}"},
        )
        return [a["decision"] for a in resp.json().get("alerts", [])] if resp.ok else [f"HTTP {resp.status_code}"]
