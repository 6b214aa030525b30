"""The memory breakdown at a check's window end: per model-holding vLLM process, the weights and KV
pool it holds by design against what is measured, and the unexplained rest with its growth over the
window. Read from the exporter's leakwatch_memory_* series (leakwatch/exporter/memory_breakdown.py computes
them); an exporter without them (older, or started without --profile) makes it "not available",
never an error. It informs; the verdict is still the leak fits' (analysis.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..core.metric_catalogue import with_matcher
from ..core.promapi import Prometheus
from .analysis import human_bytes

EXPECTED = "sum by (role, rank, part) (leakwatch_memory_expected_bytes)"
UNEXPLAINED = "sum by (role, rank, gpu) (leakwatch_memory_unexplained_bytes)"
QUERIES = (EXPECTED, UNEXPLAINED)
NOT_AVAILABLE = (
    "no leakwatch_memory_* series in the window: an exporter older than the breakdown, or one started without --profile"
)


@dataclass(frozen=True)
class ProcessBreakdown:
    role: str
    rank: str
    gpu: str  # "" on the CPU backend
    weights_bytes: float | None
    kv_cache_bytes: float | None
    unexplained_bytes: float | None  # at the window's end
    unexplained_growth_bytes: float | None  # its last minus its first value in the window

    @property
    def name(self) -> str:
        where = f" (GPU {self.gpu})" if self.gpu else ""
        return " ".join(filter(None, (self.role, self.rank))) + where

    @property
    def expected_bytes(self) -> float | None:
        if self.weights_bytes is None or self.kv_cache_bytes is None:
            return None
        return self.weights_bytes + self.kv_cache_bytes

    @property
    def measured_bytes(self) -> float | None:
        expected = self.expected_bytes
        return None if expected is None or self.unexplained_bytes is None else expected + self.unexplained_bytes

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "expected_bytes": self.expected_bytes,
            "measured_bytes": self.measured_bytes,
        }


@dataclass(frozen=True)
class MemoryBreakdown:
    processes: tuple[ProcessBreakdown, ...]
    at: float | None  # the last sample's time
    reason: str = ""  # why there is none

    def as_dict(self) -> dict:
        return {
            "available": bool(self.processes),
            "at": self.at,
            "reason": self.reason,
            "processes": [p.as_dict() for p in self.processes],
        }


def _finite(values: list) -> list[tuple[float, float]]:
    points = [(float(t), float(v)) for t, v in values]
    return [(t, v) for t, v in points if math.isfinite(v)]


def from_results(expected: list[dict], unexplained: list[dict]) -> MemoryBreakdown:
    """Builds the breakdown from two range-query results (Prometheus's `result` lists)."""
    parts: dict[tuple[str, str], dict[str, float]] = {}
    last_at: float | None = None
    for item in expected:
        points = _finite(item["values"])
        if not points:
            continue
        labels = item["metric"]
        key = (labels.get("role", ""), labels.get("rank", ""))
        parts.setdefault(key, {})[labels.get("part", "")] = points[-1][1]
        last_at = max(last_at or points[-1][0], points[-1][0])
    rest: dict[tuple[str, str], tuple[str, float, float]] = {}
    for item in unexplained:
        points = _finite(item["values"])
        if not points:
            continue
        labels = item["metric"]
        key = (labels.get("role", ""), labels.get("rank", ""))
        if key not in rest or points[-1][0] >= rest[key][2]:
            rest[key] = (labels.get("gpu", ""), points[-1][1], points[-1][1] - points[0][1])
        last_at = max(last_at or points[-1][0], points[-1][0])
    processes = []
    for key in sorted(set(parts) | set(rest)):
        gpu, value, growth = rest.get(key, ("", math.nan, math.nan))
        found = parts.get(key, {})
        processes.append(
            ProcessBreakdown(
                role=key[0],
                rank=key[1],
                gpu=gpu,
                weights_bytes=found.get("weights"),
                kv_cache_bytes=found.get("kv_cache"),
                unexplained_bytes=value if math.isfinite(value) else None,
                unexplained_growth_bytes=growth if math.isfinite(growth) else None,
            )
        )
    return MemoryBreakdown(tuple(processes), last_at, "" if processes else NOT_AVAILABLE)


def collect_breakdown(prom: Prometheus, start: float, end: float, step: float, matcher: str = "") -> MemoryBreakdown:
    def query_range(expr: str) -> list[dict]:
        return prom.query_range(with_matcher(expr, matcher), start, end, step)

    return from_results(query_range(EXPECTED), query_range(UNEXPLAINED))


def _b(value: float | None) -> str:
    return "unknown" if value is None else human_bytes(value)


def format_lines(breakdown: MemoryBreakdown) -> list[str]:
    """`memory breakdown` lines for `leakwatch check`'s text output."""
    if not breakdown.processes:
        return [f"memory breakdown: not available ({breakdown.reason})"]
    lines = ["memory breakdown at the window's end (per model-holding process; docs/leak-check.md):"]
    for p in breakdown.processes:
        line = (
            f"  {p.name}: weights {_b(p.weights_bytes)} + KV pool {_b(p.kv_cache_bytes)} = expected "
            f"{_b(p.expected_bytes)}; measured {_b(p.measured_bytes)}; unexplained {_b(p.unexplained_bytes)}"
        )
        if p.unexplained_growth_bytes is not None:
            sign = "+" if p.unexplained_growth_bytes >= 0 else ""
            line += f" ({sign}{human_bytes(p.unexplained_growth_bytes)} over the window)"
        elif p.unexplained_bytes is None:
            line += " (the exporter has no measure or no KV pool size for it yet)"
        lines.append(line)
    return lines
