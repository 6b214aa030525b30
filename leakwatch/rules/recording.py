"""Recording rules: exporters' series in common units, their slopes, and request counts per window.

Names follow Prometheus's level:metric:operations convention, prefixed `leakwatch:` and carrying
the (scaled) window, so a drill's rules never mix with production's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .promql import by, on, sel
from .thresholds import MIB, Thresholds, format_duration, number, parse_duration


@dataclass(frozen=True)
class Context:
    """Thresholds plus the recorded-series names and selectors every rule module uses."""

    t: Thresholds

    # -- selectors -----------------------------------------------------------------------------

    def vllm(self, metric: str, *matchers: str) -> str:
        return sel(metric, self.t.selector("vllm"), *matchers)

    def node(self, metric: str) -> str:
        return sel(metric, self.t.selector("node"))

    def dcgm(self, metric: str) -> str:
        return sel(metric, self.t.selector("dcgm"))

    def exporter(self, metric: str, *matchers: str) -> str:
        return sel(metric, self.t.selector("exporter"), *matchers)

    @property
    def host(self) -> list[str]:
        return self.t.host_labels

    def by_host(self, *extra: str) -> str:
        return by(self.host + list(extra))

    def on_host(self) -> str:
        return on(self.host)

    # -- windows -------------------------------------------------------------------------------

    def restarted_within(self, window_s: float, warmup: str) -> str:
        """Non-empty while the window (plus the warm-up) reaches back to a vLLM (re)start: the
        process is younger than that, or its start time changed within it."""
        span_s = window_s + self.t.warmup_s(warmup)
        span = format_duration(span_s)
        started = self.vllm("process_start_time_seconds")
        return (
            f"((sum {self.by_host()} (changes({started}[{span}])) > 0)"
            f" or (min {self.by_host()} (time() - {started}) < {number(span_s)}))"
        )

    # -- recorded series -----------------------------------------------------------------------

    gpu_used = "leakwatch:gpu_memory_used_bytes"
    gpu_free = "leakwatch:gpu_memory_free_bytes"
    gpu_total = "leakwatch:gpu_memory_total_bytes"
    process_memory = "leakwatch:process_memory_bytes"
    swap_used = "leakwatch:node_swap_used_bytes"
    host_available = "leakwatch:host_memory_available_bytes"
    model_latency_mean = "leakwatch:vllm_e2e_request_latency_seconds"
    model_requests = "leakwatch:vllm_model_requests"

    def requests_name(self, window: str) -> str:
        return f"leakwatch:vllm_requests:increase{window}"

    def slice(self, section: str, window_key: str, slices_key: str) -> tuple[str, str]:
        """(window, slice) durations of a leak detector."""
        sec = self.t.section(section)
        return sec.dur(window_key), sec.dur(window_key, 1 / sec.slices(slices_key))

    def slice_rate_name(self, series: str, section: str, window_key: str, slices_key: str) -> str:
        window, piece = self.slice(section, window_key, slices_key)
        return f"{series}:deriv{piece}_p{round(100 * self.t.slice_quantile)}_{window}"

    def slice_rate_expr(self, source: str, section: str, window_key: str, slices_key: str) -> str:
        """A low quantile of deriv() over the window's slices: a growth rate one step cannot fake.
        Only where every slice has a slope (with fewer, say after a gap or right after Prometheus
        started, one step would be a large share of them)."""
        window, piece = self.slice(section, window_key, slices_key)
        slopes = f"deriv({source}[{piece}])[{window}:{piece}]"
        q = number(self.t.slice_quantile)
        slices = self.t.section(section).slices(slices_key)
        return f"quantile_over_time({q}, {slopes})\nand count_over_time({slopes}) >= {slices}"

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
    def process_memory_deriv(self) -> str:
        return self.slice_rate_name(self.process_memory, "host", "leak_window", "leak_slices")

    @property
    def series_deriv(self) -> str:
        return self.slice_rate_name("leakwatch:vllm_metrics_series", "metrics", "series_window", "series_slices")

    @property
    def swap_deriv(self) -> str:
        return self.slice_rate_name(self.swap_used, "host", "swap_window", "swap_slices")

    def requests(self, section: str, key: str) -> str:
        return self.requests_name(self.t.section(section).dur(key))


def recording_rules(ctx: Context) -> list[dict]:
    t = ctx.t
    gpu, host, serving = t.section("gpu"), t.section("host"), t.section("serving")
    rules: list[dict] = []

    def record(name: str, expr: str) -> None:
        rules.append({"record": name, "expr": expr})

    # Level 1: exporters' series in bytes, per card / process role / host.
    record(ctx.gpu_used, f"{ctx.dcgm('DCGM_FI_DEV_FB_USED')} * {MIB}")
    record(ctx.gpu_free, f"{ctx.dcgm('DCGM_FI_DEV_FB_FREE')} * {MIB}")
    # Resident plus swapped: leaked pages pushed to swap leave RSS flat.
    record(
        ctx.process_memory,
        f"{ctx.exporter('leakwatch_process_resident_memory_bytes')} + {ctx.exporter('leakwatch_process_swap_bytes')}",
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
    record(
        ctx.series_deriv,
        ctx.slice_rate_expr(ctx.exporter("leakwatch_vllm_metrics_series"), "metrics", "series_window", "series_slices"),
    )
    # Requests finished (any reason) per leak window, for per-request normalisation.
    windows = {gpu.dur("fast_window"), gpu.dur("slow_window"), host.dur("leak_window")}
    for window in sorted(windows, key=parse_duration):
        record(
            ctx.requests_name(window),
            f"sum {ctx.by_host()} (increase({ctx.vllm('vllm:request_success_total')}[{window}]))",
        )
    # Per model: mean request duration and requests, compared with the same hour a week earlier.
    window = serving.dur("regression_window")
    by_model = by(["instance", "job", "model_name"])
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
    return rules
