"""The leakwatch.serving group: whether vLLM serves (down, engine gone, restarting often) and how
well (KV cache, queue, latency objectives, errors, a week-over-week regression, Python's full
garbage collections). The latency objectives count the observations above an exact bucket
boundary of vLLM's histograms, so a boundary is written the way vLLM's client library writes its
label."""

from __future__ import annotations

from ..core.alert_config import number
from ..core.durations import format_duration
from ..core.topology import DEPLOYMENT_LABEL
from .alert_rule import SIDE, Alert
from .promql import by, fill, on
from .recording import Context


def bucket_label(le: float) -> str:
    """A bucket boundary as vLLM's prometheus_client writes it (15.0, 2.5, 0.2)."""
    return repr(float(le))


def _bucket_share(ctx: Context, histogram: str, le: float, window: str, labels: list[str]) -> str:
    """Share of observations above a bucket boundary (exact: no interpolation)."""
    grouping = by(labels)
    count = f"sum {grouping} (rate({ctx.vllm(histogram + '_count')}[{window}]))"
    bucket = ctx.vllm(histogram + "_bucket", f'le="{bucket_label(le)}"')
    return f"({count}\n  - sum {grouping} (rate({bucket}[{window}])))\n/ {count}"


def serving_alerts(ctx: Context) -> list[Alert]:
    s = ctx.thresholds.section("serving")
    up = ctx.vllm("up")

    def processes(role: str) -> str:
        return ctx.exporter("leakwatch_processes", f'role="{role}"')

    # One scrape target, and its side of a canary (docs/canary.md) in the alert's labels.
    target = ["instance", "job", DEPLOYMENT_LABEL]
    exporter_target = by(target)

    alerts = [
        Alert(
            "VLLMDown",
            "critical",
            f"{up} == 0",
            s.dur("down_for"),
            "Prometheus cannot scrape vLLM.",
            "vLLM at {{ $labels.instance }}" + SIDE + " has not answered Prometheus's scrapes for "
            f"{s.dur('down_for')}: it is down, stuck in start-up, or unreachable.",
        ),
        Alert(
            "TargetDown",
            "warning",
            f"up == 0 unless on (job, instance) {up}",
            s.dur("target_down_for"),
            "A scrape target of the stack is down.",
            "{{ $labels.job }} at {{ $labels.instance }}" + SIDE + " has been down for "
            f"{s.dur('target_down_for')}; the alerts that read its metrics are blind meanwhile.",
        ),
        Alert(
            "VLLMEngineDown",
            "critical",
            f"(sum {exporter_target} ({processes('api_server')}) > 0)\n"
            f"unless {on(target)}\n"
            f"(sum {exporter_target} ({processes('engine_core')}) > 0)",
            s.dur("engine_down_for"),
            "vLLM's API server is running without its engine.",
            "The exporter at {{ $labels.instance }}"
            + SIDE
            + " sees vLLM's API server but no VLLM::EngineCore process: "
            "requests cannot be served.",
        ),
    ]
    for severity, key in (("warning", "restarts_warning"), ("critical", "restarts_critical")):
        alerts.append(
            Alert(
                "VLLMRestartingOften",
                severity,
                f"changes({ctx.vllm('process_start_time_seconds')}[{s.dur('restarts_window')}]) >= {number(s.num(key))}",
                s.dur("restarts_for"),
                "vLLM keeps restarting.",
                f"vLLM at {{{{ $labels.instance }}}}{SIDE} restarted {{{{ $value }}}} times in {s.dur('restarts_window')}. "
                "A crash loop (e.g. out of memory every few hours) hides from the leak rules, which skip "
                "windows that contain a restart.",
            )
        )

    kv_window = s.dur("kv_window")
    alerts.append(
        Alert(
            "KVCacheSaturated",
            "warning",
            f"avg_over_time({ctx.vllm('vllm:kv_cache_usage_perc')}[{kv_window}]) > {number(s.num('kv_usage_share'))}\n"
            f"and increase({ctx.vllm('vllm:num_preemptions_total')}[{kv_window}]) > 0",
            s.dur("kv_for"),
            "vLLM's KV cache is full and requests are being preempted.",
            f"The KV cache of {{{{ $labels.model_name }}}} at {{{{ $labels.instance }}}}{SIDE} averaged "
            f"{{{{ $value | humanizePercentage }}}} over {kv_window} and requests were preempted (recomputed): "
            "throughput and latency suffer. Lower max_num_seqs or add capacity.",
        )
    )
    alerts.append(
        Alert(
            "VLLMQueueBacklog",
            "warning",
            f"min_over_time({ctx.vllm('vllm:num_requests_waiting')}[{s.dur('queue_window')}]) >= {number(s.num('queue_min_waiting'))}",
            s.dur("queue_for"),
            "Requests keep waiting in vLLM's queue.",
            f"At least {{{{ $value }}}} requests for {{{{ $labels.model_name }}}} at {{{{ $labels.instance }}}}{SIDE} were "
            f"waiting at every moment of the last {s.dur('queue_window')}: the server is saturated.",
        )
    )

    window = s.dur("objective_window")
    labels = ["instance", "job", "model_name", DEPLOYMENT_LABEL]
    min_requests = number(s.num("objective_min_requests"))

    def enough(histogram: str, minimum: str) -> str:
        return f"sum {by(labels)} (increase({ctx.vllm(histogram + '_count')}[{window}])) >= {minimum}"

    def slow(histogram: str, limit: float, minimum: str) -> str:
        count = f"sum {by(labels)} (increase({ctx.vllm(histogram + '_count')}[{window}]))"
        bucket = ctx.vllm(histogram + "_bucket", f'le="{bucket_label(limit)}"')
        return f"{count}\n  - sum {by(labels)} (increase({bucket}[{window}])) >= {minimum}"

    min_slow = number(s.num("objective_min_slow"))
    objectives = (
        (
            "VLLMTimeToFirstTokenHigh",
            "vllm:time_to_first_token_seconds",
            "ttft_limit",
            "ttft_max_share",
            min_requests,
            min_slow,
            "Too many requests wait long for their first token.",
            "requests waited more than <limit> s for the first token",
        ),
        (
            "VLLMInterTokenLatencyHigh",
            "vllm:inter_token_latency_seconds",
            "itl_limit",
            "itl_max_share",
            number(s.num("itl_min_tokens")),
            number(s.num("itl_min_slow_tokens")),
            "Too many tokens take long to generate.",
            "output tokens took more than <limit> s after the previous one",
        ),
        (
            "VLLMRequestLatencyHigh",
            "vllm:e2e_request_latency_seconds",
            "latency_limit",
            "latency_max_share",
            min_requests,
            min_slow,
            "Too many requests take longer than the latency objective.",
            "requests took more than <limit> s end to end",
        ),
    )
    for name, histogram, limit_key, share_key, minimum, minimum_slow, summary, what in objectives:
        alerts.append(
            Alert(
                name,
                "warning",
                f"(\n{_bucket_share(ctx, histogram, s.num(limit_key), window, labels)}\n) > {number(s.num(share_key))}\n"
                f"and {enough(histogram, minimum)}\n"
                f"and {slow(histogram, s.num(limit_key), minimum_slow)}",
                s.dur("objective_for"),
                summary,
                fill(
                    f"{{{{ $value | humanizePercentage }}}} of {{{{ $labels.model_name }}}}'s {what} over the last "
                    "<window> at {{ $labels.instance }}" + SIDE + " (objective: at most <share>).",
                    window=window,
                    limit=number(s.num(limit_key)),
                    share=f"{s.num(share_key):.0%}",
                ),
            )
        )

    error_window = s.dur("error_window")
    v1 = 'handler=~"/v1/.+"'
    total = f"sum {by(target)} (rate({ctx.vllm('http_requests_total', v1)}[{error_window}]))"
    failed = ctx.vllm("http_requests_total", v1, 'status="5xx"')
    errors = f"sum {by(target)} (rate({failed}[{error_window}]))"
    for severity, key in (("warning", "error_warning_share"), ("critical", "error_critical_share")):
        alerts.append(
            Alert(
                "VLLMRequestErrors",
                severity,
                f"{errors}\n  / {total}\n> {number(s.num(key))}\n"
                f"and sum {by(target)} (increase({ctx.vllm('http_requests_total', v1)}[{error_window}])) "
                f">= {number(s.num('error_min_requests'))}\n"
                f"and sum {by(target)} (increase({failed}[{error_window}])) >= {number(s.num('error_min_errors'))}",
                s.dur("error_for"),
                "vLLM answers too many requests with server errors.",
                f"{{{{ $value | humanizePercentage }}}} of the /v1 requests to {{{{ $labels.instance }}}}{SIDE} failed with "
                f"a 5xx status over the last {error_window}.",
            )
        )

    reg = s.dur("regression_window")
    mean = f"{ctx.model_latency_mean}:mean{reg}"
    served = f"{ctx.model_requests}:increase{reg}"
    week = format_duration(604800 * ctx.thresholds.time_scale)
    min_reg = number(s.num("regression_min_requests"))
    alerts.append(
        Alert(
            "VLLMRequestDurationRegression",
            "warning",
            f"{mean} / {mean} offset {week} > {number(s.num('regression_factor'))}\n"
            f"and {served} >= {min_reg}\n"
            f"and {served} offset {week} >= {min_reg}",
            s.dur("regression_for"),
            "Requests take much longer than at the same time last week.",
            fill(
                "The mean request duration of {{ $labels.model_name }} at {{ $labels.instance }}"
                + SIDE
                + " over the last "
                "<window> is {{ $value | humanize }} times that of the same hour a week ago (both hours served "
                "at least <min> requests).",
                window=reg,
                min=min_reg,
            ),
        )
    )

    gc_window, gc_base = s.dur("gc_window"), s.dur("gc_baseline_window")
    gen2 = ctx.vllm("python_gc_collections_total", 'generation="2"')

    def per_request(window: str) -> str:
        return (
            f"sum {ctx.by_side('instance', 'job')} (increase({gen2}[{window}]))\n"
            f"  / {ctx.on_side()} group_left () sum {ctx.by_side()} (increase({ctx.vllm('vllm:request_success_total')}[{window}]))"
        )

    alerts.append(
        Alert(
            "PythonGCSpike",
            "warning",
            f"(\n  {per_request(gc_window)}\n)\n> {number(s.num('gc_factor'))} * (\n  {per_request(gc_base)}\n)\n"
            f"and sum {ctx.by_side('instance', 'job')} (increase({gen2}[{gc_window}])) >= {number(s.num('gc_min_collections'))}\n"
            f"and {ctx.on_side()} sum {ctx.by_side()} (increase({ctx.vllm('vllm:request_success_total')}[{gc_window}])) "
            f">= {number(s.num('gc_min_requests'))}",
            s.dur("gc_for"),
            "vLLM's API server runs full Python garbage collections far more often per request than usual.",
            fill(
                "vLLM's API server at {{ $labels.instance }}"
                + SIDE
                + " ran {{ $value | humanize }} generation-2 garbage "
                "collections per request over the last <window>, more than <factor> times its rate over the "
                "last <base>. Growing numbers of live Python objects (a leak) make full collections frequent.",
                window=gc_window,
                factor=number(s.num("gc_factor")),
                base=gc_base,
            ),
        )
    )
    return alerts
