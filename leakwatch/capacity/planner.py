"""Capacity planner: what a profile's vLLM will fit on its card, from the profile alone.

Mirrors how vLLM (>= 0.21) sizes its KV cache at start-up (vllm/v1/worker/gpu_worker.py,
determine_available_memory): on each GPU

    kv_cache = gpu_memory_utilization x gpu_memory
               - weights / TP - peak activations - non-torch memory - CUDA-graph estimate

then KV tokens = kv_cache / KV bytes per token per GPU, rounded down to whole blocks. Nothing is
downloaded: the profile's `architecture:` section states what the model's config.json says. The
formula and its constants are explained in docs/capacity.md; scripts/gpu/check_kv_capacity.py
compares the result with what vLLM reports on a real GPU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..core.errors import LeakwatchError
from ..core.profiles import DTYPE_BYTES, QUANTIZATION_BYTES, Profile

GIB = 1024**3

# Memory vLLM takes from the KV budget that the weights and activation estimate do not cover.
# Both can be overridden per profile (capacity.cuda_graph_gib / capacity.non_torch_gib) once
# scripts/gpu/check_kv_capacity.py has measured a card.
#
# CUDA graphs: since v0.21 vLLM subtracts its estimate of the graph pool from the KV budget
# (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the default). Field reports put the estimate at
# 0.5-1.5 GiB for the default capture sizes (up to 512) on 7-70B models; 1 GiB is the middle.
CUDA_GRAPH_GIB = 1.0
# Non-torch memory: cuBLAS/cuDNN workspaces, NCCL and custom all-reduce buffers and attention
# backend buffers allocated outside PyTorch's allocator after vLLM's baseline snapshot (category 3
# in vllm/utils/mem_utils.py memory_profiling). The CUDA context itself predates the snapshot and
# comes out of the (1 - gpu_memory_utilization) slack, not from this budget.
NON_TORCH_GIB = 0.35
# vLLM's KV block size when the profile sets none: 16 tokens on CUDA, 128 on the CPU backend
# (its attention backend resolves 128; see vllm:cache_config_info's block_size).
DEFAULT_BLOCK_SIZE = {"cuda": 16, "cpu": 128}
# vLLM's cache_dtype values of one byte per element (vllm/config/cache.py CacheDType); its packed
# 4-bit and per-head-scaled formats carry scales the planner does not model.
FP8_KV_CACHE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")
# The profiling forward pass samples max_num_seqs rows of fp32 logits; the sampler holds the
# logits and one same-sized working copy (softmax / sorted probabilities).
LOGITS_BYTES = 4
LOGITS_COPIES = 2


class CapacityError(LeakwatchError):
    """The profile cannot work as written; the message lists every reason."""


@dataclass(frozen=True)
class Plan:
    profile: str
    device: str
    gpu: str | None
    gpu_count: int
    tensor_parallel_size: int
    memory_bytes_per_gpu: int  # the card's memory (CUDA's total), or the CPU KV space
    gpu_memory_utilization: float | None
    budget_bytes_per_gpu: int  # what vLLM may use on each GPU
    weights_bytes: int
    weights_bytes_per_gpu: int
    activation_bytes_per_gpu: int
    cuda_graph_bytes_per_gpu: int
    non_torch_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    kv_bytes_per_token: int  # the whole model (all layers, all KV heads)
    kv_bytes_per_token_per_gpu: int
    block_size: int
    kv_blocks: int
    kv_tokens: int
    max_model_len: int
    max_full_length_sequences: float  # what vLLM logs as "Maximum concurrency for N tokens"

    def as_dict(self) -> dict:
        return asdict(self)


def _dtype_bytes(profile: Profile) -> int:
    dtype = profile.vllm["dtype"]
    return DTYPE_BYTES[profile.architecture["dtype"] if dtype == "auto" else dtype]


def weights_bytes(profile: Profile) -> int:
    """Bytes of the weights as served: quantized projections plus everything kept in the dtype."""
    arch = profile.architecture
    element = _dtype_bytes(profile)
    quantization = profile.vllm.get("quantization")
    if not quantization:
        return arch["parameters"] * element
    quantized = arch["quantizable_parameters"]
    return math.ceil(quantized * QUANTIZATION_BYTES[quantization]) + (arch["parameters"] - quantized) * element


def weights_bytes_per_gpu(profile: Profile) -> int:
    """Each tensor-parallel rank's share of the weights (one worker's, on a GPU or the CPU backend)."""
    return math.ceil(weights_bytes(profile) / profile.vllm["tensor_parallel_size"])


def kv_bytes_per_token(profile: Profile, kv_cache_dtype: str | None = None) -> int:
    """layers x KV heads x head_dim x 2 (K and V) x KV dtype bytes. `kv_cache_dtype` is what vLLM
    reports (its cache_dtype: auto, fp8, fp8_e4m3, bfloat16, ...); the profile's when None."""
    arch = profile.architecture
    kv_dtype = kv_cache_dtype or profile.vllm.get("kv_cache_dtype") or "auto"
    if kv_dtype == "auto":
        element = _dtype_bytes(profile)
    elif kv_dtype in DTYPE_BYTES:
        element = DTYPE_BYTES[kv_dtype]
    elif kv_dtype in FP8_KV_CACHE_DTYPES:
        element = 1
    else:
        raise CapacityError(f"KV cache dtype {kv_dtype!r}: its bytes per element are not modelled")
    return arch["num_layers"] * arch["num_kv_heads"] * arch["head_dim"] * 2 * element


