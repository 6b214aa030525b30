"""vLLM serving: latency objectives, throughput, the scheduler and KV cache, and errors, from vLLM's
own /metrics (current names: kv_cache_usage_perc, inter_token_latency_seconds)."""

from __future__ import annotations

from ..core import alert_config
from ..core.metric_catalogue import host_leak_measure
from . import levels
from .board import TOKENS_PER_S, Board, Panel, Query, Row
from .common import FIRING_ALERTS, HEALER_RESTARTS, INSTANCE, MODEL, VLLM_RESTARTS, percentiles, running_and_waiting
from .levels import NEUTRAL
from .queries import VLLM, VLLM_API, failed_api_calls, per_side, quantile, rate, ratio, sides

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
QUEUE = "vllm:request_queue_time_seconds"


def overall(q: float, histogram: str) -> str:
    return quantile(q, histogram, by="")


now = Row(
    "Service level now",
    (
        Panel(
            title="Requests per second",
            kind="stat",
            unit="reqps",
            width=4,
            height=5,
            queries=(Query(f"sum({rate('vllm:request_success_total')})", "requests/s"),),
            base_colour=NEUTRAL,
            description="Requests vLLM finished per second, any finish reason. Healthy: follows your traffic.",
        ),
        Panel(
            title="Failed API calls",
            kind="stat",
            unit="percentunit",
            width=4,
            height=5,
            queries=(
                Query(ratio(failed_api_calls(), f"sum({rate('http_requests_total', VLLM_API)})"), "failed share"),
            ),
            thresholds=levels.ERROR_RATIO,
            description="Share of OpenAI API calls answered with a non-2xx status (4xx: bad requests such as "
            "a wrong model name or a prompt too long; 5xx: server failures). Healthy: below 1 %.",
        ),
        Panel(
            title="Time to first token, p90",
            kind="stat",
            unit="s",
            width=4,
            height=5,
            queries=(Query(overall(0.9, TTFT), "p90"),),
            thresholds=levels.TTFT,
            description="9 in 10 requests got their first token within this time (server side: queueing and "
            "prefill). Healthy: below 1 s for interactive use.",
        ),
        Panel(
            title="Time between tokens, p90",
            kind="stat",
            unit="s",
            width=4,
            height=5,
            queries=(Query(overall(0.9, ITL), "p90"),),
            thresholds=levels.ITL,
            description="Inter-token latency while streaming, 90th percentile. Healthy: below 100 ms (faster "
            "than people read).",
        ),
        Panel(
            title="End-to-end latency, p90",
            kind="stat",
            unit="s",
            width=4,
            height=5,
            queries=(Query(overall(0.9, E2E), "p90"),),
            thresholds=levels.E2E_LATENCY,
            description="Whole-request time inside vLLM, 90th percentile. Healthy: well below 10 s for chat-length "
            "outputs; the articles alert above 15 s.",
        ),
        Panel(
            title="KV cache usage, fullest engine",
            kind="stat",
            unit="percentunit",
            width=4,
            height=5,
            min=0,
            max=1,
            queries=(Query(f"max(vllm:kv_cache_usage_perc{{{VLLM}}})", "KV cache"),),
            thresholds=levels.KV_CACHE,
            description="Share of the KV-cache blocks in use. Healthy: high under load is expected; near 100 % "
            "with preemptions means requests are being recomputed.",
        ),
    ),
)

latency = Row(
    "Latency",
    (
        Panel(
            title="Time to first token",
            unit="s",
            width=12,
            queries=percentiles(TTFT),
            thresholds=levels.TTFT,
            description="p50 / p90 / p99 from vLLM's histogram: queueing plus prefill. Healthy: p90 below 1 s; "
            "a rising p99 with a flat p50 means requests wait in the queue.",
        ),
        Panel(
            title="Time between tokens (inter-token latency)",
            unit="s",
            width=12,
            queries=percentiles(ITL),
            thresholds=levels.ITL,
            description="p50 / p90 / p99 of the gap between streamed tokens. Healthy: flat and below 100 ms; "
            "it grows with batch size and with long prefills sharing the batch.",
        ),
        Panel(
            title="End-to-end request latency",
            unit="s",
            width=12,
            queries=percentiles(E2E),
            thresholds=levels.E2E_LATENCY,
            description="p50 / p90 / p99 of the whole request inside vLLM; it depends on output length. Healthy: "
            "flat at steady traffic; the articles alert above 15 s.",
        ),
        Panel(
            title="Time waiting in the queue",
            unit="s",
            width=12,
            queries=percentiles(QUEUE, (0.5, 0.9)),
            thresholds=levels.TTFT,
            description="Time requests spent waiting before vLLM scheduled them. Healthy: near 0; growth means "
            "more concurrent requests than max-num-seqs or than the KV cache holds.",
        ),
    ),
)

