"""The drill, end to end on a private native stack (free ports, its own state directory):

1. start vLLM with the leak injector, the drill's time-compressed rules and Alertmanager config;
2. warm up, then a control phase: production-day traffic on /v1/chat/completions (not injected);
3. put vLLM into a memory cgroup (usage + headroom) and run production-day traffic on
   /v1/completions, which keeps `bytes_per_request` per request;
4. wait for the leak alert, the remediation alert, Alertmanager -> healer -> drain and restart;
5. check memory is back near its pre-leak level, that repeats did not restart it again, and run
   `leakwatch check` on both phases: NO-LEAK for the control, the injected bytes/request for the leak.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from .. import vllm_warmup
from ..core import alert_config, vllm_key, webauth
from ..core.errors import LeakwatchError
from ..core.paths import REPO_ROOT, STATE_DIR_ENV
from ..core.ports import free_port
from ..core.promapi import Prometheus
from ..core.settings import load as load_settings, ready_path
from ..core.state_layout import StateLayout
from ..core.topology import CANARY_SERVICES, HEALER_WEBHOOK_PATH, LOOPBACK_ADDRESS
from ..generate.alertmanager_config import compose_alertmanager_config
from ..heal import healer_settings
from ..leakcheck.analysis import CheckResult
from ..leakcheck.command import add_arguments as add_check_arguments, run_check
from ..loadgen import conventions
from ..native.runner import NativeStack
from . import leak_middleware, selfcheck
from .cgroup_limit import MemoryCgroup
from .drill_settings import LEAK_ALERT, DrillConfig, scaled_alertmanager, with_scrape_interval, write_rules
from .load import CpuHog, load_average
from .phases import PhaseWatcher, RecoveryPhases

MIDDLEWARE = "leakwatch.drill.leak_middleware.leak_memory"
# Both sides' exporters sample at the drill's pace (the canary's with `make up CANARY=1`'s layout).
EXPORTER_SERVICES = ("leakwatch_exporter", CANARY_SERVICES["leakwatch"])
API_MEMORY = (
    'sum(leakwatch_process_anonymous_memory_bytes{role="api_server"})'
    ' or sum(leakwatch_process_resident_memory_bytes{role="api_server"})'
    f" or sum(process_resident_memory_bytes{{{alert_config.load().selector('vllm')}}})"
)


@dataclass
class DrillResult:
    compression: float
    injected_bytes_per_request: int
    control: dict = field(default_factory=dict)  # leakwatch check --json of the control phase
    leak: dict = field(default_factory=dict)  # ... of the leak phase
    estimate_bytes_per_request: float | None = None
    estimate_error_pct: float | None = None
    alert_s: float | None = None  # leak start -> first HostMemoryLeak firing
    remediation_alert_s: float | None = None  # leak start -> the remediate="true" twin firing
    recover_s: float | None = None  # first leak alert -> memory back near baseline
    baseline_bytes: float | None = None
    recovered_bytes: float | None = None
    restarts: int = 0
    notifications: int = 0
    attribution: dict = field(default_factory=dict)  # selfcheck.AlertAttribution.as_dict()
    phases: dict = field(default_factory=dict)  # recovery phase -> seconds (phases.PHASES)
    phases_summary: str = ""
    cpu_hogs: int = 0  # the loaded variant's busy processes
    load_average: list[float] = field(default_factory=list)  # 1-min load at leak start, alert, recovery
    failures: list[str] = field(default_factory=list)
    # The fast-leak variant (leakwatch.drill.fast_leak): what was left of the cgroup's headroom when
    # the healer began, how long it would have lasted at the leak's pace (production minutes), and
    # how many processes the kernel's OOM killer ended in vLLM's cgroup.
    headroom_left_bytes: float | None = None
    lead_min: float | None = None
    oom_kills: int | None = None

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary_line(self) -> str:
        def f(v, digits=1):
            return "none" if v is None else f"{v:.{digits}f}"

        line = (
            f"drill: alert_s={f(self.alert_s)} recover_s={f(self.recover_s)} "
            f"estimate_err_pct={f(self.estimate_error_pct)}"
        )
        if self.phases_summary:
            line += f" {self.phases_summary}"
        load = max(self.load_average) if self.load_average else None
        if self.oom_kills is not None:
            line += f" lead_min={f(self.lead_min)} oom_kills={self.oom_kills}"
        return line + f" cpu_hogs={self.cpu_hogs} load_max={f(load)}"


def pss_total(pids: list[int]) -> int:
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
                    str(vllm_warmup.SWEEP_REQUESTS),
                ]
                prog = dataclasses.replace(prog, command=[*prog.command, *extra])
            out.append(prog)
        return out


class Drill:
    def __init__(self, cfg: DrillConfig, out=sys.stdout, keep_state: bool = False, cpu_hogs: int = 0):
        self.cfg = cfg
        self.cpu_hogs = cpu_hogs
        self.out = out
        self.keep_state = keep_state
        self.remediation = healer_settings.load()  # the label the healer acts on
        settings = load_settings()
        self.settings = with_scrape_interval(settings, cfg.scrape_interval_s)
        self.state = Path(tempfile.mkdtemp(prefix="lw-drill-", dir="/tmp"))  # short: supervisord's socket path
        self.ports = {svc.port_env: str(free_port()) for svc in settings.services.values()}
        self.result = DrillResult(cfg.time_compression, cfg.bytes_per_request, cpu_hogs=cpu_hogs)
        self.episode: list[dict] = []  # the remediation alerts as Alertmanager holds them
        self.stack: DrillStack | None = None
        self._env_before: dict[str, str | None] = {}

    def say(self, text: str) -> None:
        print(f"[drill {time.strftime('%H:%M:%S')}] {text}", file=self.out, flush=True)

    # -- helpers -----------------------------------------------------------------------------------

    def url(self, service: str) -> str:
        return f"http://{LOOPBACK_ADDRESS}:{self.ports[self.settings.service(service).port_env]}"

    @property
    def prom(self) -> Prometheus:
        return Prometheus(self.url("prometheus"))

    def healer_metric(self, name: str, **labels) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        text = requests.get(f"{self.url('healer')}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0

    def locust(self, api: str, span_s: float, log_name: str, service: str = "vllm") -> subprocess.Popen:
        """Locust's production-day shape against `service`, time-compressed like the rules."""
        cmd = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(REPO_ROOT / "loadtest" / "creative_writing.py"),
            "--config",
            str(REPO_ROOT / "loadtest" / "locust.conf"),
            "--headless",
            "--only-summary",
            "--host",
            self.url(service),
            "--model",
            "demo",
            "--client-profile",
            "demo",
            "--api",
            api,
            "--load-shape",
            "production-day",
            "--requests-per-day",
            f"{self.cfg.requests_per_day:g}",
            "--time-compression",
            f"{self.cfg.time_compression:g}",
            "--day-length",
            f"{span_s:.0f}s",
            "--stop-timeout",
            "10",
        ]
        log = open(StateLayout(self.state).log(log_name), "w")  # noqa: SIM115 - the child owns it
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env={**os.environ, **self.ports, "PYTHONUNBUFFERED": "1"},
        )

    def warm_up(self, service: str = "vllm") -> None:
        # vLLM's per-batch-size caches first: filling them during the control phase reads as a leak.
        url = self.url(service)
        vllm_warmup.sweep_batch_sizes(url, "demo")
        rules = conventions.for_profile("demo")  # the served model's client conventions, as the load test's
        for i in range(self.cfg.warmup_requests):
            resp = requests.post(
                f"{url}/v1/chat/completions",
                timeout=120,
                headers=vllm_key.headers_for(url),
                json={
                    "model": "demo",
                    "max_tokens": 16,
                    **rules.request_fields(),
                    "messages": rules.prompt([{"role": "user", "content": f"warm-up {i}"}]),
                },
            )
            resp.raise_for_status()

    def api_memory(self) -> float | None:
        try:
            return self.prom.scalar(API_MEMORY)
        except LeakwatchError:
            return None

    def check(self, start: float, end: float) -> CheckResult:
        return check_phase(self.url("prometheus"), self.cfg, start, end)

    def alertmanager_remediation_alerts(self) -> list[dict]:
        """The firing remediation alerts from Alertmanager's API: fingerprint, startsAt and labels
        exactly as its webhook sends them."""
        try:
            am = self.url("alertmanager")
            resp = requests.get(
                f"{am}/api/v2/alerts",
                timeout=10,
                auth=webauth.auth_for(am),
                params={"filter": self.remediation.remediation_matcher, "active": "true"},
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

    def repeat_notification(self) -> list[str]:
        """What Alertmanager's repeat_interval does: the same notification again. The healer must
        answer without a second restart."""
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
            "alerts": self.episode,
        }
        resp = requests.post(
            self.url("healer") + HEALER_WEBHOOK_PATH,
            json=body,
            timeout=10,
            headers={"Authorization": f"Bearer {token}"},
        )
        return [a["decision"] for a in resp.json().get("alerts", [])] if resp.ok else [f"HTTP {resp.status_code}"]

    def vllm_pids(self, stack: NativeStack | None) -> list[int]:
        pids: list[int] = []
        for proc in stack.processes() if stack else []:
            try:
                if proc.name().startswith("VLLM::") or "vllm.entrypoints" in " ".join(proc.cmdline()):
                    pids.append(proc.pid)
            except Exception:  # noqa: BLE001 - a process that just exited
                continue
        return pids

    # -- the drill ---------------------------------------------------------------------------------

    # The alert this drill waits for (its rules are rendered so that it can work at the compression).
    alert = LEAK_ALERT

    def _start_stack(self) -> float:
        """Starts the drill's private stack with the leak injector and the time-compressed rules,
        warms vLLM up and waits for the exporter's baseline; returns when the stack was up."""
        cfg = self.cfg
        layout = StateLayout(self.state)
        layout.make_dirs()
        rules_dir = layout.conf / "rules"
        write_rules(rules_dir, cfg.time_compression, cfg.scrape_interval_s, self.alert)
        # The production routing (the runner points its webhook at this stack's healer), time-scaled.
        am = scaled_alertmanager(compose_alertmanager_config(self.settings), cfg.time_compression, repeat_s=5.0)
        self._env_before = {k: os.environ.get(k) for k in [*self.ports, STATE_DIR_ENV]}
        os.environ.update({**self.ports, STATE_DIR_ENV: str(self.state)})
        stack = self.stack = DrillStack(layout, self.settings)
        stack.compression = cfg.time_compression
        self.say(
            f"starting a native stack in {self.state} (time compression x{cfg.time_compression:g}, "
            f"scrape every {cfg.scrape_interval_s:g}s)"
        )
        stack.up("demo", rules_dir=rules_dir, alertmanager_config=am, out=io.StringIO(), **self.vllm_options())
        stack_up = time.time()
        for service in self.vllm_services:
            self.warm_up(service)
        self.prom.wait_for(self.baseline_ready, timeout=180)
        return stack_up

    # The vLLMs the drill warms up, and the query true once every exporter has taken its baseline.
    vllm_services: tuple[str, ...] = ("vllm",)
    baseline_ready = "max(leakwatch_baseline_ready) == 1"

    def leak_env(self) -> dict[str, str]:
        """The injector's settings: bytes_per_request kept on every /v1/completions request."""
        return {
            leak_middleware.BYTES_ENV: str(self.cfg.bytes_per_request),
            leak_middleware.PREFIX_ENV: "/v1/completions",
            leak_middleware.DEVICE_ENV: "auto",
        }

    def vllm_options(self) -> dict:
        """NativeStack.up's vLLM arguments: the injector loaded into vLLM's API server."""
        return {"vllm_extra_args": ["--middleware", MIDDLEWARE], "vllm_extra_env": self.leak_env()}

    def _stop_stack(self, cgroup: MemoryCgroup | None, hog: CpuHog) -> None:
        try:
            if self.stack is not None:
                self.stack.down(out=io.StringIO())
        finally:
            hog.stop()
            if cgroup is not None:
                cgroup.remove()
            for key, value in self._env_before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            if not self.keep_state:
                shutil.rmtree(self.state, ignore_errors=True)

    def _limit_vllm(self) -> tuple[MemoryCgroup, list[int]]:
        """vLLM's processes in a memory cgroup with `cgroup_headroom_bytes` above what they hold."""
        cgroup = MemoryCgroup.create(f"leakwatch-drill-{os.getpid()}")
        pids = self.vllm_pids(self.stack)
        cgroup.adopt(pids)
        # The exporter and the rule see the limit minus vLLM's own (proportional) memory.
        cgroup.set_limit(max(cgroup.usage(), pss_total(pids)) + self.cfg.cgroup_headroom_bytes)
        return cgroup, pids

    def _start_leaking(self, log_name: str) -> tuple[float, subprocess.Popen, float]:
        """Production-day traffic on /v1/completions, which the injector leaks on: (when it began,
        the Locust process, when to give up waiting for the healer)."""
        cfg = self.cfg
        leak_start = time.time()
        self.result.load_average.append(load_average())
        proc = self.locust("completions", cfg.leak_span_s, log_name)
        return leak_start, proc, leak_start + cfg.wall(cfg.leak_span_s) + 120

    def _watch(self, leak_start: float, deadline: float, interrupt=None, on_restart=None):
        """Polls until the healer begins its restart, the deadline passes or `interrupt()` returns a
        failure (recorded): when the drill's alert fired, when its remediated twin did, when the
        healer began ((alert_at, remediation_at, restart_at), None for what did not happen). Keeps the
        remediation notification as Alertmanager holds it, for the repeat watch; `on_restart()` runs
        the moment the restart is seen (vLLM still holds its memory then)."""
        alert_at = remediation_at = restart_at = None
        firing_expr = f'ALERTS{{alertname="{self.alert}", alertstate="firing"}}'
        while time.time() < deadline and restart_at is None:
            failure = interrupt() if interrupt is not None else None
            if failure:
                self.result.failures.append(failure)
                break
            firing = self.prom.query(firing_expr)
            if firing and alert_at is None:
                alert_at = time.time()
                self.say(f"{self.alert} firing after {alert_at - leak_start:.0f}s")
            remediable = any(
                a["metric"].get(self.remediation.label_name) == self.remediation.label_value for a in firing
            )
            if remediable and remediation_at is None:
                remediation_at = time.time()
                self.say(f"remediation alert firing after {remediation_at - leak_start:.0f}s")
            if alert_at is not None and not self.episode:
                self.episode = self.alertmanager_remediation_alerts()
            if self.healer_metric("leakwatch_healer_last_restart_timestamp_seconds") > 0:
                restart_at = time.time()
                self.say("healer began draining and restarting vLLM")
                if on_restart is not None:
                    on_restart(restart_at)
            time.sleep(1)
        if restart_at is not None and not self.episode:
            # Alertmanager holds the alert until vLLM's memory is down again, well after the restart.
            self.episode = self.alertmanager_remediation_alerts()
        if remediation_at is None and restart_at is not None:
            # The healer can act between two polls; Prometheus's history says when the twin fired.
            remediation_at = self.first_firing(
                f'ALERTS{{alertname="{self.alert}", alertstate="firing", {self.remediation.remediation_matcher}}}',
                leak_start,
                restart_at + 5,
            )
        if remediation_at is not None and (alert_at is None or remediation_at < alert_at):
            # The twin is a firing of the same alert: when both fire together (a fast leak) and the
            # healer acts before the next poll, the alert fired no later than its twin did.
            alert_at = remediation_at
        self.result.remediation_alert_s = None if remediation_at is None else remediation_at - leak_start
        return alert_at, remediation_at, restart_at

    def run(self) -> DrillResult:
        cfg, res = self.cfg, self.result
        cgroup = None
        # The loaded variant: busy processes beside the stack for the whole drill (bounded: they
        # exit by themselves after the drill's longest possible run).
        hog = CpuHog(self.cpu_hogs, max_s=cfg.wall(cfg.control_span_s + cfg.leak_span_s) + 1800).start()
        try:
            stack_up = self._start_stack()

            # Control: the same production profile, on the path the injector leaves alone.
            self.say(f"control phase: {cfg.control_span_s / 3600:g} h of production traffic on /v1/chat/completions")
            control_start = time.time()
            proc = self.locust("chat", cfg.control_span_s, "locust-control")
            proc.wait(timeout=cfg.wall(cfg.control_span_s) + 180)
            control_end = time.time()
            res.baseline_bytes = self.api_memory()

            # Leak: vLLM gets a container-like limit, then every request keeps bytes_per_request.
            cgroup, pids = self._limit_vllm()
            self.say(
                f"leak phase: {cfg.bytes_per_request} B per /v1/completions request, memory limit "
                f"{cfg.cgroup_headroom_bytes / 2**20:.0f} MiB above vLLM's usage"
            )
            leak_start, proc, deadline = self._start_leaking("locust-leak")
            alert_at, remediation_at, restart_at = self._watch(leak_start, deadline)
            proc.terminate()
            proc.wait(timeout=60)
            leak_end = restart_at or time.time()
            res.alert_s = None if alert_at is None else alert_at - leak_start
            res.load_average.append(load_average())
            # The alert figure is checked before it is reported (selfcheck: which alert, which series,
            # not before the rule's windows allow, not during warm-up or the control phase).
            attribution = selfcheck.attribute(
                self.prom,
                LEAK_ALERT,
                selfcheck.leak_window(cfg.time_compression),
                control_start=stack_up,
                leak_start=leak_start,
                alert_at=alert_at,
                role="api_server",
                step=max(cfg.scrape_interval_s / 2, 0.5),
            )
            res.attribution = attribution.as_dict()
            res.failures += attribution.failures
            if restart_at is None:
                res.failures.append(f"no restart within {deadline - leak_start:.0f}s of the leak starting")
            else:
                self._recover(alert_at or restart_at, remediation_at, old_pids=pids)
                res.load_average.append(load_average())

            control = self.check(control_start, control_end)
            leak = self.check(leak_start, leak_end)
            self._evaluate(control, leak)
        finally:
            self._stop_stack(cgroup, hog)
        return res

    def first_firing(self, expr: str, start: float, end: float) -> float | None:
        """When a series of `expr` first had a sample in [start, end], from Prometheus's history."""
        step = max(self.cfg.scrape_interval_s / 2, 0.5)
        times = [float(t) for series in self.prom.query_range(expr, start, end, step) for t, _ in series["values"]]
        return min(times) if times else None

    def _healthy(self) -> bool:
        try:
            return requests.get(f"{self.url('vllm')}{ready_path('vllm')}", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def _recover(self, alert_at: float, remediation_at: float | None, old_pids: list[int]) -> None:
        res = self.result
        phases = RecoveryPhases(alert_at, remediation_at=remediation_at)
        watcher = PhaseWatcher(
            phases,
            old_pids,
            vllm_pids=lambda: self.vllm_pids(self.stack),
            healthy=self._healthy,
            healer_began=lambda: self.healer_metric("leakwatch_healer_last_restart_timestamp_seconds"),
            sigterm_to_gone_s=lambda: self.healer_metric("leakwatch_healer_last_drain_duration_seconds"),
        )
        deadline = time.time() + 600
        try:
            while time.time() < deadline:
                watcher.poll(time.time())
                if self.healer_metric("leakwatch_healer_restarts_total", result="success") >= 1 and watcher.ready:
                    break
                if self.healer_metric("leakwatch_healer_restarts_total", result="failed") >= 1:
                    res.failures.append("the healer's restart failed (see its log)")
                    return
                time.sleep(0.5)
            self._baseline(alert_at, phases, deadline)
        finally:
            res.phases = phases.durations()
            res.phases_summary = phases.summary()
            res.failures += phases.problems()
            self.say(f"recovery by phase: {res.phases_summary}")
        self._watch_repeats()

    def _baseline(self, alert_at: float, phases: RecoveryPhases, deadline: float) -> None:
        cfg, res = self.cfg, self.result
        self.warm_up()  # the new process serves again; its memory is what an operator now sees
        limit = (res.baseline_bytes or 0) + cfg.baseline_tolerance_bytes
        while time.time() < deadline:
            now = self.api_memory()
            if now is not None and res.baseline_bytes is not None and now <= limit:
                res.recovered_bytes = now
                phases.baseline_at = time.time()
                res.recover_s = phases.baseline_at - alert_at
                self.say(
                    f"API server memory back to {now / 2**20:.0f} MiB (before the leak: "
                    f"{res.baseline_bytes / 2**20:.0f} MiB) {res.recover_s:.0f}s after the alert"
                )
                break
            time.sleep(1)
        else:
            res.failures.append("host memory did not come back near its pre-leak level")

    def _watch_repeats(self) -> None:
        cfg, res = self.cfg, self.result
        # Alertmanager repeats every 5 s while the alert still fires; the drill also replays the very
        # notification it sent (same fingerprint and startsAt) in case the alert resolved first.
        watch_end = time.time() + cfg.storm_watch_s
        replies = []
        while time.time() < watch_end:
            if self.episode:
                replies += self.repeat_notification()
            time.sleep(5)
        if not self.episode:
            res.failures.append("no remediation notification captured from Alertmanager to replay")
        elif not replies:
            res.failures.append("the healer did not answer the repeated notifications")
        if any(r not in ("duplicate", "handled_by_restart", "cooldown") for r in replies):
            res.failures.append(f"repeated notifications got {sorted(set(replies))}")
        self.say(f"repeated the remediation notification {len(replies)} time(s): {sorted(set(replies))}")
        res.restarts = int(self.healer_metric("leakwatch_healer_restarts_total", result="success"))
        res.notifications = int(
            sum(
                self.healer_metric("leakwatch_healer_alerts_total", decision=d)
                for d in ("remediate", "duplicate", "handled_by_restart", "in_progress", "cooldown", "rate_limited")
            )
        )
        if res.restarts != 1:
            res.failures.append(f"{res.restarts} restarts; exactly one expected (restart storm?)")

    def _evaluate(self, control: CheckResult, leak: CheckResult) -> None:
        cfg, res = self.cfg, self.result
        res.control = control.as_dict()
        if control.verdict != "NO-LEAK":
            res.failures.append(
                f"control phase verdict {control.verdict}, expected NO-LEAK: "
                + "; ".join(f"{r.series.key}: {r.reason}" for r in control.series)
            )
        rate_leak_phase(res, leak, cfg)


def check_phase(prometheus_url: str, cfg: DrillConfig, start: float, end: float) -> CheckResult:
    """`leakwatch check` over a drill's phase, parsed from its own command line (the same code path)."""
    return run_check(check_arguments(prometheus_url, cfg, start, end), start, end)


def check_arguments(prometheus_url: str, cfg: DrillConfig, start: float, end: float, *extra: str) -> argparse.Namespace:
    """`leakwatch check`'s arguments for a drill's phase at its scrape interval and compression."""
    parser = argparse.ArgumentParser()
    add_check_arguments(parser)
    return parser.parse_args(
        [
            "--prometheus",
            prometheus_url,
            "--start",
            str(start),
            "--end",
            str(end),
            "--step",
            f"{cfg.scrape_interval_s:g}s",
            "--time-compression",
            f"{cfg.time_compression:g}",
            *extra,
        ]
    )


def rate_leak_phase(res: DrillResult, leak: CheckResult, cfg: DrillConfig) -> None:
    """The leak phase as every drill (native or compose) rates it: LEAK for the API server, where the
    injector keeps its bytes, with a bytes/request estimate within checks.max_estimate_error."""
    res.leak = leak.as_dict()
    api = next((r for r in leak.series if r.series.key == "host/api_server"), None)
    if api is None or api.bytes_per_request.estimate is None or api.request_fit is None:
        res.failures.append("leak phase: no estimate for host/api_server")
        return
    res.estimate_bytes_per_request = api.bytes_per_request.estimate
    res.estimate_error_pct = 100.0 * abs(api.bytes_per_request.estimate - cfg.bytes_per_request) / cfg.bytes_per_request
    if api.verdict != "LEAK":
        res.failures.append(f"leak phase: host/api_server verdict {api.verdict}: {api.reason}")
    if res.estimate_error_pct > 100 * cfg.max_estimate_error:
        res.failures.append(
            f"estimate {api.bytes_per_request.estimate:.0f} B/request is "
            f"{res.estimate_error_pct:.1f}% off the injected {cfg.bytes_per_request}"
        )
