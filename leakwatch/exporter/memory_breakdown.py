"""Where a vLLM's memory goes: per model-holding process, the parts it holds by design against what
is measured; the remainder is where leaks live (vLLM issues #26850, #11550; docs/exporter.md).

The model-holding processes are the workers (one per tensor-parallel rank), or EngineCore when it
runs the model itself (one GPU, no worker process). Each is expected to hold:

- weights: the profile's parameters x dtype (or its quantization), over tensor_parallel_size
  (leakwatch.capacity.planner, the planner's own formula);
- kv_cache: the KV pool as vLLM reports it in vllm:cache_config_info: num_gpu_blocks (the device's
  pool: on the CPU backend too) x block_size x KV bytes per token per rank (layers x the rank's KV
  heads x head_dim x 2 for K and V x cache_dtype's bytes). Without that line (vLLM not answering, a
  release without it, a cache dtype whose size is not modelled): on the CPU backend the profile's
  VLLM_CPU_KVCACHE_SPACE, which is what vLLM sizes the pool from; on a GPU, unknown.

Measured is what the leak rules watch for that process: on the CPU backend its anonymous memory
(RssAnon + RssShmem) plus its swap (a pool or a leak pushed to swap is still held), on a GPU its NVML
process memory. Unexplained = measured - the expected parts,
and it can be negative (less resident than expected, e.g. weights not yet loaded).

On the CPU backend the whole pool counts from the start: vLLM allocates it with torch.zeros
(vllm/v1/worker/utils.py allocate_kv_cache), which writes every page, so it is resident before the
first request (torch 2.13: +512 MiB RssAnon for a 512 MiB torch.zeros, +0 for torch.empty). The CPU
remainder is then the runtime itself: Python's and the allocator's heaps, oneDNN's primitive cache,
scratch buffers. On a GPU it also holds the CUDA context, CUDA graphs, the activation reserve and the
caching allocator's slack: a steady offset of one to a few GiB. Either way a leak is the remainder's
growth, not its size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..capacity.planner import CapacityError, kv_bytes_per_token_per_gpu, weights_bytes_per_gpu
from ..core.profiles import Profile

GIB = 1024**3
PARTS = ("weights", "kv_cache")


@dataclass(frozen=True)
class Breakdown:
    role: str
    rank: str
    gpu: str  # the device the process holds its memory on; "" on the CPU backend or when unseen
    expected: dict[str, int]  # part -> bytes; a part that cannot be known is absent
    measured: int | None  # None when this scrape has no reading for the process

    @property
    def unexplained(self) -> int | None:
        """Measured minus every expected part; None unless all parts and the measure are known."""
        if self.measured is None or any(part not in self.expected for part in PARTS):
            return None
        return self.measured - sum(self.expected.values())


def _int(value: str | None) -> int | None:
    try:
        number = int(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and number >= 0 else None


def kv_pool_bytes(profile: Profile, cache_config: Mapping[str, str] | None) -> int | None:
    """One rank's KV pool: vLLM's blocks x block size x bytes per token per rank, else the CPU
    backend's VLLM_CPU_KVCACHE_SPACE, else None."""
    info = cache_config or {}
    blocks, block_size = _int(info.get("num_gpu_blocks")), _int(info.get("block_size"))
    if blocks is not None and block_size:
        try:
            per_token = kv_bytes_per_token_per_gpu(profile, info.get("cache_dtype") or None)
        except CapacityError:
            per_token = None
        if per_token is not None:
            return blocks * block_size * per_token
    if profile.device == "cpu" and "cpu_kv_cache_space_gib" in profile.vllm:
        return int(profile.vllm["cpu_kv_cache_space_gib"] * GIB)
    return None


def expected_parts(profile: Profile, cache_config: Mapping[str, str] | None) -> dict[str, int]:
    parts = {"weights": weights_bytes_per_gpu(profile)}
    kv = kv_pool_bytes(profile, cache_config)
    if kv is not None:
        parts["kv_cache"] = kv
    return parts


def model_holders(processes: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(role, rank) of the processes that hold the model: the workers, else EngineCore."""
    found = sorted(set(processes))
    workers = [p for p in found if p[0] == "worker"]
    return workers or [p for p in found if p[0] == "engine_core"]


def breakdowns(
    profile: Profile,
    cache_config: Mapping[str, str] | None,
    processes: Iterable[tuple[str, str]],
    host_anonymous: Mapping[tuple[str, str], int] | None,
    gpu_process: Mapping[tuple[str, str, str], int] | None,
) -> list[Breakdown]:
    """One Breakdown per model-holding process. `processes` are the (role, rank) of vLLM's tree;
    `host_anonymous` (anonymous + swap) is keyed (role, rank), `gpu_process` (gpu, role, rank)."""
    parts = expected_parts(profile, cache_config)
    out = []
    for role, rank in model_holders(processes):
        gpu, measured = "", None
        if profile.needs_gpu:
            # A rank's memory is on its own card; a sliver elsewhere (a stray CUDA context) is still
            # its memory, so the measure sums its devices and the label names its largest.
            mine = {g: v for (g, r, k), v in (gpu_process or {}).items() if (r, k) == (role, rank)}
            if mine:
                gpu = max(sorted(mine), key=lambda g: mine[g])
                measured = sum(mine.values())
        elif host_anonymous is not None:
            measured = host_anonymous.get((role, rank))
        out.append(Breakdown(role, rank, gpu, dict(parts), measured))
    return out
