"""The parts of a simulated vLLM host: traffic, GPU cards, leaks, noise, and the scenario that ties
them together. Plain data; leakwatch.scenarios.simulate turns a Scenario into metric samples."""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1048576
GIB = 1024 * MIB

# The process roles `leakwatch exporter` reports (config/metrics/leakwatch-exporter.csv).
ROLES = ("api_server", "engine_core", "worker")


@dataclass(frozen=True)
class Traffic:
    """Requests: Poisson arrivals with a daily cycle, and the shape of each request."""

    requests_per_day: float = 1000.0
    # Daily cycle: rate = mean * (1 + amplitude * cos(2 pi (hour - peak_hour) / 24)).
    diurnal_amplitude: float = 0.6
    peak_hour: float = 15.0
    # Janeway creative writing on the 4090D: prompts ~200-800 tokens, outputs ~200-500 tokens.
    prompt_tokens: tuple[int, int] = (200, 800)
    output_tokens: tuple[int, int] = (200, 500)
    ttft_median_s: float = 0.35
    ttft_sigma: float = 0.5
    itl_median_s: float = 0.025
    itl_sigma: float = 0.1  # decode speed barely varies on a dedicated GPU
    # Requests with prompts far beyond the usual (pasted chapters): the first one after a start
    # makes PyTorch's allocator reserve larger segments, a one-time step that then plateaus.
    long_request_share: float = 0.01
    # KV usage swings: a few times a day a client sends a batch of long-context requests at once
    # (part of requests_per_day, not on top of it).
    bursts_per_day: float = 0.0
    burst_minutes: float = 6.0
    burst_concurrency: float = 6.0
    burst_prompt_tokens: int = 1400
    error_share: float = 0.002  # HTTP 5xx (client disconnects count as aborts, not errors)
    # Clumped arrivals: requests come in clumps of this many at once (a batch job, a retrying
    # client), so a window's request count jumps in steps; 1 is plain Poisson arrivals.
    clump_size: int = 1


@dataclass(frozen=True)
class GPUCards:
    count: int = 1
    total_mib: int = 24564  # RTX 4090 D (24 GiB)
    model_name: str = "NVIDIA GeForce RTX 4090 D"
    idle_mib: int = 290  # driver and display memory with no process on the card
    # Memory in use once the server is ready. vLLM: gpu_memory_utilization of the card plus the
    # CUDA context and non-torch allocations; a plain PyTorch server: what the article measured.
    gpu_memory_utilization: float | None = 0.90
    non_torch_mib: int = 420
    ready_mib: int | None = None  # set instead of gpu_memory_utilization (no preallocation)
    kv_capacity_tokens: int = 9800  # Janeway fp8 on the 4090D at 0.90 (product brief)

    def ready_used_mib(self) -> float:
        if self.ready_mib is not None:
            return float(self.ready_mib)
        return self.gpu_memory_utilization * self.total_mib + self.non_torch_mib


@dataclass(frozen=True)
class Leak:
    """Memory retained per request served, from start_s (seconds after the scenario start) on."""

    target: str  # "gpu" (every card) or a process role from ROLES
    bytes_per_request: float
    to_swap: bool = False  # leaked pages go cold and are swapped out: RSS looks flat
    start_s: float = 0.0
    # PyTorch's caching allocator reserves memory in segments: a GPU leak shows on DCGM as a
    # staircase of this many MiB (0: every leaked byte shows at once).
    segment_mib: float = 0.0


