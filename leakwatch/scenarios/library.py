"""The scenario library: the leaks the rules must catch and the healthy month they must sit through.

Every scenario is deterministic for its seed. Times are UTC; the first start is at 08:30 on a
Monday, so a leak that starts with the server meets the morning's rising traffic.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import LeakwatchError
from .model import GIB, GPUCards, Host, Leak, Noise, Scenario, Traffic

MB = 1_000_000

# Janeway-13B (fp8) on one RTX 4090 D under vLLM at gpu_memory_utilization 0.90: ~22 GB of 24 in
# use once ready, ~2 GB of headroom; ~1000 creative-writing requests a day.
JANEWAY_4090D = GPUCards()
PRODUCTION_DAY = Traffic()

# IQuest-Coder-40B on 4 x A100 80 GB (tensor parallel 4) as a busy API tier: 150 short,
# prefix-cached code completions per second.
IQUEST_4XA100 = GPUCards(
    count=4, total_mib=81920, model_name="NVIDIA A100-SXM4-80GB", non_torch_mib=600, kv_capacity_tokens=655_000
)
BUSY_API = Traffic(
    requests_per_day=150 * 86400,
    diurnal_amplitude=0.2,
    prompt_tokens=(100, 300),
    output_tokens=(20, 80),
    ttft_median_s=0.15,
    itl_median_s=0.025,
    long_request_share=0.0005,
)
IQUEST_HOST = Host(
    mem_total_bytes=1024 * GIB,
    other_used_bytes=24 * GIB,
    swap_total_bytes=0.0,
    cgroup_limit_bytes=None,
    base_rss_bytes={"api_server": 2.0 * GIB, "engine_core": 2.5 * GIB, "worker": 6.0 * GIB},
)


def _scenarios() -> dict[str, Scenario]:
    return {
        s.name: s
        for s in (
            Scenario(
                "article_a_vllm",
                "Article A's leak under vLLM on the 4090D: +6 MB per request, ~1000 requests a day",
                days=1.0,
                gpu=JANEWAY_4090D,
                leaks=(Leak("gpu", 6 * MB),),
                note="vLLM preallocates 90 % of the card, so only ~2 GB of headroom is left: an OOM every few hours.",
            ),
            Scenario(
                "article_a_published",
                "Article A as published: PyTorch server at 12.3 GB on the 4090D, +6 MB per request",
                days=3.0,
                gpu=replace(JANEWAY_4090D, gpu_memory_utilization=None, ready_mib=12595, non_torch_mib=0),
                leaks=(Leak("gpu", 6 * MB),),
                note="12.3 GB at start and 18 GB after 24 h as in the article; at a steady 6 MB per request the card "
                "fills in about two days (the article reports 22 GB after 72 h).",
            ),
            Scenario(
                "slow_leak",
                "A slow GPU leak under vLLM: +0.5 MB per request, ~1000 requests a day",
                days=2.0,
                gpu=JANEWAY_4090D,
                leaks=(Leak("gpu", 0.5 * MB),),
            ),
            Scenario(
                "worker_rss_high_traffic",
                "Host RSS leak in every worker: 90 B per request at 150 requests/s (4 x A100)",
                days=0.5,
                gpu=IQUEST_4XA100,
                traffic=BUSY_API,
                host=IQUEST_HOST,
                model_name="iquest-coder-40b",
                leaks=(Leak("worker", 90),),
                note="~47 MiB an hour per worker, hidden in a 6 GiB process: the API server's own RSS shows nothing.",
            ),
            Scenario(
                "worker_rss_slow",
                "Host RSS leak in the worker: 1 MB per request, ~1000 requests a day",
                days=2.0,
                gpu=JANEWAY_4090D,
                leaks=(Leak("worker", 1 * MB),),
            ),
            Scenario(
                "swap_hidden_leak",
                "EngineCore leaks 1 MB per request and the kernel swaps it out: RSS stays flat",
                days=2.0,
                gpu=JANEWAY_4090D,
                leaks=(Leak("engine_core", 1 * MB, to_swap=True),),
            ),
            Scenario(
                "metrics_cardinality",
                "vLLM's /metrics gains 40 series an hour (per-adapter labels churning)",
                days=2.0,
                gpu=JANEWAY_4090D,
                metrics_series_per_hour=40.0,
            ),
            Scenario(
                "healthy_30d",
                "30 healthy days: warm-up, one-time steps after long requests, daily restarts, noise, KV swings",
                days=30.0,
                gpu=JANEWAY_4090D,
                traffic=replace(PRODUCTION_DAY, bursts_per_day=3.0),
                daily_restart_hour=4.0,
                noise=Noise(),
                seed=30,
                note="Nothing leaks. Every restart brings the warm-up and the allocator steps of the first long "
                "requests back; bursts of long-context requests swing the KV cache to ~90 %.",
            ),
        )
    }


SCENARIOS = _scenarios()


def get(name: str, days: float | None = None, seed: int | None = None) -> Scenario:
    if name not in SCENARIOS:
        raise LeakwatchError(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}")
    scenario = SCENARIOS[name]
    if days is not None:
        if not days > 0:
            raise LeakwatchError(f"--days must be positive, got {days}")
        scenario = replace(scenario, days=float(days))
    if seed is not None:
        scenario = replace(scenario, seed=int(seed))
    return scenario