throughput = Row(
    "Throughput",
    (
        Panel(
            title="Requests finished per second, by finish reason",
            unit="reqps",
            width=8,
            stacked=True,
            queries=(
                Query(
                    per_side(
                        f"sum by ({sides('finished_reason')}) ({rate('vllm:request_success_total')})",
                        "",
                        "finished_reason",
                    ),
                    "{{series}}",
                ),
            ),
            base_colour=NEUTRAL,
            description="stop: the model ended; length: max_tokens reached; abort: the client went away; "
            "error: the engine failed the request. Healthy: stop and length only.",
        ),
        Panel(
            title="Tokens per second",
            unit=TOKENS_PER_S,
            width=8,
            queries=(
                Query(
                    per_side(f"sum by ({sides()}) ({rate('vllm:prompt_tokens_total')})", "prompt (prefill)"),
                    "{{series}}",
                ),
                Query(
                    per_side(f"sum by ({sides()}) ({rate('vllm:generation_tokens_total')})", "generated"), "{{series}}"
                ),
            ),
            base_colour=NEUTRAL,
            description="Prompt tokens processed and output tokens generated per second. Healthy: generation "
            "follows the request rate; a drop at steady traffic means the engine slowed down.",
        ),
        Panel(
            title="Prompt and output length per request, p50 and p90",
            unit="short",
            width=8,
            queries=(
                *percentiles("vllm:request_prompt_tokens", (0.5, 0.9), prefix="prompt "),
                *percentiles("vllm:request_generation_tokens", (0.5, 0.9), prefix="output "),
            ),
            base_colour=NEUTRAL,
            description="Tokens per request, from vLLM's histograms: the workload's shape, which explains "
            "latency and KV-cache use. Healthy: stable for a given workload; a jump explains "
            "latency changes better than the server does.",
        ),
    ),
)

scheduler = Row(
    "Scheduler and KV cache",
    (
        Panel(
            title="Requests running and waiting",
            unit="short",
            width=6,
            queries=running_and_waiting(),
            base_colour=NEUTRAL,
            description="Requests in the running batch and in the queue. Healthy: waiting near 0; a queue "
            "that keeps growing means the server is saturated.",
        ),
        Panel(
            title="KV cache usage",
            unit="percentunit",
            width=6,
            min=0,
            max=1,
            queries=(
                Query(
                    per_side(f"vllm:kv_cache_usage_perc{{{VLLM}}}", "", "model_name"), "{{series}} engine {{engine}}"
                ),
            ),
            thresholds=levels.KV_CACHE,
            description="Share of KV-cache blocks in use (vllm:kv_cache_usage_perc; the old "
            "gpu_cache_usage_perc is gone). Healthy: high under load is fine while preemptions stay at 0.",
        ),
        Panel(
            title="Preemptions per second",
            unit="ops",
            width=6,
            queries=(
                Query(
                    per_side(f"sum by ({sides()}) ({rate('vllm:num_preemptions_total')})", "preemptions/s"),
                    "{{series}}",
                ),
            ),
            thresholds=levels.PREEMPTIONS_PER_S,
            description="Requests evicted from the KV cache and recomputed later. Healthy: 0; sustained "
            "preemptions mean the cache is too small for the concurrency.",
        ),
        Panel(
            title="Prefix cache hit rate",
            unit="percentunit",
            width=6,
            min=0,
            max=1,
            queries=(
                Query(
                    per_side(
                        ratio(
                            f"sum by ({sides()}) ({rate('vllm:prefix_cache_hits_total')})",
                            f"sum by ({sides()}) ({rate('vllm:prefix_cache_queries_total')})",
                        ),
                        "hit rate",
                    ),
                    "{{series}}",
                ),
            ),
            base_colour=NEUTRAL,
            description="Share of prompt tokens served from the prefix cache. Healthy depends on the workload: "
            "high for chat and code assistance with repeated context, near 0 for unique prompts; "
            "a drop at the same workload means the cache is evicted too early.",
        ),
    ),
)

errors = Row(
    "Errors",
    (
        Panel(
            title="Failed API calls by status",
            unit="reqps",
            width=8,
            queries=(
                Query(per_side(failed_api_calls(sides("status, handler")), "", "status", "handler"), "{{series}}"),
            ),
            thresholds=levels.FAILURES_PER_S,
            description="Non-2xx answers of the OpenAI API per second. Healthy: none. 4xx: client mistakes "
            "(model name, prompt too long); 5xx: the server failed.",
        ),
        Panel(
            title="Aborted and failed generations",
            unit="reqps",
            width=8,
            queries=(
                Query(
                    per_side(
                        f"sum by ({sides('finished_reason')}) "
                        f'(rate(vllm:request_success_total{{{VLLM}, finished_reason=~"abort|error"}}[$__rate_interval]))',
                        "",
                        "finished_reason",
                    ),
                    "{{series}}",
                ),
            ),
            thresholds=levels.FAILURES_PER_S,
            description="Requests vLLM ended without a result: abort (the client disconnected, often after a "
            "client timeout) or error. Healthy: 0.",
        ),
        Panel(
            title="Requests rejected at admission",
            unit="reqps",
            width=8,
            queries=(
                Query(
                    per_side(f"sum by ({sides('reason')}) ({rate('vllm:admission_rejections_total')})", "", "reason"),
                    "{{series}}",
                ),
            ),
            thresholds=levels.FAILURES_PER_S,
            description="Requests refused because a queue limit was reached. Healthy: 0; otherwise add "
            "capacity or shed load upstream.",
        ),
    ),
)