@dataclass(frozen=True)
class Noise:
    """What a healthy server does that is not a leak. Amplitudes are what PyTorch's caching
    allocator, glibc's malloc and a Python heap plausibly do under vLLM; `make bench-detection`
    shows every rule staying quiet through 30 days of it."""

    # GPU: after warm-up vLLM's memory is flat, apart from allocator segments (2-20 MiB) reserved
    # and released while serving, bounded around the plateau.
    gpu_events_per_hour: float = 1.0
    gpu_event_mib: tuple[float, float] = (2.0, 20.0)
    gpu_event_cap_mib: float = 64.0
    gpu_warmup_mib: float = 64.0  # sampler and logits buffers on the first requests
    # One-time steps: the first, then the second, record-long request after each start.
    gpu_plateau_mib: tuple[float, ...] = (384.0, 96.0)
    # Host: heaps warm up over tens of minutes, then wander around a plateau.
    host_warmup_mib: dict = field(default_factory=lambda: {"api_server": 96.0, "engine_core": 64.0, "worker": 128.0})
    host_warmup_tau_s: float = 600.0
    host_plateau_mib: dict = field(default_factory=lambda: {"api_server": 128.0})
    host_per_running_kib: dict = field(
        default_factory=lambda: {"api_server": 256.0, "engine_core": 128.0, "worker": 64.0}
    )
    host_events_per_hour: float = 0.5
    host_event_mib: tuple[float, float] = (1.0, 16.0)
    host_event_cap_mib: float = 48.0
    host_jitter_mib: float = 1.0
    # Release-and-creep sawtooth (a cache released on a timer, a GC, an allocator trimming its pool):
    # memory creeps up with every request served and falls back to the plateau every period. Per
    # target ("gpu" or a role); the GPU's creep shows on DCGM in segments of `sawtooth_segment_mib`
    # (readings change only when a segment is reserved or released).
    sawtooth_period_s: float = 0.0  # 0: no sawtooth
    sawtooth_mib_per_request: dict = field(default_factory=dict)
    sawtooth_cap_mib: float = 256.0  # the cache is bounded: creep stops there until the release
    sawtooth_segment_mib: float = 2.0
    # A one-time persistent step days into the run (an adapter loaded, a larger batch shape
    # compiled): this many MiB per target from `step_at_s` on, kept across restarts.
    step_at_s: float = 0.0  # 0: no step
    step_mib: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Host:
    mem_total_bytes: float = 64 * GIB
    other_used_bytes: float = 6 * GIB  # the OS, other services, unreclaimable caches
    swap_total_bytes: float = 8 * GIB
    cgroup_limit_bytes: float | None = 32 * GIB
    base_rss_bytes: dict = field(
        default_factory=lambda: {
            "api_server": 1.1 * GIB,
            "engine_core": 1.3 * GIB,
            "worker": 3.8 * GIB,
        }
    )


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    days: float
    traffic: Traffic = Traffic()
    gpu: GPUCards | None = GPUCards()
    host: Host = Host()
    leaks: tuple[Leak, ...] = ()
    noise: Noise = Noise()
    model_name: str = "janeway-13b"
    max_num_seqs: int = 256
    daily_restart_hour: float | None = None
    # Restarts the healer made (seconds after the scenario start): a leak in vLLM's code comes back
    # after each, and the fast-leak figures are measured from the last one.
    healer_restarts_s: tuple[float, ...] = ()
    restart_downtime_s: float = 120.0  # process start to /metrics answering (weights, profiling)
    start_hour: float = 8.5  # first start, hours after midnight UTC of start_date
    start_date: str = "2024-03-04"  # a Monday; the scenarios run in UTC
    # vLLM /metrics cardinality: series present after the first requests, and churn per hour.
    metrics_series: int = 614
    metrics_series_per_hour: float = 0.0
    warmup_requests: int = 5  # the exporter's baseline is taken after these
    # Cache bounds set explicitly in vLLM's environment, as the exporter publishes them:
    # (role, cache name of config/vllm_leaks.yaml, bytes).
    cache_bounds: tuple[tuple[str, str, float], ...] = ()
    seed: int = 1
    # Hours of history before the interesting part (e.g. a week for week-over-week rules).
    note: str = ""

    @property
    def leaking(self) -> bool:
        return bool(self.leaks) or self.metrics_series_per_hour > 0
