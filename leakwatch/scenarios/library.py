"""The scenario library: the leaks the rules must catch and the healthy month they must sit through.

Every scenario is deterministic for its seed. Times are UTC; the first start is at 08:30 on a
Monday, so a leak that starts with the server meets the morning's rising traffic.
"""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import LeakwatchError
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

# Fast leaks (issue: a page before the OOM from the first minutes): an 8B model in fp8 on the
# 4090D (~8 GiB of weights leave room for ~90k tokens of KV cache) answering 30 short requests a
# second, on a 32 GiB host with no swap and no container limit: ~20 GiB left to vLLM once ready.
SMALL_MODEL_4090D = replace(JANEWAY_4090D, kv_capacity_tokens=90_000)
SHORT_REQUESTS = replace(BUSY_API, requests_per_day=30 * 86400)  # the busy API tier's requests, fewer
HOST_32GIB = Host(mem_total_bytes=32 * GIB, other_used_bytes=6 * GIB, swap_total_bytes=0.0, cgroup_limit_bytes=None)
KB = 1000


def _fast_host_leak(name: str, kb_per_request: float, hours: float, title: str, **extra) -> Scenario:
    return Scenario(
        name,
        title,
        days=hours / 24,
        gpu=SMALL_MODEL_4090D,
        traffic=SHORT_REQUESTS,
        host=HOST_32GIB,
        model_name="small-8b",
        leaks=(Leak("api_server", kb_per_request * KB),),
        **extra,
    )


def _fast_gpu_leak(name: str, title: str, hours: float, **extra) -> Scenario:
    return Scenario(
        name,
        title,
        days=hours / 24,
        gpu=SMALL_MODEL_4090D,
        traffic=replace(SHORT_REQUESTS, requests_per_day=5 * 86400),
        host=HOST_32GIB,
        model_name="small-8b",
        leaks=(Leak("gpu", 60 * KB, segment_mib=20.0),),
        **extra,
    )


