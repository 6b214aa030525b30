"""Reading vLLM's /metrics: requests served, requests in flight, tokens processed, series count."""

from __future__ import annotations

import pytest

from leakwatch.exporter.vllm_scrape import parse_metrics
from tests.support.exporter_scrape import VLLM_METRICS, vllm_metrics


def test_real_vllm_exposition():
    stats = parse_metrics(VLLM_METRICS)
    assert stats.requests_served == 410  # 32 stop + 378 length
    assert stats.in_flight == 0
    assert stats.tokens_processed == 4468 + 21249  # prompt + generation, not the per-request histograms
    sample_lines = [line for line in VLLM_METRICS.splitlines() if line and not line.startswith("#")]
    assert stats.series == len(sample_lines) == 430


def test_running_and_waiting_add_up_but_waiting_by_reason_does_not():
    text = (
        vllm_metrics(7, in_flight=3)
        .replace(
            'vllm:num_requests_waiting{engine="0",model_name="demo"} 0.0',
            'vllm:num_requests_waiting{engine="0",model_name="demo"} 2.0',
        )
        .replace('reason="capacity"} 0.0', 'reason="capacity"} 2.0')
    )
    stats = parse_metrics(text)
    assert (stats.requests_served, stats.in_flight) == (7, 5)


def test_sums_over_engines_and_tolerates_odd_label_values_and_timestamps():
    text = (
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="a b}"} 3.0\n'
        'vllm:request_success_total{engine="1",finished_reason="stop",model_name="x"} 4.0 1700000000000\n'
        "vllm:num_requests_running 1\n"
    )
    stats = parse_metrics(text)
    assert (stats.requests_served, stats.in_flight, stats.series) == (7, 1, 3)


def test_a_server_without_the_request_counter_is_an_error():
    with pytest.raises(ValueError, match="vllm:request_success_total"):
        parse_metrics("up 1\nprocess_resident_memory_bytes 1e9\n")


def test_cache_config_labels_engine_0_first_and_escapes():
    text = (
        'vllm:request_success_total{engine="0"} 1\n'
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="7"} 1.0\n'
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="9",odd="a\\"b,}c"} 1.0\n'
    )
    assert parse_metrics(text).cache_config == {
        "block_size": "16",
        "engine": "0",
        "num_gpu_blocks": "9",
        "odd": 'a"b,}c',
    }


def test_no_or_an_unreadable_cache_config_line_costs_only_the_breakdown():
    assert parse_metrics('vllm:request_success_total{engine="0"} 1\n').cache_config is None
    broken = 'vllm:request_success_total{engine="0"} 1\nvllm:cache_config_info{block_size=16} 1\n'
    assert parse_metrics(broken).cache_config is None and parse_metrics(broken).requests_served == 1
