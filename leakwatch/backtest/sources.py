"""Where a backtest's history comes from: a simulated scenario, an OpenMetrics export, or a live
Prometheus (raw samples of the series the rules read, over a time range)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import LeakwatchError
from ..core.metric_catalogue import metric_names
from ..core.promapi import Prometheus
from ..scenarios.model import Scenario
from ..scenarios.simulate import simulate
from ..scenarios.simulation_result import SimulationResult
from .openmetrics import BlockFiles, format_series, split_file
from .rule_evaluator import load_rules

# How far one instant query reaches back when pulling raw samples from a Prometheus.
EXPORT_CHUNK_S = 7200


@dataclass
class History:
    description: str
    files: list[Path]
    start: float
    end: float
    interval_s: float  # typical time between two samples of a series
    samples: int
    leak_start: float | None = None
    simulation: SimulationResult | None = None
    intervals_by_job: dict[str, float] | None = None  # median scrape interval of each job

    def auto_lookback(self) -> tuple[float, str | None]:
        """1.5 x the slowest job's scrape interval (a lookback shorter than a job's interval makes
        its series vanish between samples, and every rule reading it goes quiet), and a warning
        when jobs are scraped at different rates (the faster jobs' series then linger that long
        after they stop)."""
        intervals = self.intervals_by_job or {}
        slowest = max(intervals.values(), default=self.interval_s)
        lookback = 1.5 * max(slowest, self.interval_s)
        if intervals and slowest > 1.5 * self.interval_s:
            jobs = ", ".join(f"{job or '(no job)'} {s:g}s" for job, s in sorted(intervals.items()))
            return lookback, (
                f"scrape intervals differ by job ({jobs}): the lookback is {lookback:g}s, 1.5 x the "
                f"slowest, so no job vanishes between its samples; series of the faster jobs stay "
                f"visible that long after they stop (pass --lookback to choose)"
            )
        return lookback, None


class _IntervalSink(BlockFiles):
    """BlockFiles that also estimates the scrape interval, overall and per job, from the first few
    hundred series of each job (DCGM is often scraped every 60 s while the rest is every 15 s)."""

    def __init__(self, directory: Path):
        super().__init__(directory)
        self._last: dict[str, float] = {}
        self._gaps: dict[str, list[float]] = {}
        self._series_per_job: dict[str, int] = {}

    def add(self, series: str, value: float, ts: float) -> None:
        super().add(series, value, ts)
        job = _job(series)
        gaps = self._gaps.setdefault(job, [])
        if len(gaps) < 5000 and (series in self._last or self._series_per_job.get(job, 0) < 300):
            last = self._last.get(series)
            if last is None:
                self._series_per_job[job] = self._series_per_job.get(job, 0) + 1
            elif ts > last:
                gaps.append(ts - last)
            self._last[series] = ts

    @property
    def intervals_by_job(self) -> dict[str, float]:
        return {job: statistics.median(gaps) for job, gaps in self._gaps.items() if gaps}

    @property
    def interval_s(self) -> float:
        gaps = [g for job_gaps in self._gaps.values() for g in job_gaps]
        return statistics.median(gaps) if gaps else 60.0


def _job(series: str) -> str:
    start = series.find('job="')
    if start < 0:
        return ""
    end = series.find('"', start + 5)
    return series[start + 5 : end]


def from_scenario(scenario: Scenario, workdir: Path, resolution_s: float = 60.0) -> History:
    sink = BlockFiles(workdir / "raw")
    result = simulate(scenario, sink, resolution_s)
    files = sink.close()
    return History(
        f"scenario {scenario.name}: {scenario.title}",
        files,
        result.start,
        result.end,
        resolution_s,
        sink.samples,
        result.leak_start,
        result,
    )


def from_openmetrics(path: Path, workdir: Path) -> History:
    sink = _IntervalSink(workdir / "raw")
    split_file(Path(path), sink)
    files = sink.close()
    if not sink.samples:
        raise LeakwatchError(f"{path} holds no samples")
    return History(
        f"OpenMetrics file {path}",
        files,
        sink.min_ts,
        sink.max_ts,
        sink.interval_s,
        sink.samples,
        intervals_by_job=sink.intervals_by_job,
    )


def rule_inputs(rule_files: list[Path]) -> set[str]:
    """The raw metric names the rules read (recorded series are recomputed, not pulled)."""
    recording, alerting = load_rules(rule_files)
    names: set[str] = set()
    for rule in (*recording, *alerting):
        names |= metric_names(rule.expr)
    # ALERTS is the rule manager's own output (the hysteresis reads it); the backtester replays it.
    return names - {r.name for r in recording} - {"ALERTS"}


def from_prometheus(
    url: str, start: float, end: float, rule_files: list[Path], workdir: Path, match: str = ""
) -> History:
    """Raw samples (not query results) of every series the rules read, in [start, end]."""
    if end <= start:
        raise LeakwatchError("--end must be after --start")
    api = Prometheus(url, timeout=120)
    sink = _IntervalSink(workdir / "raw")
    extra = f", {match.strip().strip('{}')}" if match.strip() else ""
    for name in sorted(rule_inputs(rule_files)):
        t = start
        while t < end:
            until = min(end, t + EXPORT_CHUNK_S)
            span_ms = int(round((until - t) * 1000)) + 1  # (t - 1 ms, until]: includes t
            for item in api.query(f'{{__name__="{name}"{extra}}}[{span_ms}ms]', at=until):
                text = format_series(name, {k: v for k, v in item["metric"].items() if k != "__name__"})
                for ts, value in item.get("values", []):
                    # Chunks meet at `until`: each sample belongs to exactly one of them.
                    if float(ts) > t or (t == start and float(ts) == t):
                        sink.add(text, float(value), float(ts))
            t = until
    files = sink.close()
    if not sink.samples:
        raise LeakwatchError(f"{url} returned no samples of the rules' metrics between the given times")
    return History(
        f"Prometheus {url}", files, start, end, sink.interval_s, sink.samples, intervals_by_job=sink.intervals_by_job
    )
