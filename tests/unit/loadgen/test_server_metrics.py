"""Reading vLLM's histograms: sums over label sets, deltas between scrapes, the bucket holding a quantile."""

from __future__ import annotations

import math

import pytest

from benchmarks.loadgen import server_metrics

EXPOSITION = """\
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="demo"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="demo"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.06",model_name="demo"} 9.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="demo"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="demo"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="demo"} 0.4
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="demo"} 640.0
vllm:generation_tokens_created{engine="0",model_name="demo"} 1.7e9
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="demo"} 3.0
"""


def test_parse_sums_label_sets_and_skips_created():
    snap = server_metrics.parse(EXPOSITION)
    assert snap.histogram(server_metrics.TTFT) == {0.02: 1, 0.04: 6, 0.06: 9, math.inf: 10}
    assert snap.values[server_metrics.GENERATION_TOKENS] == 640
    assert snap.values[server_metrics.RUNNING] == 3


def test_the_bucket_holding_a_quantile():
    buckets = {0.02: 1, 0.04: 6, 0.06: 9, math.inf: 10}
    median = server_metrics.quantile(buckets, 0.5)
    assert (median.lower, median.upper) == (0.02, 0.04)
    assert median.estimate == pytest.approx(0.02 + 0.02 * (5 - 1) / 5)  # histogram_quantile's interpolation
    top = server_metrics.quantile(buckets, 0.95)
    assert top.lower == 0.06 and math.isinf(top.upper)
    assert server_metrics.quantile({0.1: 0, math.inf: 0}, 0.5) is None


def test_deltas_between_scrapes():
    before = {0.02: 1, 0.04: 6, math.inf: 10}
    after = {0.02: 4, 0.04: 6, math.inf: 15}
    assert server_metrics.delta(before, after) == {0.02: 3, 0.04: 0, math.inf: 5}