def kv_bytes_per_token_per_gpu(profile: Profile, kv_cache_dtype: str | None = None) -> int:
    """What one tensor-parallel rank stores per token: its share of the KV heads."""
    per_token = kv_bytes_per_token(profile, kv_cache_dtype)
    return per_token * kv_heads_per_gpu(profile) // profile.architecture["num_kv_heads"]


def kv_heads_per_gpu(profile: Profile) -> int:
    """KV heads each GPU stores: split across TP, or replicated when TP exceeds them (as vLLM does)."""
    kv_heads = profile.architecture["num_kv_heads"]
    tp = profile.vllm["tensor_parallel_size"]
    return max(1, kv_heads // tp)


def activation_bytes_per_gpu(profile: Profile) -> int:
    """Peak activations of vLLM's profiling pass: max_num_batched_tokens through one layer, plus
    the sampler's logits for max_num_seqs requests.

    Per token the widest moment is the MLP: the residual stream and its normalised copy (2 x
    hidden) live next to the MLP's intermediate tensors (up and activated for a plain MLP, 2 x
    intermediate; gate+up and activated for a gated one, 3 x intermediate), split across TP.
    """
    arch, v = profile.architecture, profile.vllm
    tp = v["tensor_parallel_size"]
    mlp = (3 if arch["mlp_gated"] else 2) * arch["intermediate_size"]
    per_token = 2 * arch["hidden_size"] + math.ceil(mlp / tp)
    forward = v["max_num_batched_tokens"] * per_token * _dtype_bytes(profile)
    sampler = v["max_num_seqs"] * arch["vocab_size"] * LOGITS_BYTES * LOGITS_COPIES
    return forward + sampler


def _layout_problems(profile: Profile) -> list[str]:
    arch, v = profile.architecture, profile.vllm
    tp = v["tensor_parallel_size"]
    heads, kv_heads = arch["num_attention_heads"], arch["num_kv_heads"]
    problems = []
    if v["max_model_len"] > arch["max_position_embeddings"]:
        problems.append(
            f"max_model_len {v['max_model_len']} is beyond the model's {arch['max_position_embeddings']} positions"
        )
    if v["max_num_batched_tokens"] < v["max_num_seqs"]:
        problems.append(
            f"max_num_batched_tokens {v['max_num_batched_tokens']} is smaller than max_num_seqs "
            f"{v['max_num_seqs']}: a step could not give every running sequence a token"
        )
    if not v["enable_chunked_prefill"] and v["max_num_batched_tokens"] < v["max_model_len"]:
        problems.append(
            f"without chunked prefill max_num_batched_tokens ({v['max_num_batched_tokens']}) must be at least "
            f"max_model_len ({v['max_model_len']}) or long prompts can never be scheduled"
        )
    if heads % tp:
        problems.append(f"tensor_parallel_size {tp} does not divide the {heads} attention heads")
    if (kv_heads >= tp and kv_heads % tp) or (kv_heads < tp and tp % kv_heads):
        problems.append(
            f"tensor_parallel_size {tp} does not divide the {kv_heads} KV heads "
            f"(nor is it a multiple of them, which would replicate them)"
        )
    if profile.needs_gpu and tp > profile.gpu_count:
        problems.append(f"tensor_parallel_size {tp} needs {tp} GPUs; the profile has {profile.gpu_count}")
    return problems


def plan(profile: Profile) -> Plan:
    """The capacity of a profile, or CapacityError naming every reason it cannot work."""
    problems = _layout_problems(profile)
    v, hw = profile.vllm, profile.hardware
    tp = v["tensor_parallel_size"]
    block_size = v.get("block_size") or DEFAULT_BLOCK_SIZE[profile.device]
    weights = weights_bytes(profile)
    per_token = kv_bytes_per_token(profile)
    per_token_gpu = kv_bytes_per_token_per_gpu(profile)

    if profile.needs_gpu:
        memory = int(hw["gpu_memory_gib"] * GIB)
        utilization = float(v["gpu_memory_utilization"])
        budget = int(utilization * memory)
        weights_gpu = weights_bytes_per_gpu(profile)
        activation = activation_bytes_per_gpu(profile)
        cuda_graph = int(profile.capacity.get("cuda_graph_gib", CUDA_GRAPH_GIB) * GIB)
        non_torch = int(profile.capacity.get("non_torch_gib", NON_TORCH_GIB) * GIB)
        where = f"{utilization:.2f} x {hw['gpu_memory_gib']} GiB {hw['gpu']}"
        if weights_gpu >= budget:
            problems.append(
                f"weights do not fit: {_gib(weights_gpu)} per GPU "
                f"({_quant_label(profile)}, TP {tp}) but vLLM may use only {_gib(budget)} ({where})"
            )
    else:  # the CPU backend: weights live in host RAM, the KV pool is VLLM_CPU_KVCACHE_SPACE
        memory = budget = int(v["cpu_kv_cache_space_gib"] * GIB)
        utilization = None
        weights_gpu = weights
        activation = cuda_graph = non_torch = 0
        where = f"VLLM_CPU_KVCACHE_SPACE={v['cpu_kv_cache_space_gib']} GiB"

    kv_cache = budget - activation - cuda_graph - non_torch - (weights_gpu if profile.needs_gpu else 0)
    kv_blocks = max(0, kv_cache) // (per_token_gpu * block_size)
    kv_tokens = kv_blocks * block_size
    if not problems and kv_tokens < v["max_model_len"]:
        problems.append(
            f"the KV cache holds {kv_tokens} tokens ({_gib(max(0, kv_cache))} after weights and overhead, {where}), "
            f"less than one max_model_len {v['max_model_len']} sequence; vLLM refuses to start"
        )
    if problems:
        raise CapacityError(f"profile {profile.name!r} cannot work: " + "; ".join(problems))
    return Plan(
        profile=profile.name,
        device=profile.device,
        gpu=hw.get("gpu"),
        gpu_count=profile.gpu_count,
        tensor_parallel_size=tp,
        memory_bytes_per_gpu=memory,
        gpu_memory_utilization=utilization,
        budget_bytes_per_gpu=budget,
        weights_bytes=weights,
        weights_bytes_per_gpu=weights_gpu,
        activation_bytes_per_gpu=activation,
        cuda_graph_bytes_per_gpu=cuda_graph,
        non_torch_bytes_per_gpu=non_torch,
        kv_cache_bytes_per_gpu=kv_cache,
        kv_bytes_per_token=per_token,
        kv_bytes_per_token_per_gpu=per_token_gpu,
        block_size=block_size,
        kv_blocks=kv_blocks,
        kv_tokens=kv_tokens,
        max_model_len=v["max_model_len"],
        max_full_length_sequences=round(kv_tokens / v["max_model_len"], 2),
    )


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _quant_label(profile: Profile) -> str:
    q = profile.vllm.get("quantization")
    dtype = profile.vllm["dtype"]
    return f"{dtype} with {q} weights" if q else dtype
