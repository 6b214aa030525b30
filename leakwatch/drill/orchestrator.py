"""The drill, end to end on a private native stack (free ports, its own state directory):

1. start vLLM with the leak injector, the drill's time-compressed rules and Alertmanager config;
2. warm up, then a control phase: production-day traffic on /v1/chat/completions (not injected);
3. put vLLM into a memory cgroup (usage + headroom) and run production-day traffic on
   /v1/completions, which keeps `bytes_per_request` per request;
4. wait for the leak alert, the remediation alert, Alertmanager -> healer -> drain and restart;
5. check memory is back near its pre-leak level, that repeats did not restart it again, and run
   `leakwatch check` on both phases: NO-LEAK for the control, the injected bytes/request for the leak.

`Drill.run()` is that list, one method per phase. The stack itself (ports, state directory, start and
stop, its services' clients) is leakwatch.drill.private_stack's; the result and the rating of the
phases' verdicts are leakwatch.drill.judging's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import requests

from ..core import alert_config, vllm_key
from ..core.errors import LeakwatchError
from ..core.paths import REPO_ROOT
from ..core.promapi import Prometheus
from ..core.state_layout import StateLayout
from ..heal import healer_settings
from ..leakcheck.analysis import CheckResult
from ..loadgen import conventions
from . import leak_middleware, selfcheck, warmup_sweep
from .cgroup_limit import MemoryCgroup
from .drill_settings import LEAK_ALERT, DrillConfig
from .judging import (  # DrillResult, check_phase, check_arguments, rate_leak_phase: also imported from here
    DrillResult,
    check_arguments as check_arguments,
    check_phase,
    rate_control_phase,
    rate_leak_phase,
)
from .load import CpuHog, load_average
from .phases import PhaseWatcher, RecoveryPhases
from .private_stack import DrillStack, PrivateStack, pss_total  # DrillStack, pss_total: also imported from here

MIDDLEWARE = "leakwatch.drill.leak_middleware.leak_memory"
API_MEMORY = (
    'sum(leakwatch_process_anonymous_memory_bytes{role="api_server"})'
    ' or sum(leakwatch_process_resident_memory_bytes{role="api_server"})'
    f" or sum(process_resident_memory_bytes{{{alert_config.load().selector('vllm')}}})"
)


@dataclass
class LeakTimes:
    """The leak phase's clock readings (epoch seconds; None for what did not happen)."""

    start: float  # the leak's traffic began
    end: float  # the healer began its restart, or the watch gave up
    deadline: float  # when the watch gives up waiting for the healer
    alert_at: float | None
    remediation_at: float | None
    restart_at: float | None


