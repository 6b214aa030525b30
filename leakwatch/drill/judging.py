"""How a drill is judged: `DrillResult` holds what a native drill measured (alert and recovery
times, the recovery by phase, the machine's load) and the failures found, and prints the benchmark
summary line; `check_phase` runs `leakwatch check` over a drill's phase from its own command line
(the same code path as the command), `check_arguments` builds that command line (the canary drill adds
`--compare`), and `rate_control_phase`/`rate_leak_phase` rate the verdicts as every drill, native
or compose, rates them: NO-LEAK for the control, LEAK with the injected bytes/request for the leak.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from ..leakcheck.analysis import CheckResult
from ..leakcheck.command import add_arguments as add_check_arguments, run_check
from .drill_settings import DrillConfig


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


def rate_control_phase(res: DrillResult, control: CheckResult) -> None:
    """The control phase (production traffic on the path the injector leaves alone): NO-LEAK."""
    res.control = control.as_dict()
    if control.verdict != "NO-LEAK":
        res.failures.append(
            f"control phase verdict {control.verdict}, expected NO-LEAK: "
            + "; ".join(f"{r.series.key}: {r.reason}" for r in control.series)
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
