"""Latency distributions at full precision with bounded memory, mergeable across Locust workers.

Locust keeps response times rounded to about two significant digits, which turns a 3.4 ms
inter-token latency into 3 ms. Here each value lands in a log-linear bucket (HdrHistogram's idea):
2048 sub-buckets per power of two, so a quantile is off by at most 1/4096 (0.025 %) of its value,
while count, sum, min and max are exact. Memory grows with the range of values, not their number.
Each distribution also counts fixed Prometheus bucket edges exactly, for the /metrics histograms.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable

SUB_BUCKET_BITS = 11
SUB_BUCKETS = 1 << SUB_BUCKET_BITS
ZERO_INDEX = -(1 << 40)  # values <= 0 (clock ties); far below any real bucket


def bucket_index(value: float) -> int:
    if value <= 0.0:
        return ZERO_INDEX
    mantissa, exponent = math.frexp(value)  # value = mantissa * 2**exponent, 0.5 <= mantissa < 1
    return (exponent << SUB_BUCKET_BITS) + int((mantissa - 0.5) * (2 * SUB_BUCKETS))


def bucket_midpoint(index: int) -> float:
    if index == ZERO_INDEX:
        return 0.0
    exponent = index >> SUB_BUCKET_BITS
    sub = index & (SUB_BUCKETS - 1)
    width = math.ldexp(1.0, exponent) / (2 * SUB_BUCKETS)
    low = math.ldexp(0.5, exponent) + sub * width
    return low + width / 2


class Distribution:
    """One latency (or rate) metric: log-linear buckets, exact moments, fixed-edge counts."""

    __slots__ = ("count", "counts", "edge_counts", "edges", "max", "min", "total")

    def __init__(self, edges: Iterable[float] = ()):
        self.edges = tuple(edges)
        self.counts: dict[int, int] = {}
        self.edge_counts = [0] * (len(self.edges) + 1)  # last slot: above the highest edge (+Inf)
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def record(self, value: float) -> None:
        index = bucket_index(value)
        counts = self.counts
        counts[index] = counts.get(index, 0) + 1
        # Prometheus buckets are "less or equal": bisect_left puts a value equal to an edge in it.
        self.edge_counts[bisect_left(self.edges, value)] += 1
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def quantile(self, q: float) -> float:
        """The value at quantile q (0..1) by nearest rank, within 0.025 %; NaN when empty."""
        if not self.count:
            return math.nan
        if q <= 0:
            return self.min
        if q >= 1:
            return self.max
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                return min(max(bucket_midpoint(index), self.min), self.max)
        return self.max

    def cumulative_edge_counts(self) -> list[tuple[float, int]]:
        """(upper edge, count of values <= edge) for each edge and +Inf, as Prometheus exposes them."""
        out, running = [], 0
        for edge, n in zip((*self.edges, math.inf), self.edge_counts):
            running += n
            out.append((edge, running))
        return out

    # -- merging across processes (Locust's worker reports are msgpack: plain lists and numbers) --

    def to_wire(self) -> dict:
        return {
            "buckets": [[index, n] for index, n in self.counts.items()],
            "edge_counts": list(self.edge_counts),
            "count": self.count,
            "total": self.total,
            "min": self.min if self.count else None,
            "max": self.max if self.count else None,
        }

    def merge_wire(self, wire: dict) -> None:
        if not wire["count"]:
            return
        counts = self.counts
        for index, n in wire["buckets"]:
            counts[index] = counts.get(index, 0) + n
        if len(wire["edge_counts"]) != len(self.edge_counts):
            raise ValueError("cannot merge distributions with different bucket edges")
        self.edge_counts = [a + b for a, b in zip(self.edge_counts, wire["edge_counts"])]
        self.count += wire["count"]
        self.total += wire["total"]
        self.min = min(self.min, wire["min"])
        self.max = max(self.max, wire["max"])

    def merge(self, other: Distribution) -> None:
        self.merge_wire(other.to_wire())