class Drill:
    """The native drill; the fast-leak, canary and real-leak drills reuse its stack and phases."""

    def __init__(self, cfg: DrillConfig, out=sys.stdout, keep_state: bool = False, cpu_hogs: int = 0):
        self.cfg = cfg
        self.cpu_hogs = cpu_hogs
        self.out = out
        self.keep_state = keep_state
        self.remediation = healer_settings.load()  # the label the healer acts on
        self.private_stack = PrivateStack(cfg)  # its ports and state directory, taken now
        self.settings = self.private_stack.settings
        self.state = self.private_stack.state
        self.ports = self.private_stack.ports
        self.result = DrillResult(cfg.time_compression, cfg.bytes_per_request, cpu_hogs=cpu_hogs)
        self.episode: list[dict] = []  # the remediation alerts as Alertmanager holds them

    def say(self, text: str) -> None:
        print(f"[drill {time.strftime('%H:%M:%S')}] {text}", file=self.out, flush=True)

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def stack(self) -> DrillStack | None:
        return self.private_stack.stack

    def url(self, service: str) -> str:
        return self.private_stack.url(service)

    @property
    def prom(self) -> Prometheus:
        return self.private_stack.prom

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
        warmup_sweep.sweep_batch_sizes(url, "demo")
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

    # -- the drill ---------------------------------------------------------------------------------

    # The alert this drill waits for (its rules are rendered so that it can work at the compression).
    alert = LEAK_ALERT

    def _start_stack(self) -> float:
        """Starts the drill's private stack with the leak injector and the time-compressed rules,
        warms vLLM up and waits for the exporter's baseline; returns when the stack was up."""
        self.private_stack.up(self.alert, self.vllm_options, self.say)
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
            self.private_stack.down()
        finally:
            hog.stop()
            if cgroup is not None:
                cgroup.remove()
            self.private_stack.clean_up(keep_state=self.keep_state)

    def _limit_vllm(self) -> tuple[MemoryCgroup, list[int]]:
        """vLLM's processes in a memory cgroup with `cgroup_headroom_bytes` above what they hold."""
        cgroup = MemoryCgroup.create(f"leakwatch-drill-{os.getpid()}")
        pids = self.private_stack.vllm_pids()
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
                self.episode = self.private_stack.remediation_alerts(self.remediation.remediation_matcher)
            if self.private_stack.healer_metric("leakwatch_healer_last_restart_timestamp_seconds") > 0:
                restart_at = time.time()
                self.say("healer began draining and restarting vLLM")
                if on_restart is not None:
                    on_restart(restart_at)
            time.sleep(1)
        if restart_at is not None and not self.episode:
            # Alertmanager holds the alert until vLLM's memory is down again, well after the restart.
            self.episode = self.private_stack.remediation_alerts(self.remediation.remediation_matcher)
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
        """The drill's phases in order. Whatever happens, the stack is stopped, then the CPU hogs,
        the cgroup, the environment and the state directory cleaned up (`_stop_stack`)."""
        cgroup = None
        hog = self._start_cpu_hogs()
        try:
            stack_up = self._start_stack()
            control = self._control_phase()
            cgroup, pids = self._limit_vllm()
            leak = self._leak_phase()
            self._attribute_alert(stack_up, leak)
            self._recovery_phase(leak, pids)
            self._check_phases(control, leak)
        finally:
            self._stop_stack(cgroup, hog)
        return self.result

    def _start_cpu_hogs(self) -> CpuHog:
        """The loaded variant: busy processes beside the stack for the whole drill (bounded: they
        exit by themselves after the drill's longest possible run)."""
        cfg = self.cfg
        return CpuHog(self.cpu_hogs, max_s=cfg.wall(cfg.control_span_s + cfg.leak_span_s) + 1800).start()

    def _control_phase(self) -> tuple[float, float]:
        """Control: the same production profile, on the path the injector leaves alone. Takes the
        API server's memory at its end as the baseline; returns when the phase began and ended."""
        cfg, res = self.cfg, self.result
        self.say(f"control phase: {cfg.control_span_s / 3600:g} h of production traffic on /v1/chat/completions")
        control_start = time.time()
        proc = self.locust("chat", cfg.control_span_s, "locust-control")
        proc.wait(timeout=cfg.wall(cfg.control_span_s) + 180)
        control_end = time.time()
        res.baseline_bytes = self.api_memory()
        return control_start, control_end

    def _leak_phase(self) -> LeakTimes:
        """Leak: vLLM has its container-like limit (`_limit_vllm`), then every request keeps
        bytes_per_request until the healer begins its restart or the watch gives up."""
        cfg, res = self.cfg, self.result
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
        return LeakTimes(leak_start, leak_end, deadline, alert_at, remediation_at, restart_at)

    def _attribute_alert(self, stack_up: float, leak: LeakTimes) -> None:
        """The alert figure is checked before it is reported (selfcheck: which alert, which series,
        not before the rule's windows allow, not during warm-up or the control phase)."""
        cfg, res = self.cfg, self.result
        attribution = selfcheck.attribute(
            self.prom,
            LEAK_ALERT,
            selfcheck.leak_window(cfg.time_compression),
            control_start=stack_up,
            leak_start=leak.start,
            alert_at=leak.alert_at,
            role="api_server",
            step=max(cfg.scrape_interval_s / 2, 0.5),
        )
        res.attribution = attribution.as_dict()
        res.failures += attribution.failures

    def _recovery_phase(self, leak: LeakTimes, pids: list[int]) -> None:
        """The healer's restart: recovery by phase, memory back near its baseline, the repeats
        answered without a second restart; a failure when the healer never began."""
        res = self.result
        if leak.restart_at is None:
            res.failures.append(f"no restart within {leak.deadline - leak.start:.0f}s of the leak starting")
        else:
            self._recover(leak.alert_at or leak.restart_at, leak.remediation_at, old_pids=pids)
            res.load_average.append(load_average())

    def _check_phases(self, control_span: tuple[float, float], leak: LeakTimes) -> None:
        """`leakwatch check` on both phases: NO-LEAK for the control, the injected bytes/request for
        the leak."""
        control = self.check(*control_span)
        leak_check = self.check(leak.start, leak.end)
        self._evaluate(control, leak_check)

    def first_firing(self, expr: str, start: float, end: float) -> float | None:
        """When a series of `expr` first had a sample in [start, end], from Prometheus's history."""
        step = max(self.cfg.scrape_interval_s / 2, 0.5)
        times = [float(t) for series in self.prom.query_range(expr, start, end, step) for t, _ in series["values"]]
        return min(times) if times else None

    def _recover(self, alert_at: float, remediation_at: float | None, old_pids: list[int]) -> None:
        res = self.result
        phases = RecoveryPhases(alert_at, remediation_at=remediation_at)
        watcher = PhaseWatcher(
            phases,
            old_pids,
            vllm_pids=self.private_stack.vllm_pids,
            healthy=self.private_stack.vllm_ready,
            healer_began=lambda: self.private_stack.healer_metric("leakwatch_healer_last_restart_timestamp_seconds"),
            sigterm_to_gone_s=lambda: self.private_stack.healer_metric("leakwatch_healer_last_drain_duration_seconds"),
        )
        deadline = time.time() + 600
        try:
            while time.time() < deadline:
                watcher.poll(time.time())
                if (
                    self.private_stack.healer_metric("leakwatch_healer_restarts_total", result="success") >= 1
                    and watcher.ready
                ):
                    break
                if self.private_stack.healer_metric("leakwatch_healer_restarts_total", result="failed") >= 1:
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
                replies += self.private_stack.replay_to_healer(self.episode)
            time.sleep(5)
        if not self.episode:
            res.failures.append("no remediation notification captured from Alertmanager to replay")
        elif not replies:
            res.failures.append("the healer did not answer the repeated notifications")
        if any(r not in ("duplicate", "handled_by_restart", "cooldown") for r in replies):
            res.failures.append(f"repeated notifications got {sorted(set(replies))}")
        self.say(f"repeated the remediation notification {len(replies)} time(s): {sorted(set(replies))}")
        res.restarts = int(self.private_stack.healer_metric("leakwatch_healer_restarts_total", result="success"))
        res.notifications = int(
            sum(
                self.private_stack.healer_metric("leakwatch_healer_alerts_total", decision=d)
                for d in ("remediate", "duplicate", "handled_by_restart", "in_progress", "cooldown", "rate_limited")
            )
        )
        if res.restarts != 1:
            res.failures.append(f"{res.restarts} restarts; exactly one expected (restart storm?)")

    def _evaluate(self, control: CheckResult, leak: CheckResult) -> None:
        rate_control_phase(self.result, control)
        rate_leak_phase(self.result, leak, self.cfg)