def _fast_scenarios() -> tuple[Scenario, ...]:
    return (
        _fast_host_leak(
            "fast_host_leak",
            100,
            3.0,
            "The API server keeps 100 KB per request from the first, at 30 requests/s on a 32 GiB host "
            "(~10.8 GB/h: out of memory ~110 min after start)",
        ),
        _fast_host_leak(
            "fast_host_leak_30min",
            370,
            1.0,
            "The API server keeps 370 KB per request from the first, at 30 requests/s on a 32 GiB host "
            "(out of memory ~30 min after start)",
        ),
        _fast_host_leak(
            "fast_host_leak_3h",
            60,
            4.0,
            "The API server keeps 60 KB per request from the first, at 30 requests/s on a 32 GiB host "
            "(out of memory ~3 h after start)",
        ),
        _fast_host_leak(
            "fast_host_leak_after_heal",
            100,
            4.0,
            "fast_host_leak, restarted by the healer after an hour: the leak in vLLM's code comes back",
            healer_restarts_s=(3600.0,),
        ),
        _fast_gpu_leak(
            "fast_gpu_leak",
            "The card keeps 60 KB per request from the first, at 5 requests/s (~1 GB/h against ~1.5 GB of "
            "headroom above the preallocation)",
            3.0,
        ),
        _fast_gpu_leak(
            "fast_gpu_leak_after_heal",
            "fast_gpu_leak, restarted by the healer after 40 minutes",
            3.0,
            healer_restarts_s=(2400.0,),
        ),
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
            *_fast_scenarios(),
            Scenario(
                "healthy_fast_host",
                "7 healthy days at 30 requests/s on a 32 GiB host: restarts, and a 700 MiB cache that fills "
                "within minutes of each start and stops",
                days=7.0,
                gpu=SMALL_MODEL_4090D,
                traffic=replace(SHORT_REQUESTS, bursts_per_day=3.0),
                host=HOST_32GIB,
                model_name="small-8b",
                daily_restart_hour=4.0,
                seed=53,
                noise=Noise(
                    # oneDNN's primitive cache at its default capacity, or a warm-up sweep's batch shapes.
                    host_warmup_mib={"api_server": 96.0, "engine_core": 64.0, "worker": 700.0},
                    host_warmup_tau_s=300.0,
                    sawtooth_period_s=1800,
                    sawtooth_mib_per_request={"api_server": 0.05, "gpu": 0.05},
                    sawtooth_cap_mib=160.0,
                    sawtooth_segment_mib=20.0,
                ),
                note="Nothing leaks. A cache that grows 700 MiB in minutes after every start, a sawtooth that "
                "creeps 90 MiB a minute and is released every 30 minutes: the fast-leak rules stay quiet.",
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
            Scenario(
                "healthy_sawtooth",
                "30 healthy days of release-and-creep: memory grows with traffic and is released every 2 h",
                days=30.0,
                gpu=JANEWAY_4090D,
                traffic=replace(PRODUCTION_DAY, bursts_per_day=3.0),
                daily_restart_hour=4.0,
                seed=41,
                noise=Noise(
                    sawtooth_period_s=7200,
                    sawtooth_mib_per_request={"gpu": 3.0, "worker": 1.0, "api_server": 0.5},
                    sawtooth_cap_mib=192.0,
                    sawtooth_segment_mib=20.0,
                ),
                note="Inside one rising phase every slice grows by 3 MiB per request, like article A's leak; across "
                "releases nothing is gained. DCGM sees the creep as 20 MiB segments.",
            ),
            Scenario(
                "healthy_sawtooth_fast",
                "30 healthy days of a short sawtooth: a cache trimmed every 25 min, 2 MiB readings",
                days=30.0,
                gpu=JANEWAY_4090D,
                daily_restart_hour=4.0,
                seed=43,
                noise=Noise(
                    sawtooth_period_s=1500,
                    sawtooth_mib_per_request={"gpu": 4.0, "engine_core": 2.0},
                    sawtooth_cap_mib=96.0,
                    sawtooth_segment_mib=2.0,
                ),
            ),
            Scenario(
                "healthy_step_clumped",
                "30 healthy days with clumped arrivals and one persistent step (an adapter loaded) on day 3",
                days=30.0,
                gpu=JANEWAY_4090D,
                traffic=replace(PRODUCTION_DAY, clump_size=8, bursts_per_day=2.0),
                seed=47,
                noise=Noise(
                    step_at_s=(2 * 24 + 13.7) * 3600,
                    # A LoRA adapter of a 13B model at rank 32 is ~100 MiB on the card. (A step that takes the
                    # card past half the headroom above the preallocation, 640 MiB here, is a capacity
                    # warning GPUMemoryHigh raises by design: the 30-day bench saw one episode per seed.)
                    step_mib={"gpu": 128.0, "worker": 384.0, "api_server": 96.0},
                    sawtooth_period_s=6 * 3600,
                    sawtooth_mib_per_request={"worker": 0.5},
                    sawtooth_cap_mib=64.0,
                ),
                note="Requests come eight at a time; the step stays for the rest of the month (no daily restart).",
            ),
        )
    }


SCENARIOS = _scenarios()

# The bench runs every healthy scenario with its own seed and these offsets to it.
HEALTHY_SEED_OFFSETS = (0, 1)
# GPU leaks that must be flagged within LEAK_REQUEST_TARGET leaking requests, whenever they start.
LEAK_HOURS = (0.0, 3.0, 6.0, 10.0, 15.0, 20.0)
LEAK_SIZES_MB = (2.0, 3.0)
LEAK_SEEDS = (1, 2)
LEAK_REQUEST_TARGET = 150


def fast_leaks() -> list[str]:
    """The fast leaks: each must page before its memory runs out (bench: fast_leak_lead_min)."""
    return [scenario.name for scenario in _fast_scenarios()]


def healthy() -> list[str]:
    return [name for name, scenario in SCENARIOS.items() if not scenario.leaking]


def leak_at_hour(hour: float, mb_per_request: float, seed: int = 1) -> Scenario:
    """A GPU leak of `mb_per_request` starting at `hour` (UTC) on the first day it can, at least
    two hours after vLLM started; its 20 MiB allocator segments show on DCGM as a staircase."""
    start_s = ((hour - JANEWAY_DAY_START_HOUR) % 24) * 3600
    if start_s < 2 * 3600:
        start_s += 86400
    return Scenario(
        f"gpu_leak_{mb_per_request:g}mb_at_{hour:02.0f}h",
        f"A GPU leak of {mb_per_request:g} MB per request starting at {hour:02.0f}:00 UTC, ~1000 requests a day",
        days=(start_s + 14 * 3600) / 86400,
        gpu=JANEWAY_4090D,
        leaks=(Leak("gpu", mb_per_request * MB, start_s=start_s, segment_mib=20.0),),
        seed=seed,
    )


JANEWAY_DAY_START_HOUR = Scenario("x", "x", 1.0).start_hour


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
