"""Where a backtest's history comes from: a simulated scenario, an OpenMetrics export, or a live
Prometheus (raw samples of the series the rules read, over a time range)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from ..catalogue import metric_names
from ..errors import LeakwatchError
from ..promapi import Prometheus
from ..scenarios.model import Scenario
from ..scenarios.simulate import SimulationResult, simulate
from .engine import load_rules
from .openmetrics import BlockFiles, format_series, split_file

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


class _IntervalSink(BlockFiles):
    """BlockFiles that also estimates the scrape interval from the first few hundred series."""

    def __init__(self, directory: Path):
        super().__init__(directory)
        self._last: dict[str, float] = {}
        self._gaps: list[float] = []

    def add(self, series: str, value: float, ts: float) -> None:
        super().add(series, value, ts)
        if len(self._gaps) < 5000 and (series in self._last or len(self._last) < 300):
            last = self._last.get(series)
            if last is not None and ts > last:
                self._gaps.append(ts - last)
            self._last[series] = ts

    @property
    def interval_s(self) -> float:
        return statistics.median(self._gaps) if self._gaps else 60.0


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
    return History(f"OpenMetrics file {path}", files, sink.min_ts, sink.max_ts, sink.interval_s, sink.samples)


def rule_inputs(rule_files: list[Path]) -> set[str]:
    """The raw metric names the rules read (recorded series are recomputed, not pulled)."""
    recording, alerting = load_rules(rule_files)
    names: set[str] = set()
    for rule in (*recording, *alerting):
        names |= metric_names(rule.expr)
    return names - {r.name for r in recording}


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
    return History(f"Prometheus {url}", files, start, end, sink.interval_s, sink.samples)
