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

    def half(self, section: str, key: str) -> str:
        return self.t.section(section).dur(key, 0.5)

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

    def deriv_name(self, series: str, half: str) -> str:
        return f"{series}:deriv{half}"

    def requests_name(self, window: str) -> str:
        return f"leakwatch:vllm_requests:increase{window}"

    @property
    def gpu_fast(self) -> str:
        return self.deriv_name(self.gpu_used, self.half("gpu", "fast_window"))

    @property
    def gpu_slow(self) -> str:
        return self.deriv_name(self.gpu_used, self.half("gpu", "slow_window"))

    @property
    def gpu_process_fast(self) -> str:
        return self.deriv_name("leakwatch:gpu_process_memory_bytes", self.half("gpu", "fast_window"))

    @property
    def process_memory_deriv(self) -> str:
        return self.deriv_name(self.process_memory, self.half("host", "leak_window"))

    @property
    def series_deriv(self) -> str:
        return self.deriv_name("leakwatch:vllm_metrics_series", self.half("metrics", "series_window"))

    @property
    def swap_deriv(self) -> str:
        return self.deriv_name(self.swap_used, self.half("host", "swap_window"))

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
        f"    - on (instance, job) sum by (instance, job) ({ctx.exporter('leakwatch_process_proportional_memory_bytes')}))\n"
        f")",
    )
    record(
        ctx.gpu_process_fast,
        f"deriv({ctx.exporter('leakwatch_gpu_process_memory_bytes')}[{ctx.half('gpu', 'fast_window')}])",
    )
    record(
        ctx.series_deriv,
        f"deriv({ctx.exporter('leakwatch_vllm_metrics_series')}[{ctx.half('metrics', 'series_window')}])",
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
    # deriv() (least squares), never rate(): these are gauges, and rate() reads every drop as a
    # counter reset.
    for name, series, half in (
        (ctx.gpu_fast, ctx.gpu_used, ctx.half("gpu", "fast_window")),
        (ctx.gpu_slow, ctx.gpu_used, ctx.half("gpu", "slow_window")),
        (ctx.process_memory_deriv, ctx.process_memory, ctx.half("host", "leak_window")),
        (ctx.swap_deriv, ctx.swap_used, ctx.half("host", "swap_window")),
    ):
        record(name, f"deriv({series}[{half}])")
    return rules
