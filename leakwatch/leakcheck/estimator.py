"""Robust slopes with confidence intervals: Theil-Sen within segments (Sen 1968; Hirsch & Slack 1984).

A vLLM restart or a counter reset splits a window into segments; a slope is only ever taken between
two points of the same segment, so the drop at a restart is neither a negative leak nor noise. The
estimate is the median of all within-segment pairwise slopes. Its interval inverts Kendall's S
(the sum of the segments' S, whose variances add), and each segment's variance is inflated for
autocorrelated residuals (Hamed & Rao 1998, see _autocorrelation_factor): memory noise is not independent from one scrape to
the next, and an interval that assumed it would be far too narrow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    def scaled(self, factor: float) -> Interval:
        values = sorted((self.low * factor, self.high * factor))
        return Interval(self.estimate * factor, values[0], values[1])

    def as_dict(self) -> dict:
        return {"estimate": _finite(self.estimate), "low": _finite(self.low), "high": _finite(self.high)}


NAN_INTERVAL = Interval(math.nan, math.nan, math.nan)


@dataclass(frozen=True)
class SlopeFit:
    slope: Interval
    points: int
    pairs: int
    segments: int
    # Per segment: (segment id, intercept) so that y ~ intercept + slope * x within the segment.
    intercepts: tuple[tuple[int, float], ...] = ()

    @property
    def ok(self) -> bool:
        return self.pairs > 0 and math.isfinite(self.slope.estimate)


def _finite(value: float):
    return value if math.isfinite(value) else None


def _pairwise_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0  # equal x (no request between two scrapes) says nothing about the slope
    return (y[j][keep] - y[i][keep]) / dx[keep]


def _tie_term(values: np.ndarray) -> float:
    _, counts = np.unique(values, return_counts=True)
    counts = counts[counts > 1].astype(float)
    return float(np.sum(counts * (counts - 1) * (2 * counts + 5)))


def _kendall_variance(x: np.ndarray, y: np.ndarray) -> float:
    n = float(len(x))
    return (n * (n - 1) * (2 * n + 5) - _tie_term(x) - _tie_term(y)) / 18.0


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged: memory that stays on one value for a while (a quiet process, a
    quantised counter) must not look autocorrelated just because tied values were numbered in order."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    group = np.cumsum(starts) - 1
    counts = np.bincount(group)
    average = np.cumsum(counts) - (counts - 1) / 2.0
    ranks = np.empty(len(values))
    ranks[order] = average[group]
    return ranks


def _autocorrelation_factor(residuals: np.ndarray) -> float:
    """How much autocorrelation in the residuals inflates the variance of Kendall's S.

    Hamed & Rao's correction over the initial positive sequence of the residual ranks'
    autocorrelations (lags up to the first one <= 0, as Geyer truncates for effective sample sizes),
    floored by the AR(1) factor (1 + r1) / (1 - r1): short series underestimate the long lags, and
    the floor keeps 95 % intervals near 90-95 % coverage for AR(1) noise up to r1 ~ 0.95
    (tests/unit/test_leak_estimator.py measures it).
    """
    n = len(residuals)
    if n < 4:
        return 1.0
    ranks = _ranks(residuals)
    ranks -= ranks.mean()
    denom = float(np.dot(ranks, ranks))
    if denom == 0:
        return 1.0
    acf = np.correlate(ranks, ranks, mode="full")[n:] / denom  # lags 1 .. n-1
    nonpositive = np.flatnonzero(acf <= 0)
    cutoff = int(nonpositive[0]) if len(nonpositive) else len(acf)
    lags = np.arange(1, cutoff + 1)
    weights = (n - lags) * (n - lags - 1.0) * (n - lags - 2.0)
    hamed_rao = 1.0 + 2.0 / (n * (n - 1.0) * (n - 2.0)) * float(np.sum(weights * acf[:cutoff]))
    r1 = min(max(float(acf[0]), 0.0), 0.99)
    # Only ever widen the interval: negative autocorrelation is rare for memory and unsafe to trust.
    return max(hamed_rao, (1.0 + r1) / (1.0 - r1), 1.0)


def _wander_bound(parts, estimate: float) -> float:
    """Magnitude before ranks: the largest slope error the residuals' whole wander could explain.

    A slope further than (max - min residual) / (x range) from the estimate would leave, in some
    segment, residuals that climb (or fall) from its first to its last point by more than they ever
    wander around the fit: that is growth, not noise. The rank interval's autocorrelation inflation
    knows nothing of magnitude, and for memory that is a near-perfect staircase (a leak under bursty
    traffic, a few pages of wander) it is unbounded although the slope is known to the byte. The
    widest bound of any segment with at least four points is used; inf when none has."""
    bound = -math.inf
    for _, px, py in parts:
        span = float(px.max() - px.min())
        if len(px) < 4 or span <= 0:
            continue
        residuals = py - estimate * px
        bound = max(bound, float(residuals.max() - residuals.min()) / span)
    return bound if bound >= 0 else math.inf


def theil_sen(x, y, segments=None, confidence: float = 0.95) -> SlopeFit:
    """Median within-segment pairwise slope of y against x, with a `confidence` interval."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    seg = np.zeros(len(x), dtype=int) if segments is None else np.asarray(segments)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y, seg = x[ok], y[ok], seg[ok]
    ids = [s for s in dict.fromkeys(seg.tolist())]
    parts = [(s, x[seg == s], y[seg == s]) for s in ids]
    parts = [(s, px, py) for s, px, py in parts if len(px) >= 2]
    slopes = [_pairwise_slopes(px, py) for _, px, py in parts]
    all_slopes = np.sort(np.concatenate(slopes)) if slopes else np.array([])
    n_pairs = len(all_slopes)
    if n_pairs == 0:
        return SlopeFit(NAN_INTERVAL, len(x), 0, len(parts))
    estimate = float(np.median(all_slopes))

    variance = 0.0
    for _, px, py in parts:
        variance += _kendall_variance(px, py) * _autocorrelation_factor(py - estimate * px)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    c = z * math.sqrt(max(variance, 0.0))
    lo_rank = int(round((n_pairs - c) / 2.0))
    hi_rank = int(round((n_pairs + c) / 2.0))
    low = float(all_slopes[lo_rank]) if lo_rank >= 0 else -math.inf
    high = float(all_slopes[hi_rank]) if hi_rank < n_pairs else math.inf
    cap = _wander_bound(parts, estimate)
    low, high = max(low, estimate - cap), min(high, estimate + cap)
    intercepts = tuple((int(s), float(np.median(py - estimate * px))) for s, px, py in parts)
    return SlopeFit(
        Interval(estimate, min(low, estimate), max(high, estimate)), len(x), n_pairs, len(parts), intercepts
    )
