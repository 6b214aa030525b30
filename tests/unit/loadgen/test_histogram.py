"""Full-precision distributions: quantiles within 0.025 % of the exact value, exact moments, exact
Prometheus bucket counts, and lossless merging of worker reports."""

from __future__ import annotations

import math
import random

import msgpack
import numpy as np
import pytest

from leakwatch.loadgen.histogram import Distribution, bucket_index, bucket_midpoint
from leakwatch.loadgen.stats import TTFT_BUCKETS


def exact_quantile(values, q):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_quantiles_keep_four_significant_digits_where_locust_keeps_two():
    rng = random.Random(1)
    values = [rng.lognormvariate(math.log(0.004), 1.0) for _ in range(20000)]  # ITL-like, ~4 ms
    d = Distribution()
    for v in values:
        d.record(v)
    for q in (0.5, 0.9, 0.99, 0.999):
        assert d.quantile(q) == pytest.approx(exact_quantile(values, q), rel=2.5e-4)
    assert d.count == len(values)
    assert d.mean == pytest.approx(np.mean(values), rel=1e-12)
    assert (d.min, d.max) == (min(values), max(values))
    assert d.quantile(0) == min(values) and d.quantile(1) == max(values)


def test_bucket_midpoints_are_within_the_error_bound_over_many_decades():
    for value in (1e-6, 3.3e-4, 0.0034, 0.05, 1.0, 7.77, 1234.5, 3e5):
        assert bucket_midpoint(bucket_index(value)) == pytest.approx(value, rel=1 / 4096)
    assert bucket_midpoint(bucket_index(0.0)) == 0.0


def test_memory_is_bounded_by_the_range_not_the_count():
    d = Distribution()
    rng = random.Random(2)
    for _ in range(200000):
        d.record(rng.uniform(0.01, 0.1))
    # log2(10) octaves x 2048 sub-buckets at most, whatever the number of samples
    assert len(d.counts) <= math.ceil(math.log2(10) + 1) * 2048


def test_edge_counts_follow_prometheus_le_semantics():
    d = Distribution(TTFT_BUCKETS)
    for v in (0.001, 0.0010001, 0.05, 0.1, 3000.0):
        d.record(v)
    cumulative = dict(d.cumulative_edge_counts())
    assert cumulative[0.001] == 1  # a value equal to an edge is in that bucket
    assert cumulative[0.005] == 2
    assert cumulative[0.06] == 3 and cumulative[0.1] == 4
    assert cumulative[2560.0] == 4 and cumulative[math.inf] == 5


def test_merging_wire_copies_equals_recording_everything_in_one():
    rng = random.Random(3)
    parts = [[rng.expovariate(10) for _ in range(1000)] for _ in range(3)]
    merged, single = Distribution(TTFT_BUCKETS), Distribution(TTFT_BUCKETS)
    for part in parts:
        d = Distribution(TTFT_BUCKETS)
        for v in part:
            d.record(v)
            single.record(v)
        # Locust sends worker reports as msgpack: the wire form must survive it.
        merged.merge_wire(msgpack.unpackb(msgpack.packb(d.to_wire()), strict_map_key=False))
    assert merged.counts == single.counts and merged.edge_counts == single.edge_counts
    assert merged.total == pytest.approx(single.total)
    assert (merged.min, merged.max, merged.count) == (single.min, single.max, single.count)
    empty = Distribution(TTFT_BUCKETS)
    merged.merge_wire(empty.to_wire())
    assert merged.count == single.count
    with pytest.raises(ValueError):
        Distribution((1.0,)).merge_wire(single.to_wire())


def test_an_empty_distribution_reports_nothing():
    d = Distribution()
    assert math.isnan(d.quantile(0.5)) and math.isnan(d.mean)