# The canary rollout's sides (docs/canary.md), side by side; without a canary each panel shows the
# one deployment there is. Memory is the host leak rules' measure over HostMemoryLeak's window.
LEAK_WINDOW = alert_config.load().section("host").dur("leak_window")
ROLE_GROWTH = host_leak_measure(lambda name: f"deriv({name}[{LEAK_WINDOW}])")
SIDE_REQUESTS = f"sum by ({sides()}) (rate(vllm:request_success_total{{{VLLM}}}[{LEAK_WINDOW}]))"
ALL_REQUESTS = f"sum({rate('vllm:request_success_total')})"

canary = Row(
    "Canary vs stable",
    (
        Panel(
            title="Host memory growth per request, per side and role",
            unit="bytes",
            width=12,
            queries=(
                Query(
                    per_side(
                        f"({ROLE_GROWTH})\n/ on ({sides()}) group_left () ({SIDE_REQUESTS} > 0)", "", "role", "rank"
                    ),
                    "{{series}}",
                ),
            ),
            thresholds=levels.GROWTH_PER_REQUEST,
            description=f"Each vLLM process role's anonymous memory + swap growth over the last {LEAK_WINDOW} "
            "(HostMemoryLeak's measure and window, as one slope: the rule also needs most slices to grow), "
            "divided by the requests its own side finished. Healthy: both sides near 0 once warm; a canary "
            "above the stable side leaks more per request (`leakwatch check --compare stable canary` "
            "gives the verdict with its confidence).",
        ),
        Panel(
            title="Share of requests per side",
            unit="percentunit",
            width=12,
            min=0,
            max=1,
            queries=(
                Query(
                    per_side(
                        f"sum by ({sides()}) ({rate('vllm:request_success_total')}) / on () group_left () {ALL_REQUESTS}",
                        "requests",
                    ),
                    "{{series}}",
                ),
            ),
            base_colour=NEUTRAL,
            description="Each side's share of the requests finished: the router's split as the vLLMs count "
            "it. Healthy: the split you set (`leakwatch canary-router show`), 90/10 by default.",
        ),
        Panel(
            title="Time to first token per side",
            unit="s",
            width=8,
            queries=percentiles(TTFT, by=""),
            thresholds=levels.TTFT,
            description="p50 / p90 / p99 of each side's time to first token. Healthy: the canary's within "
            "noise of the stable side's.",
        ),
        Panel(
            title="Time between tokens per side",
            unit="s",
            width=8,
            queries=percentiles(ITL, by=""),
            thresholds=levels.ITL,
            description="p50 / p90 / p99 of each side's inter-token latency. Healthy: the canary's within "
            "noise of the stable side's.",
        ),
        Panel(
            title="Failed requests per side",
            unit="percentunit",
            width=8,
            min=0,
            queries=(
                Query(
                    per_side(
                        ratio(
                            failed_api_calls(sides()), f"sum by ({sides()}) ({rate('http_requests_total', VLLM_API)})"
                        ),
                        "failed API calls",
                    ),
                    "{{series}}",
                ),
                Query(
                    per_side(
                        ratio(
                            f"sum by ({sides()}) "
                            f'(rate(vllm:request_success_total{{{VLLM}, finished_reason=~"abort|error"}}[$__rate_interval]))',
                            f"sum by ({sides()}) ({rate('vllm:request_success_total')})",
                        ),
                        "aborted or failed generations",
                    ),
                    "{{series}}",
                ),
            ),
            thresholds=levels.ERROR_RATIO,
            description="Shares, so sides with 90 % and 10 % of the traffic compare: non-2xx answers of the "
            "OpenAI API, and requests vLLM ended as abort or error. Healthy: both near 0 and alike.",
        ),
    ),
)

BOARD = Board(
    uid="leakwatch-serving",
    title="leakwatch / vLLM serving",
    description="Does vLLM meet its latency objectives, how much does it serve, and is it saturated or "
    "failing: latency percentiles, throughput, the scheduler, the KV cache and errors; with a canary, "
    "its side against the stable one.",
    source="leakwatch/dashboards/serving.py",
    time_from="now-6h",
    refresh="30s",
    variables=(MODEL, INSTANCE),
    rows=(now, latency, throughput, scheduler, errors, canary),
    annotations=(FIRING_ALERTS, VLLM_RESTARTS, HEALER_RESTARTS),
)
