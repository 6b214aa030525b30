"""One scenario of the library backtested with the real Prometheus engine: its history written as
OpenMetrics, our rules and the articles' (translated faithfully) evaluated over it, and each alert's
episodes. What `make bench-detection` (benchmarks/detection.py) and the real-leaks forecast
(leakwatch.realleaks.forecast) both run."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.errors import LeakwatchError
from ..core.paths import RULES_DIR
from ..scenarios import library
from ..scenarios.simulation_result import HEALER_RESTART
from .command import REFERENCE_RULES
from .rule_evaluator import AlertResult, Backtest, BacktestResult
from .sources import History, from_scenario

OURS = "ours"
ARTICLES = "articles"


@dataclass
class Outcome:
    name: str
    history: History
    result: BacktestResult
    wall_s: float

    def alerts(self, side: str) -> list[AlertResult]:
        reference = side == ARTICLES
        return [
            r
            for r in self.result.alerts
            if (r.rule.source == REFERENCE_RULES.name) == reference and r.rule.severity != "none"
        ]

    @property
    def origin(self) -> float:
        return self.history.leak_start or self.history.start

    def first(self, side: str, exclude: frozenset[str] | set[str] = frozenset()) -> tuple[float, str] | None:
        """(seconds after the leak start, alert) of the first alert firing at or after it."""
        found = [
            (e.firing_at - self.origin, r.rule.key)
            for r in self.alerts(side)
            if r.rule.name not in exclude
            for e in r.fired
            if e.firing_at >= self.origin
        ]
        return min(found) if found else None

    def early(self, side: str) -> list[str]:
        """Alerts that fired before the leak started (start-up, warm-up)."""
        return sorted({r.rule.key for r in self.alerts(side) for e in r.fired if e.firing_at < self.origin})

    def episodes(self, side: str) -> dict[str, int]:
        return {r.rule.key: len(r.fired) for r in self.alerts(side) if r.fired}

    def requests_after_leak(self, after_s: float) -> float | None:
        """Requests served between the leak start and `after_s` later."""
        sim = self.history.simulation
        if not sim or not sim.requests_served:
            return None
        return sim.requests_between(self.origin, self.origin + after_s)

    def severity_episodes(self, side: str, severity: str) -> int:
        return sum(len(r.fired) for r in self.alerts(side) if r.rule.severity == severity)

    def fast_leak_lead_s(self) -> float | None:
        """Seconds from the first page (a critical alert of ours) to the memory running out, in the
        run that starts with the scenario or its last healer restart; None if nothing paged first.
        A fast-leak scenario must run out of memory (else it is no fast leak)."""
        sim = self.history.simulation
        if sim is None:
            raise LeakwatchError(f"{self.name}: a fast-leak lead needs a simulated history")
        since = max((t for t, text in sim.events if text == HEALER_RESTART), default=self.history.start)
        exhausted = sim.out_of_memory_after(since)
        if exhausted is None:
            raise LeakwatchError(f"{self.name}: the memory never runs out, so it is no fast leak")
        pages = [
            e.firing_at
            for r in self.alerts(OURS)
            if r.rule.severity == "critical"
            for e in r.fired
            if since <= e.firing_at < exhausted
        ]
        return exhausted - min(pages) if pages else None

    def episodes_of(self, side: str, names: tuple[str, ...]) -> int:
        return sum(len(r.fired) for r in self.alerts(side) if r.rule.name in names)

    def headroom_used(self, after_s: float) -> float | None:
        """Share of the card's headroom at the leak start used up `after_s` later (card 0)."""
        sim = self.history.simulation
        if not sim or not sim.gpu_headroom_bytes or not sim.gpu_used_bytes:
            return None
        at = {round(t): used for t, used in sim.gpu_used_bytes}
        start = at.get(round(self.origin))
        now = at.get(round(self.origin + after_s))
        if start is None or now is None:
            return None
        return (now - start) / sim.gpu_headroom_bytes


def run_scenario(
    name: str,
    days: float | None = None,
    seed: int | None = None,
    resolution_s: float = 60.0,
    step_s: float = 60.0,
    workdir: Path | None = None,
    scenario=None,
) -> Outcome:
    scenario = scenario or library.get(name, days, seed)
    if scenario is not None and days is not None and scenario.days != days:
        scenario = replace(scenario, days=days)
    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix=f"leakwatch-bench-{scenario.name}-")) if own else workdir
    started = time.monotonic()
    try:
        history = from_scenario(scenario, workdir, resolution_s)
        backtest = Backtest(workdir, step_s=step_s, lookback_s=1.5 * resolution_s)
        backtest.load(history.files)
        rules = sorted(RULES_DIR.glob("*.yml")) + [REFERENCE_RULES]
        result = backtest.run(rules, history.start, history.end)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    return Outcome(scenario.name, history, result, time.monotonic() - started)
