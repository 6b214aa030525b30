"""Growth that a declared cache bound will stop: where a leaking role levels off, and whether it fits.

A bounded cache (xgrammar's compiled grammars in EngineCore, config/vllm_leaks.yaml) grows like a
leak until it is full, then stays flat. The exporter publishes `leakwatch_vllm_cache_bound_bytes
{role, cache}` only where the operator set the cache's bound explicitly in vLLM's environment
(leakwatch/exporter/cache_bounds.py says why). For a host series the check calls LEAK whose role
has such bounds, this forecasts the plateau: the role levels off at about its baseline plus the
bounds, which either fits the headroom left (no action needed) or does not (it runs out first).
Growth since the baseline beyond the bounds is more than those caches can hold: the forecast then
says so and the LEAK stands on its own. Once the plateau is reached the later part of the window
is flat and the check's own rule says NO-LEAK.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.metric_catalogue import with_matcher
from ..core.promapi import Prometheus
from ..realleaks import catalogue as leak_catalogue
from .analysis import LEAK, SeriesResult, human_bytes

BOUNDS = "sum by (role, cache) (leakwatch_vllm_cache_bound_bytes)"
GROWTH = "sum by (role) (leakwatch_host_memory_growth_bytes)"
FITS, RUNS_OUT, BEYOND, UNKNOWN = "fits", "runs out first", "beyond the bound", "headroom unknown"


def queries() -> list[str]:
    """The PromQL the forecast runs (the metric-name contract test reads it)."""
    return [BOUNDS, GROWTH]


@dataclass(frozen=True)
class CacheBound:
    cache: str  # the catalogue case (config/vllm_leaks.yaml)
    env: str  # the environment variable that set it
    bytes: float


@dataclass
class BoundedForecast:
    role: str
    caches: tuple[CacheBound, ...]
    grown_bytes: float  # since the exporter's baseline (or over the analysed points without it)
    grown_since: str  # "baseline" | "window"
    headroom_bytes: float | None
    outcome: str  # fits | runs out first | beyond the bound | headroom unknown

    @property
    def bound_bytes(self) -> float:
        return sum(c.bytes for c in self.caches)

    @property
    def text(self) -> str:
        names = ", ".join(c.cache for c in self.caches)
        envs = ", ".join(c.env for c in self.caches)
        head = (
            f"bounded cache {names}: at most {_mib(self.bound_bytes)} ({envs}); grown {_mib(self.grown_bytes)} "
            f"since {'baseline' if self.grown_since == 'baseline' else 'the window began'}"
        )
        if self.outcome == BEYOND:
            return f"{head}, beyond the bound: more grows than the cache can hold, the leak stands"
        level = f"levels off at ≈ baseline+{_mib(self.bound_bytes)}"
        if self.outcome == UNKNOWN:
            return f"{head}; {level} (headroom unknown)"
        room = _mib(self.headroom_bytes or 0.0)
        if self.outcome == FITS:
            return f"{head}; {level}, below the headroom {room}: no action needed"
        return f"{head}; {level}, above the headroom {room}: it would run out before levelling off"

    def as_dict(self) -> dict:
        return {
            "role": self.role,
            "caches": [{"cache": c.cache, "env": c.env, "bound_bytes": c.bytes} for c in self.caches],
            "bound_bytes": self.bound_bytes,
            "grown_bytes": self.grown_bytes,
            "grown_since": self.grown_since,
            "headroom_bytes": self.headroom_bytes,
            "remaining_bytes": max(self.bound_bytes - self.grown_bytes, 0.0),
            "outcome": self.outcome,
            "text": self.text,
        }


def _mib(value: float) -> str:
    return f"{value / 1048576:.4g} MiB" if math.isfinite(value) else human_bytes(value)


def forecast(
    role: str, bounds: dict[str, float], grown: float, grown_since: str, headroom: float | None
) -> BoundedForecast:
    """The plateau of a role whose caches (name -> bytes) bound its growth."""
    envs = {c.name: (c.bound.env if c.bound else None) for c in leak_catalogue.load().cases}
    caches = tuple(CacheBound(name, envs.get(name) or "?", b) for name, b in sorted(bounds.items()))
    total = sum(bounds.values())
    if grown > total:
        outcome = BEYOND
    elif headroom is None:
        outcome = UNKNOWN
    else:
        outcome = FITS if total - grown < headroom else RUNS_OUT
    return BoundedForecast(role, caches, grown, grown_since, headroom, outcome)


def collect_bounds(
    prom: Prometheus, at: float, matcher: str = ""
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(role -> cache -> bound bytes, role -> growth since the baseline) at `at`."""
    bounds: dict[str, dict[str, float]] = {}
    for item in prom.query(with_matcher(BOUNDS, matcher), at=at):
        value = float(item["value"][1])
        labels = item["metric"]
        if math.isfinite(value) and labels.get("role") and labels.get("cache"):
            bounds.setdefault(labels["role"], {})[labels["cache"]] = value
    growth = {}
    if bounds:
        for item in prom.query(with_matcher(GROWTH, matcher), at=at):
            value = float(item["value"][1])
            if math.isfinite(value) and item["metric"].get("role"):
                growth[item["metric"]["role"]] = value
    return bounds, growth


def annotate(result: SeriesResult, bounds: dict[str, dict[str, float]], growth: dict[str, float]) -> None:
    """Sets `result.bounded` for a LEAK host series whose role has declared bounds."""
    role = result.series.labels.get("role", "")
    if result.verdict != LEAK or result.series.kind != "host" or role not in bounds:
        return
    if role in growth:
        grown, since = growth[role], "baseline"
    elif len(result.memory):
        grown, since = float(result.memory[-1] - result.memory[0]), "window"
    else:
        return
    result.bounded = forecast(role, bounds[role], grown, since, result.series.headroom_bytes)
