"""The memory breakdown's arithmetic: expected parts from a profile and vLLM's cache_config_info,
the model-holding processes, and the unexplained rest (leakwatch/exporter/memory_breakdown.py)."""

from __future__ import annotations

import math

import pytest

from leakwatch.capacity.planner import weights_bytes
from leakwatch.core.profiles import load
from leakwatch.exporter.memory_breakdown import breakdowns, expected_parts, kv_pool_bytes, model_holders
from leakwatch.exporter.vllm_scrape import parse_metrics
from tests.support.exporter_scrape import VLLM_METRICS

GIB = 1 << 30
DEMO = load("demo")
IQUEST = load("iquest-coder-40b-4xa100")  # bf16, TP 4, 8 KV heads of 128, 80 layers
# The real vLLM 0.32 CPU server's vllm:cache_config_info (demo model): 16384 blocks of 128 tokens.
REAL_CACHE_CONFIG = parse_metrics(VLLM_METRICS).cache_config


def test_the_real_cache_config_line_is_read():
    assert REAL_CACHE_CONFIG is not None
    assert (REAL_CACHE_CONFIG["num_gpu_blocks"], REAL_CACHE_CONFIG["block_size"]) == ("16384", "128")
    assert (REAL_CACHE_CONFIG["cache_dtype"], REAL_CACHE_CONFIG["num_cpu_blocks"]) == ("auto", "None")


def test_demo_on_the_cpu_backend_from_vllms_blocks():
    # 2 layers x 1 KV head x 64 x 2 (K, V) x 2 B (bf16) = 512 B per token; 16384 x 128 tokens = 1 GiB,
    # which is the VLLM_CPU_KVCACHE_SPACE vLLM sized it from (kv_cache_memory_bytes says the same).
    assert kv_pool_bytes(DEMO, REAL_CACHE_CONFIG) == 16384 * 128 * 512 == GIB
    assert int(REAL_CACHE_CONFIG["kv_cache_memory_bytes"]) == GIB
    assert expected_parts(DEMO, REAL_CACHE_CONFIG) == {"weights": 623232 * 2, "kv_cache": GIB}


def test_vllms_blocks_win_over_the_profile_and_the_profile_is_the_cpu_fallback():
    bigger = load("demo", ["vllm.cpu_kv_cache_space_gib=2"])
    assert kv_pool_bytes(bigger, REAL_CACHE_CONFIG) == GIB  # what vLLM allocated
    assert kv_pool_bytes(bigger, None) == 2 * GIB  # vLLM not answering: what it is told to allocate
    unset = {**REAL_CACHE_CONFIG, "num_gpu_blocks": "None"}
    assert kv_pool_bytes(bigger, unset) == 2 * GIB


def test_a_gpu_profile_per_rank_and_cache_dtype():
    blocks = {"num_gpu_blocks": "40000", "block_size": "16", "cache_dtype": "auto"}
    # Per rank: 80 layers x (8 KV heads / TP 4) x 128 x 2 x 2 B = 80 KiB per token.
    assert kv_pool_bytes(IQUEST, blocks) == 40000 * 16 * 80 * 1024
    assert kv_pool_bytes(IQUEST, {**blocks, "cache_dtype": "fp8_e4m3"}) == 40000 * 16 * 40 * 1024
    assert expected_parts(IQUEST, blocks)["weights"] == math.ceil(weights_bytes(IQUEST) / 4)
    # No blocks, or a cache dtype whose size is not modelled: unknown on a GPU, never a guess.
    assert kv_pool_bytes(IQUEST, None) is None
    assert kv_pool_bytes(IQUEST, {**blocks, "cache_dtype": "nvfp4"}) is None
    assert expected_parts(IQUEST, None) == {"weights": math.ceil(weights_bytes(IQUEST) / 4)}


@pytest.mark.parametrize(
    "processes, holders",
    [
        (
            [("api_server", ""), ("engine_core", ""), ("worker", "1"), ("worker", "0")],
            [("worker", "0"), ("worker", "1")],
        ),
        ([("api_server", ""), ("engine_core", ""), ("other", "")], [("engine_core", "")]),  # one GPU, no worker
        ([("api_server", "")], []),
    ],
)
def test_the_model_holding_processes(processes, holders):
    assert model_holders(processes) == holders


def test_cpu_unexplained_is_the_measure_minus_the_parts_and_may_be_negative():
    processes = [("api_server", ""), ("engine_core", ""), ("worker", "0")]
    measured = {("api_server", ""): 500 << 20, ("worker", "0"): GIB + (300 << 20)}
    (item,) = breakdowns(DEMO, REAL_CACHE_CONFIG, processes, measured, None)
    assert (item.role, item.rank, item.gpu) == ("worker", "0", "")
    assert item.unexplained == (300 << 20) - 623232 * 2
    (short,) = breakdowns(DEMO, REAL_CACHE_CONFIG, processes, {("worker", "0"): 100 << 20}, None)
    assert short.unexplained is not None and short.unexplained < 0
    (unread,) = breakdowns(DEMO, REAL_CACHE_CONFIG, processes, None, None)
    assert unread.measured is None and unread.unexplained is None and unread.expected["kv_cache"] == GIB


def test_gpu_measure_sums_a_ranks_devices_and_names_its_largest():
    blocks = {"num_gpu_blocks": "40000", "block_size": "16", "cache_dtype": "auto"}
    processes = [("engine_core", ""), ("worker", "0"), ("worker", "1")]
    nvml = {("0", "worker", "0"): 70 * GIB, ("1", "worker", "0"): 500 << 20, ("1", "worker", "1"): 71 * GIB}
    first, second = breakdowns(IQUEST, blocks, processes, None, nvml)
    expected = math.ceil(weights_bytes(IQUEST) / 4) + 40000 * 16 * 80 * 1024
    assert (first.gpu, first.measured, first.unexplained) == ("0", 70 * GIB + (500 << 20), first.measured - expected)
    assert (second.gpu, second.unexplained) == ("1", 71 * GIB - expected)
    # Without vLLM's blocks the KV part is unknown, so no unexplained figure either.
    assert all(b.unexplained is None for b in breakdowns(IQUEST, None, processes, None, nvml))
