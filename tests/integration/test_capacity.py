"""The capacity planner: the brief's figures for both production profiles, and every refusal."""

from __future__ import annotations

import json
import subprocess

import pytest

from leakwatch.capacity import planner
from leakwatch.core import profiles
from leakwatch.core.paths import REPO_ROOT
from tests.support.native_stack import VENV_BIN

GIB = 1024**3
KIB = 1024


def plan(name: str, *overrides: str) -> planner.Plan:
    return planner.plan(profiles.load(name, overrides=list(overrides)))


def refusal(name: str, *overrides: str) -> str:
    with pytest.raises(planner.CapacityError) as info:
        plan(name, *overrides)
    return str(info.value)


def test_janeway_fp8_on_a_4090d():
    p = plan("janeway-13b-4090d")
    assert p.kv_bytes_per_token == 800 * KIB  # 2 x 40 x 5120 x 2 B
    assert 12.0 * GIB < p.weights_bytes_per_gpu < 12.5 * GIB  # fp8 projections, fp16 rest
    assert 7.0 * GIB < p.kv_cache_bytes_per_gpu < 7.8 * GIB  # brief: ~7.5 GiB
    assert 9000 <= p.kv_tokens <= 10000  # brief: ~9.8K tokens
    assert 4.0 <= p.max_full_length_sequences <= 5.0  # brief: ~4.8 x 2048
    assert p.kv_tokens % p.block_size == 0


def test_iquest_tp4_on_a100s():
    p = plan("iquest-coder-40b-4xa100")
    assert p.kv_bytes_per_token == 320 * KIB  # 2 x 80 x 8 x 128 x 2 B
    assert p.kv_bytes_per_token_per_gpu == 80 * KIB  # 2 of the 8 KV heads per GPU
    assert 18.0 * GIB < p.weights_bytes_per_gpu < 19.0 * GIB  # 74 GiB of bf16 over 4 GPUs
    assert 49 * GIB <= p.kv_cache_bytes_per_gpu <= 51 * GIB  # brief: ~49-51 GiB per GPU
    assert 4.5 <= p.max_full_length_sequences <= 5.5  # brief: ~5 x 131072


def test_demo_on_the_cpu_backend():
    p = plan("demo")
    assert p.kv_bytes_per_token == 2 * 1 * 64 * 2 * 2  # 2 layers, 1 KV head, bf16
    assert p.kv_tokens == GIB // p.kv_bytes_per_token  # VLLM_CPU_KVCACHE_SPACE=1
    assert p.weights_bytes_per_gpu == profiles.load("demo").architecture["parameters"] * 2


def test_overhead_is_modelled_not_fudged():
    """KV = budget - weights - activations - CUDA graphs - non-torch memory, each visible."""
    p = plan("janeway-13b-4090d")
    parts = (
        p.weights_bytes_per_gpu + p.activation_bytes_per_gpu + p.cuda_graph_bytes_per_gpu + p.non_torch_bytes_per_gpu
    )
    assert p.kv_cache_bytes_per_gpu == p.budget_bytes_per_gpu - parts
    assert p.budget_bytes_per_gpu == int(0.90 * 23.55 * GIB)
    # More batched tokens per step means a bigger profiling pass and fewer KV tokens.
    assert plan("janeway-13b-4090d", "vllm.max_num_batched_tokens=8192").kv_tokens < p.kv_tokens
    # A measured CUDA-graph pool (profile field) replaces the default estimate.
    assert plan("janeway-13b-4090d", "capacity.cuda_graph_gib=0.5").kv_tokens > p.kv_tokens


def test_kv_heads_fewer_than_tp_are_replicated_as_vllm_does():
    p = plan("iquest-coder-40b-4xa100", "architecture.num_kv_heads=2")
    assert p.kv_bytes_per_token_per_gpu == p.kv_bytes_per_token // 2  # one of two heads on each GPU


def test_fp16_janeway_does_not_fit_24gb():
    message = refusal("janeway-13b-4090d", "vllm.quantization=null")
    assert "weights do not fit: 23.94 GiB per GPU (float16, TP 1)" in message
    assert "0.90 x 23.55 GiB RTX 4090D" in message


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["vllm.tensor_parallel_size=3", "hardware.gpu_count=4"],
            "tensor_parallel_size 3 does not divide the 40 attention heads",
        ),
        (
            ["vllm.tensor_parallel_size=5", "hardware.gpu_count=8"],
            "tensor_parallel_size 5 does not divide the 8 KV heads",
        ),
        (["vllm.max_model_len=262144"], "max_model_len 262144 is beyond the model's 131072 positions"),
        (["vllm.max_num_batched_tokens=128"], "max_num_batched_tokens 128 is smaller than max_num_seqs 256"),
        (["vllm.tensor_parallel_size=8"], "tensor_parallel_size 8 needs 8 GPUs; the profile has 4"),
        (
            ["vllm.enable_chunked_prefill=false"],
            "without chunked prefill max_num_batched_tokens (8192) must be at least",
        ),
    ],
)
def test_impossible_layouts_are_refused(overrides, message):
    assert message in refusal("iquest-coder-40b-4xa100", *overrides)


def test_kv_smaller_than_one_sequence_is_refused():
    message = refusal("janeway-13b-4090d", "vllm.gpu_memory_utilization=0.62")
    assert "less than one max_model_len 2048 sequence; vLLM refuses to start" in message


def test_every_reason_is_reported_at_once():
    message = refusal("iquest-coder-40b-4xa100", "vllm.tensor_parallel_size=3", "vllm.max_model_len=200000")
    assert "attention heads" in message and "positions" in message


def leakwatch_plan(*args: str):
    return subprocess.run(
        [str(VENV_BIN / "leakwatch"), "plan", *args], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )


@pytest.mark.parametrize("name", ["janeway-13b-4090d", "iquest-coder-40b-4xa100", "demo"])
def test_json_output(name):
    result = leakwatch_plan(name, "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    for key in ("weights_bytes_per_gpu", "kv_bytes_per_token", "kv_tokens", "max_full_length_sequences"):
        assert figures[key] == getattr(plan(name), key)


def test_refusal_exits_non_zero_with_its_reason():
    result = leakwatch_plan("janeway-13b-4090d", "--set", "vllm.quantization=null")
    assert result.returncode == 2 and result.stdout == ""
    assert "weights do not fit" in result.stderr and "Traceback" not in result.stderr
    table = leakwatch_plan("janeway-13b-4090d")
    assert table.returncode == 0 and "KV tokens" in table.stdout and "full-length sequences" in table.stdout


@pytest.mark.parametrize(
    "item, message",
    [
        ("vllm.max_num_seq=8", "unknown key vllm.max_num_seq"),
        ("gpu.count=2", "unknown section 'gpu'"),
        ("vllm.max_model_len", "expected SECTION.KEY=VALUE"),
        ("vllm.max_model_len=lots", "vllm.max_model_len must be of type int"),
    ],
)
def test_bad_overrides_are_named(item, message):
    result = leakwatch_plan("demo", "--set", item)
    assert result.returncode == 2 and message in result.stderr
