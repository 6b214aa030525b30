"""The canary drill (`leakwatch drill --canary`, `make bench-canary`): does `leakwatch check --compare
stable canary` tell the leaking side from the fixed one, on two real vLLMs behind the router?

1. start the drill's private stack with the canary (two vLLMs of the demo profile, an exporter each,
   HAProxy at the default split in front), the injector loaded on both sides: the leaking side keeps
   bytes_per_request per /v1/completions request, the other frees the same allocation when the
   request ends (the same traffic and allocations, nothing held);
2. stop the healer (it restarts a leaking stable side; here the sides are judged, not healed) and
   send production-day traffic to the router, time-compressed;
3. every few seconds, `check --compare` over the traffic so far: the requests both sides had served
   when it first gave the right verdict are the drill's requests_to_verdict;
4. pass when the verdict over the whole span is right (LESS when the stable side leaks: the canary is
   the fix; MORE the other way round) and each side's API server bytes/request is within
   checks.max_estimate_error of what it kept, as a share of the injected bytes (the truth is the
   injected bytes on the leaking side and 0 on the other).

The last line printed is the benchmark summary over the directions run:
    canary: verdict_ok=N/M requests_to_verdict=N err_pct_stable=X err_pct_canary=Y
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from ..core.topology import DEPLOYMENT_LABEL, DEPLOYMENTS, HEALER_PROGRAM
from ..leakcheck import compare
from ..leakcheck.command import run_compare
from . import leak_middleware
from .drill_settings import LEAK_ALERT, DrillConfig
from .judging import check_arguments
from .load import CpuHog, load_average
from .orchestrator import MIDDLEWARE, Drill

# What `check --compare stable canary` must say when this side leaks.
EXPECTED = {"stable": compare.LESS, "canary": compare.MORE}
# The series the injector grows: host memory of vLLM's API server.
API_SERIES = "host/api_server"
# How often the verdict is asked for while traffic runs (wall seconds).
POLL_S = 10.0


@dataclass
class CanaryDrillResult:
    leaking_side: str
    injected_bytes_per_request: int
    expected: str
    verdict: str | None = None  # over the whole span
    requests_to_verdict: float | None = None  # both sides' requests when the right verdict first came
    requests: dict[str, float] = field(default_factory=dict)  # per side, over the whole span
    estimate: dict[str, float | None] = field(default_factory=dict)  # API server bytes/request per side
    err_pct: dict[str, float | None] = field(default_factory=dict)  # |estimate - truth| / injected
    comparison: dict = field(default_factory=dict)  # Comparison.as_dict() over the whole span
    # Wall seconds from the traffic's start to the leak rule's first firing, per side it fired for.
    alert_s: dict[str, float] = field(default_factory=dict)
    load_average: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def canary_share(self) -> float | None:
        total = sum(self.requests.values())
        return self.requests.get("canary", 0.0) / total if total else None


class CanaryDrill(Drill):
    vllm_services = ("vllm", "vllm_canary")
    baseline_ready = f"count(leakwatch_baseline_ready == 1) == {len(DEPLOYMENTS)}"

    def __init__(
        self, cfg: DrillConfig, leaking_side: str, out=sys.stdout, keep_state: bool = False, cpu_hogs: int = 0
    ):
        if leaking_side not in EXPECTED:
            raise ValueError(f"leaking side {leaking_side!r} is not one of {', '.join(EXPECTED)}")
        super().__init__(cfg, out=out, keep_state=keep_state, cpu_hogs=cpu_hogs)
        self.leaking_side = leaking_side
        self.canary_result = CanaryDrillResult(leaking_side, cfg.bytes_per_request, EXPECTED[leaking_side])

    def side_env(self, side: str) -> dict[str, str]:
        mode = "keep" if side == self.leaking_side else "release"
        return {**self.leak_env(), leak_middleware.MODE_ENV: mode}

    def vllm_options(self) -> dict:
        stable, canary = DEPLOYMENTS
        return {
            "vllm_extra_args": ["--middleware", MIDDLEWARE],
            "vllm_extra_env": self.side_env(stable),
            "canary": True,
            "canary_vllm_extra_args": ["--middleware", MIDDLEWARE],
            "canary_vllm_extra_env": self.side_env(canary),
        }

    def compare_sides(self, start: float, end: float) -> compare.Comparison:
        args = check_arguments(self.url("prometheus"), self.cfg, start, end, "--compare", *DEPLOYMENTS)
        return run_compare(args, start, end)

    @staticmethod
    def api_row(comparison: compare.Comparison) -> compare.SeriesComparison | None:
        return next((s for s in comparison.series if s.key == API_SERIES), None)

    def served(self, comparison: compare.Comparison) -> dict[str, float]:
        row = self.api_row(comparison)
        sides = (row.stable, row.canary) if row is not None else (None, None)
        return {name: (r.requests_served if r is not None else 0.0) for name, r in zip(DEPLOYMENTS, sides, strict=True)}

    def run_canary(self) -> CanaryDrillResult:
        cfg, res = self.cfg, self.canary_result
        hog = CpuHog(self.cpu_hogs, max_s=cfg.wall(cfg.leak_span_s) + 1800).start()
        try:
            self._start_stack()
            assert self.stack is not None
            # The healer would restart a leaking stable side mid-phase (its alerts are right to fire).
            self.stack.rpc().stopProcess(HEALER_PROGRAM, True)
            self.say(
                f"{self.leaking_side} side keeps {cfg.bytes_per_request} B per /v1/completions request, the other "
                f"frees it; {cfg.requests_per_day:g} requests a day through the router for "
                f"{cfg.leak_span_s / 3600:g} production hours"
            )
            res.load_average.append(load_average())
            start = time.time()
            proc = self.locust("completions", cfg.leak_span_s, "locust-canary", service="canary_router")
            give_up = start + cfg.wall(cfg.leak_span_s) + 180
            while proc.poll() is None and time.time() < give_up:
                time.sleep(POLL_S)
                if res.requests_to_verdict is None:
                    self._first_verdict(start)
            if proc.poll() is None:
                proc.terminate()
                res.failures.append(f"Locust still running {give_up - start:.0f}s after the traffic began")
            proc.wait(timeout=60)
            res.load_average.append(load_average())
            end = time.time()
            self._evaluate_span(start, end)
            self._attribute_alerts(start, end)
        finally:
            self._stop_stack(None, hog)
        return res

    def _first_verdict(self, start: float) -> None:
        res = self.canary_result
        comparison = self.compare_sides(start, time.time())
        if comparison.verdict == res.expected:
            res.requests_to_verdict = sum(self.served(comparison).values())
            self.say(f"check --compare says {comparison.verdict} after {res.requests_to_verdict:.0f} requests")

    def _evaluate_span(self, start: float, end: float) -> None:
        cfg, res = self.cfg, self.canary_result
        comparison = self.compare_sides(start, end)
        self.say("check --compare over the whole span:\n" + compare.format_text(comparison))
        res.verdict, res.comparison = comparison.verdict, comparison.as_dict()
        res.requests = self.served(comparison)
        if comparison.verdict != res.expected:
            res.failures.append(
                f"check --compare said {comparison.verdict} with the {self.leaking_side} side leaking, not {res.expected}"
            )
        if res.requests_to_verdict is None and comparison.verdict == res.expected:
            res.requests_to_verdict = sum(res.requests.values())
        row = self.api_row(comparison)
        for side, r in zip(DEPLOYMENTS, (row.stable, row.canary) if row else (None, None), strict=True):
            estimate = r.bytes_per_request.estimate if r is not None else None
            res.estimate[side] = estimate
            if estimate is None:
                res.err_pct[side] = None
                res.failures.append(f"no {API_SERIES} bytes/request estimate on the {side} side")
                continue
            truth = cfg.bytes_per_request if side == self.leaking_side else 0
            err = res.err_pct[side] = 100.0 * abs(estimate - truth) / cfg.bytes_per_request
            if err > 100 * cfg.max_estimate_error:
                res.failures.append(
                    f"{side} side: {estimate:.0f} B/request estimated for {truth} kept, {err:.1f}% of "
                    f"the injected {cfg.bytes_per_request} off (at most {100 * cfg.max_estimate_error:g}%)"
                )

    def _attribute_alerts(self, start: float, end: float) -> None:
        """The time-compressed leak rule with both sides in one job: it may fire for the leaking side's
        deployment, never for the other's (the rules group by the label, docs/canary.md)."""
        res = self.canary_result
        firing = f'ALERTS{{alertname="{LEAK_ALERT}", alertstate="firing"}}'
        for item in self.prom.query_range(firing, start, end, self.cfg.scrape_interval_s):
            side = item["metric"].get(DEPLOYMENT_LABEL, "")
            first = min(float(t) for t, _ in item["values"]) - start
            res.alert_s[side] = min(res.alert_s.get(side, first), first)
        wrong = sorted(side for side in res.alert_s if side != self.leaking_side)
        if wrong:
            res.failures.append(
                f"{LEAK_ALERT} fired for {', '.join(repr(w) for w in wrong)} with only the {self.leaking_side} side "
                "leaking: the rules mixed the two deployments"
            )
        if self.leaking_side in res.alert_s:
            self.say(f"{LEAK_ALERT} fired for the {self.leaking_side} side {res.alert_s[self.leaking_side]:.0f}s in")


def summary_line(results: list[CanaryDrillResult]) -> str:
    """The benchmark line over the directions run: the worst figure of each."""

    def worst(values: list[float | None], digits: int) -> str:
        known = [v for v in values if v is not None]
        return "none" if not values or len(known) < len(values) else f"{max(known):.{digits}f}"

    ok = sum(r.verdict == r.expected for r in results)
    return (
        f"canary: verdict_ok={ok}/{len(results)} "
        f"requests_to_verdict={worst([r.requests_to_verdict for r in results], 0)} "
        f"err_pct_stable={worst([r.err_pct.get('stable') for r in results], 1)} "
        f"err_pct_canary={worst([r.err_pct.get('canary') for r in results], 1)}"
    )
