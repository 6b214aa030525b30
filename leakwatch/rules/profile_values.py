"""What the alerting rules take from the model profiles: the share of a GPU that vLLM preallocates
(gpu_memory_utilization) and the warm-up after ready. One rule file serves every profile, so the
rules use each profile's value or the largest of them; the drill reads the warm-up from here too,
so its timings match the rules'."""

from __future__ import annotations

from ..core import profiles as model_profiles

# vLLM's default --gpu-memory-utilization, used when no GPU profile sets one.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def profile_shares() -> list[float]:
    """The gpu_memory_utilization of each GPU profile (vLLM's default where one sets none), sorted."""
    shares = set()
    for name in model_profiles.available():
        profile = model_profiles.load(name)
        if profile.needs_gpu:
            shares.add(float(profile.vllm.get("gpu_memory_utilization") or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION))
    return sorted(shares) or [VLLM_DEFAULT_GPU_MEMORY_UTILIZATION]


def preallocated_share() -> float:
    """The highest gpu_memory_utilization among the GPU profiles (the share vLLM takes at start)."""
    return max(profile_shares())


def warmup_after_ready_s() -> float:
    """The longest monitoring.warmup_after_ready among the profiles: how long after the exporter's
    post-warm-up baseline the fast-leak rules still ignore growth (rules serve every profile)."""
    return max(model_profiles.load(name).warmup_after_ready_s for name in model_profiles.available())
