"""Recording rules: exporters' series in common units, their slopes, and request counts per window.

Names follow Prometheus's level:metric:operations convention, prefixed `leakwatch:` and carrying
the (scaled) window, so a drill's rules never mix with production's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.alert_config import MIB, Thresholds, number
from ..core.durations import format_duration, parse_duration
from ..core.metric_catalogue import host_leak_measure
from ..core.topology import DEPLOYMENT_LABEL
from .promql import by, on, sel


@dataclass(frozen=True)
class Context:
    """Thresholds plus the recorded-series names and selectors every rule module uses."""

    thresholds: Thresholds

    # -- selectors -----------------------------------------------------------------------------

    def vllm(self, metric: str, *matchers: str) -> str:
        return sel(metric, self.thresholds.selector("vllm"), *matchers)

    def node(self, metric: str) -> str:
        return sel(metric, self.thresholds.selector("node"))

    def dcgm(self, metric: str) -> str:
        return sel(metric, self.thresholds.selector("dcgm"))

    def exporter(self, metric: str, *matchers: str) -> str:
        return sel(metric, self.thresholds.selector("exporter"), *matchers)

    @property
    def host(self) -> list[str]:
        """One serving host: what the node exporter's and DCGM's series (memory and cards the
        host's vLLMs share) are judged and joined by."""
        return self.thresholds.host_labels

    def by_host(self, *extra: str) -> str:
        return by(self.host + list(extra))

    def on_host(self) -> str:
        return on(self.host)

    @property
    def side(self) -> list[str]:
        """One vLLM deployment on a host: the host plus the canary's deployment label
        (docs/canary.md), which Prometheus puts on the vLLM and exporter series of each side. Rules
        that combine vLLM's and the exporter's series join on it, so a canary's requests, restarts
        and memory are never mixed with the stable side's. Without a canary no series carries the
        label, and `by`/`on` it group exactly as they would without it."""
        return self.host + [DEPLOYMENT_LABEL]

    def by_side(self, *extra: str) -> str:
        return by(self.side + list(extra))

    def on_side(self) -> str:
        return on(self.side)

    # -- windows -------------------------------------------------------------------------------

    def restarted_within(self, window_s: float, settling: str, per_host: bool = False) -> str:
        """Non-empty while the window (plus config/alerts.yaml's settling_after_start.<settling>)
        reaches back to a vLLM (re)start: our exporter counted a restart within it, its post-warm-up
        baseline is younger than that, or there is no baseline yet. The exporter's series exist in every vLLM mode; vLLM's own
        process_start_time_seconds does not (multi-API-server mode serves no process_* series).
        Per side (join it `on_side()`); per_host: any vLLM of the host (a card's rules, `on_host()`)."""
        return self.started_within(window_s + self.thresholds.settling_after_start_s(settling), per_host)

    def started_within(self, span_s: float, per_host: bool = False) -> str:
        """Non-empty while vLLM (re)started less than span_s ago, as restarted_within says it."""
        span = format_duration(span_s)
        restarts = self.exporter("leakwatch_vllm_restarts_total")
        baseline = self.exporter("leakwatch_baseline_timestamp_seconds")
        ready = self.exporter("leakwatch_baseline_ready")
        group = self.by_host() if per_host else self.by_side()
        return (
            f"((sum {group} (changes({restarts}[{span}])) > 0)"
            f" or (min {group} (time() - {baseline}) < {number(span_s)})"
            f" or (max {group} ({ready}) == 0))"
        )

    # -- recorded series -----------------------------------------------------------------------

    gpu_used = "leakwatch:gpu_memory_used_bytes"
    gpu_free = "leakwatch:gpu_memory_free_bytes"
    gpu_total = "leakwatch:gpu_memory_total_bytes"
    process_memory = "leakwatch:process_memory_bytes"
    swap_used = "leakwatch:node_swap_used_bytes"
    host_available = "leakwatch:host_memory_available_bytes"
    # vLLM's own memory per serving host: its process roles' leak measure summed, and its
    # processes' GPU memory per device (the fast-leak rules' "is it vLLM?").
    vllm_host_memory = "leakwatch:vllm_host_memory_bytes"
    vllm_gpu_memory = "leakwatch:vllm_gpu_memory_bytes"
    # A device's memory as the exporter reads it from NVML (the exporter's labels, so the fast GPU
    # rule joins vLLM's processes on the same device without mapping DCGM's labels).
    device_memory = "leakwatch:gpu_device_memory_used_bytes"
    model_latency_mean = "leakwatch:vllm_e2e_request_latency_seconds"
    model_requests = "leakwatch:vllm_model_requests"

    def requests_name(self, window: str) -> str:
        return f"leakwatch:vllm_requests:increase{window}"

    def slice(self, section: str, window_key: str, slices_key: str) -> tuple[str, str]:
        """(window, slice) durations of a leak detector."""
        sec = self.thresholds.section(section)
        return sec.dur(window_key), sec.dur(window_key, 1 / sec.slices(slices_key))

    def slice_rate_name(self, series: str, section: str, window_key: str, slices_key: str) -> str:
        window, piece = self.slice(section, window_key, slices_key)
        return f"{series}:deriv{piece}_p{round(100 * self.thresholds.slice_quantile)}_{window}"

    def slice_rate_expr(self, source: str, section: str, window_key: str, slices_key: str, falling=False) -> str:
        """A low quantile of deriv() over the window's slices: a growth rate one step cannot fake.
        Only where every slice has a slope (with fewer, say after a gap or right after Prometheus
        started, one step would be a large share of them). falling: the rate at which `source`
        falls in most slices (the same quantile of its fall, as a positive number)."""
        window, piece = self.slice(section, window_key, slices_key)
        slopes = f"deriv({source}[{piece}])[{window}:{piece}]"
        q = self.thresholds.slice_quantile
        slices = self.thresholds.section(section).slices(slices_key)
        quantile = (
            f"-quantile_over_time({number(1 - q)}, {slopes})"
            if falling
            else f"quantile_over_time({number(q)}, {slopes})"
        )
        return f"{quantile}\nand count_over_time({slopes}) >= {slices}"

    def fall_rate_name(self, series: str, section: str, window_key: str, slices_key: str) -> str:
        window, piece = self.slice(section, window_key, slices_key)
        return f"{series}:fall{piece}_p{round(100 * self.thresholds.slice_quantile)}_{window}"

    def low_growth_name(self, series: str, section: str, window_key: str) -> str:
        window = self.thresholds.section(section).dur(window_key)
        return f"{series}:low_growth_{window}"

    def low_growth_expr(self, source: str, section: str, window_key: str, consecutive: bool = False) -> str:
        """Net growth across the rises and falls of a window, from the lows of its thirds. Memory
        that creeps and is released (a cache on a timer, a GC, an allocator trimming its pool)
        returns to the same lows, however steep each rise; a leak raises them. Offsets count back
        from each evaluation, so no slice grid is involved.
        Plain: the low of the last third minus the low of the first. Consecutive: twice the smaller
        of the two rises between neighbouring thirds, so a release in any third (a sawtooth of up to
        two thirds' period) or a one-time step (one rise only) keeps it low."""
        sec = self.thresholds.section(section)
        third = sec.dur(window_key, 1 / 3)
        lows = [
            f"min_over_time({source}[{third}]{f' offset {sec.dur(window_key, k / 3)}' if k else ''})" for k in range(3)
        ]
        if not consecutive:
            return f"{lows[0]}\n- {lows[2]}"
        newer, older = f"({lows[0]} - {lows[1]})", f"({lows[1]} - {lows[2]})"
        return f"2 * (\n  {newer}\n  <= {older}\n  or {older}\n)"

    def released_name(self, series: str, section: str, slices_key: str, window_key: str) -> str:
        lookback = self.thresholds.section(section).dur("release_lookback")
        piece = self.thresholds.section(section).dur(
            window_key, 1 / self.thresholds.section(section).slices(slices_key)
        )
        return f"{series}:fall{piece}_max_{lookback}"

    def released_expr(self, source: str, section: str, slices_key: str, window_key: str) -> str:
        """The largest fall within one slice over the release lookback: memory that was given back
        recently is a cache or a heap that releases, and its next rise is not a leak's growth."""
        sec = self.thresholds.section(section)
        lookback = sec.dur("release_lookback")
        n = sec.slices(slices_key)
        piece, half = sec.dur(window_key, 1 / n), sec.dur(window_key, 0.5 / n)
        return f"max_over_time((max_over_time({source}[{piece}]) - {source})[{lookback}:{half}])"

    @property
    def gpu_fast(self) -> str:
        return self.slice_rate_name(self.gpu_used, "gpu", "fast_window", "fast_slices")

    @property
    def gpu_slow(self) -> str:
        return self.slice_rate_name(self.gpu_used, "gpu", "slow_window", "slow_slices")

    @property
    def gpu_process_fast(self) -> str:
        return self.slice_rate_name("leakwatch:gpu_process_memory_bytes", "gpu", "fast_window", "fast_slices")

    @property
    def gpu_retained(self) -> str:
        return self.slice_rate_name("leakwatch:gpu_memory_growth_bytes", "gpu", "retention_window", "retention_slices")

    @property
    def gpu_low_growth_fast(self) -> str:
        return self.low_growth_name(self.gpu_used, "gpu", "fast_window")

    @property
    def gpu_low_growth_slow(self) -> str:
        return self.low_growth_name(self.gpu_used, "gpu", "slow_window")

    @property
    def gpu_released(self) -> str:
        return self.released_name(self.gpu_used, "gpu", "fast_slices", "fast_window")

    @property
    def gpu_process_low_growth(self) -> str:
        return self.low_growth_name("leakwatch:gpu_process_memory_bytes", "gpu", "fast_window")

    @property
    def gpu_process_released(self) -> str:
        return self.released_name("leakwatch:gpu_process_memory_bytes", "gpu", "fast_slices", "fast_window")

    @property
    def gpu_retained_low_growth(self) -> str:
        return self.low_growth_name("leakwatch:gpu_memory_growth_bytes", "gpu", "retention_window")

    @property
    def gpu_retained_released(self) -> str:
        return self.released_name("leakwatch:gpu_memory_growth_bytes", "gpu", "retention_slices", "retention_window")

    @property
    def process_memory_low_growth(self) -> str:
        return self.low_growth_name(self.process_memory, "host", "leak_window")

    @property
    def process_memory_released(self) -> str:
        return self.released_name(self.process_memory, "host", "leak_slices", "leak_window")

    @property
    def process_memory_deriv(self) -> str:
        return self.slice_rate_name(self.process_memory, "host", "leak_window", "leak_slices")

    @property
    def series_deriv(self) -> str:
        return self.slice_rate_name("leakwatch:vllm_metrics_series", "metrics", "series_window", "series_slices")

    @property
    def swap_deriv(self) -> str:
        return self.slice_rate_name(self.swap_used, "host", "swap_window", "swap_slices")

    @property
    def host_available_fall(self) -> str:
        return self.fall_rate_name(self.host_available, "host", "runout_window", "runout_slices")

    @property
    def vllm_host_memory_rate(self) -> str:
        return self.slice_rate_name(self.vllm_host_memory, "host", "runout_window", "runout_slices")

    @property
    def device_memory_rate(self) -> str:
        return self.slice_rate_name(self.device_memory, "gpu", "runout_window", "runout_slices")

    @property
    def vllm_gpu_memory_rate(self) -> str:
        return self.slice_rate_name(self.vllm_gpu_memory, "gpu", "runout_window", "runout_slices")

    def requests(self, section: str, key: str) -> str:
        """Requests each side served in the window (join it `on_side()`)."""
        return self.requests_name(self.thresholds.section(section).dur(key))

    def host_requests(self, section: str, key: str) -> str:
        """Requests all sides of a host served in the window: what a card's growth is divided by
        (DCGM's series cannot tell which side's process grew; `on_host()`)."""
        return f"sum {self.by_host()} ({self.requests(section, key)})"


def recording_rules(ctx: Context) -> list[dict]:
    thresholds = ctx.thresholds
    gpu, host, serving = thresholds.section("gpu"), thresholds.section("host"), thresholds.section("serving")
    rules: list[dict] = []

    def record(name: str, expr: str) -> None:
        rules.append({"record": name, "expr": expr})

    # Level 1: exporters' series in bytes, per card / process role / host.
    record(ctx.gpu_used, f"{ctx.dcgm('DCGM_FI_DEV_FB_USED')} * {MIB}")
    record(ctx.gpu_free, f"{ctx.dcgm('DCGM_FI_DEV_FB_FREE')} * {MIB}")
    # Anonymous plus swapped: leaked pages pushed to swap leave RSS flat, and file pages the kernel
    # drops under memory pressure and faults back in would look like growth.
    record(
        ctx.process_memory,
        host_leak_measure(ctx.exporter),
    )
    record(ctx.swap_used, f"{ctx.node('node_memory_SwapTotal_bytes')} - {ctx.node('node_memory_SwapFree_bytes')}")
    # What the vLLM processes can still take: the host's available memory and free swap, or the
    # container's limit minus what the process tree holds (PSS counts shared pages once), whichever
    # is smaller.
    record(
        ctx.host_available,
        f"min {ctx.by_host()} (\n"
        f"  ({ctx.node('node_memory_MemAvailable_bytes')} + {ctx.node('node_memory_SwapFree_bytes')})\n"
        f"  or\n"
        f"  ({ctx.exporter('leakwatch_cgroup_memory_limit_bytes')}\n"
        f"    - {on(ctx.host + ['instance', 'job'])} sum {ctx.by_host('instance', 'job')} "
        f"({ctx.exporter('leakwatch_process_proportional_memory_bytes')}))\n"
        f")",
    )
    # Level 1 growth rates: a low quantile of the slopes of a window's slices (deriv(), never rate(): these
    # are gauges, and rate() reads every drop as a counter reset).
    record(
        ctx.gpu_process_fast,
        ctx.slice_rate_expr(ctx.exporter("leakwatch_gpu_process_memory_bytes"), "gpu", "fast_window", "fast_slices"),
    )
    record(
        ctx.gpu_retained,
        ctx.slice_rate_expr(
            ctx.exporter("leakwatch_gpu_memory_growth_bytes"), "gpu", "retention_window", "retention_slices"
        ),
    )
    # Net growth of the lows and recent releases (see low_growth_expr / released_expr).
    gpu_process = ctx.exporter("leakwatch_gpu_process_memory_bytes")
    record(ctx.gpu_process_low_growth, ctx.low_growth_expr(gpu_process, "gpu", "fast_window"))
    record(ctx.gpu_process_released, ctx.released_expr(gpu_process, "gpu", "fast_slices", "fast_window"))
    record(
        ctx.gpu_retained_low_growth,
        ctx.low_growth_expr(
            ctx.exporter("leakwatch_gpu_memory_growth_bytes"), "gpu", "retention_window", consecutive=True
        ),
    )
    record(
        ctx.gpu_retained_released,
        ctx.released_expr(
            ctx.exporter("leakwatch_gpu_memory_growth_bytes"), "gpu", "retention_slices", "retention_window"
        ),
    )
    record(
        ctx.series_deriv,
        ctx.slice_rate_expr(ctx.exporter("leakwatch_vllm_metrics_series"), "metrics", "series_window", "series_slices"),
    )
    # Fast leaks: vLLM's processes' GPU memory per device, and each device's growth and time to
    # full (free memory over the growth in most slices of the short runout window).
    record(
        ctx.vllm_gpu_memory,
        f"sum {ctx.by_side('instance', 'job', 'gpu')} ({ctx.exporter('leakwatch_gpu_process_memory_bytes')})",
    )
    # (Summed from the exporter's own series, so its growth is a level-2 rule like every other.)
    record(ctx.vllm_host_memory, f"sum {ctx.by_side('instance', 'job')} ({host_leak_measure(ctx.exporter)})")
    device_used = ctx.exporter("leakwatch_gpu_memory_used_bytes")
    record(ctx.device_memory_rate, ctx.slice_rate_expr(device_used, "gpu", "runout_window", "runout_slices"))
    # Requests finished (any reason) per leak window and side, for per-request normalisation.
    windows = {gpu.dur("fast_window"), gpu.dur("slow_window"), host.dur("leak_window")}
    for window in sorted(windows, key=parse_duration):
        record(
            ctx.requests_name(window),
            f"sum {ctx.by_side()} (increase({ctx.vllm('vllm:request_success_total')}[{window}]))",
        )
    # Per model: mean request duration and requests, compared with the same hour a week earlier.
    window = serving.dur("regression_window")
    by_model = by(["instance", "job", "model_name", DEPLOYMENT_LABEL])
    record(
        f"{ctx.model_latency_mean}:mean{window}",
        f"sum {by_model} (rate({ctx.vllm('vllm:e2e_request_latency_seconds_sum')}[{window}]))\n"
        f"  / sum {by_model} (rate({ctx.vllm('vllm:e2e_request_latency_seconds_count')}[{window}]))",
    )
    record(
        f"{ctx.model_requests}:increase{window}",
        f"sum {by_model} (increase({ctx.vllm('vllm:e2e_request_latency_seconds_count')}[{window}]))",
    )

    # Level 2: built on level 1 (the backtester backfills them in that order).
    record(ctx.gpu_total, f"{ctx.gpu_used} + {ctx.gpu_free}")
    for name, series, section, window, slices in (
        (ctx.gpu_fast, ctx.gpu_used, "gpu", "fast_window", "fast_slices"),
        (ctx.gpu_slow, ctx.gpu_used, "gpu", "slow_window", "slow_slices"),
        (ctx.process_memory_deriv, ctx.process_memory, "host", "leak_window", "leak_slices"),
        (ctx.swap_deriv, ctx.swap_used, "host", "swap_window", "swap_slices"),
    ):
        record(name, ctx.slice_rate_expr(series, section, window, slices))
    record(ctx.gpu_low_growth_fast, ctx.low_growth_expr(ctx.gpu_used, "gpu", "fast_window"))
    record(ctx.gpu_low_growth_slow, ctx.low_growth_expr(ctx.gpu_used, "gpu", "slow_window", consecutive=True))
    record(ctx.gpu_released, ctx.released_expr(ctx.gpu_used, "gpu", "fast_slices", "fast_window"))
    record(
        ctx.process_memory_low_growth, ctx.low_growth_expr(ctx.process_memory, "host", "leak_window", consecutive=True)
    )
    record(ctx.process_memory_released, ctx.released_expr(ctx.process_memory, "host", "leak_slices", "leak_window"))
    # Fast leaks: the host's available memory's fall and vLLM's host and GPU memory's growth, in
    # most slices of the short runout window.
    record(
        ctx.host_available_fall,
        ctx.slice_rate_expr(ctx.host_available, "host", "runout_window", "runout_slices", falling=True),
    )
    record(
        ctx.vllm_host_memory_rate,
        ctx.slice_rate_expr(ctx.vllm_host_memory, "host", "runout_window", "runout_slices"),
    )
    record(ctx.vllm_gpu_memory_rate, ctx.slice_rate_expr(ctx.vllm_gpu_memory, "gpu", "runout_window", "runout_slices"))
    return rules
