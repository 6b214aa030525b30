"""Load test: what the load generator measured next to what vLLM measured, one row per measure.

The server side comes from vLLM's /metrics. The client side comes from the Locust exporter, whose
series are listed in config/metrics/loadgen.csv; a client panel is only built when every series it
needs is in that list, so the dashboard never queries a name the load generator does not emit.
"""

from __future__ import annotations

from dataclasses import replace

from ..catalogue import loadgen_metrics
from . import thresholds as T
from .common import FIRING_ALERTS, INSTANCE, MODEL
from .kit import BAD, NEUTRAL, WARN, Board, Panel, Query, Row
from .promql import VLLM_PROCESS, quantile, rate

TOKENS_PER_S = "suffix: tok/s"


def server_percentiles(histogram: str, qs=(0.5, 0.9)) -> tuple[Query, ...]:
    return tuple(Query(quantile(q, histogram), f"server p{int(q * 100)} {{{{model_name}}}}") for q in qs)


# (row title, client panel or None, server panel). Client panels name the series they need in
# `needs`; see client_panel().
MEASURES: list[tuple[str, tuple[str, ...], Panel | None, Panel]] = [
    ("Time to first token", (), None, Panel(
        title="Time to first token (server)",
        unit="s", queries=server_percentiles("vllm:time_to_first_token_seconds"),
        thresholds=((T.TTFT_WARN_S, WARN), (T.TTFT_BAD_S, BAD)),
        description="vLLM's own TTFT: queueing plus prefill, without HTTP and client overhead. Healthy: the "
                    "client's figure slightly higher; a large gap means a saturated client (it "
                    "inflates TTFT) or network trouble.",
    )),
    ("Time between tokens", (), None, Panel(
        title="Inter-token latency (server)",
        unit="s", queries=server_percentiles("vllm:inter_token_latency_seconds"),
        thresholds=((T.ITL_WARN_S, WARN), (T.ITL_BAD_S, BAD)),
        description="Gap between streamed tokens as vLLM measures it. Healthy: below 100 ms and flat as "
                    "concurrency ramps; a knee shows where batching stops paying off.",
    )),
    ("End-to-end latency", (), None, Panel(
        title="End-to-end latency (server)",
        unit="s", queries=server_percentiles("vllm:e2e_request_latency_seconds"),
        thresholds=((T.E2E_LATENCY_WARN_S, WARN), (T.E2E_LATENCY_BAD_S, BAD)),
        description="Whole-request time inside vLLM; grows with output length and concurrency. Healthy: "
                    "below 10 s at the target concurrency; the articles alert above 15 s.",
    )),
    ("Throughput", (), None, Panel(
        title="Requests and tokens per second (server)",
        unit="reqps",
        queries=(
            Query(f"sum({rate('vllm:request_success_total')})", "server requests/s"),
            Query(f"sum({rate('vllm:generation_tokens_total')})", "server output tokens/s",
                  unit=TOKENS_PER_S, right_axis=True),
        ),
        base_colour=NEUTRAL,
        description="Requests finished and tokens generated per second by vLLM. Healthy: follows the "
                    "load shape; a plateau while users keep ramping is the server's capacity.",
    )),
    ("Concurrency", (), None, Panel(
        title="Requests running and queued (server)",
        unit="short",
        queries=(
            Query('sum(vllm:num_requests_running{model_name=~"$model", instance=~"$instance"})', "server running"),
            Query('sum(vllm:num_requests_waiting{model_name=~"$model", instance=~"$instance"})', "server waiting"),
        ),
        base_colour=NEUTRAL,
        description="Requests in vLLM's running batch and queue. Running tops out at max-num-seqs (256 in "
                    "the articles). Healthy: waiting at 0; above 0 the run pushes past what the server "
                    "batches.",
    )),
    ("Errors", (), None, Panel(
        title="Failed API calls (server)",
        unit="reqps",
        queries=(Query(f'sum by (status) (rate(http_requests_total{{{VLLM_PROCESS}, handler=~"/v1/.*", status!="2xx"}}[$__rate_interval]))',
                       "server {{status}}"),),
        thresholds=((0.01, WARN),),
        description="Non-2xx answers vLLM sent per second. Healthy: none during a load test; 4xx usually "
                    "means a wrong model name or over-long prompts in the profile.",
    )),
    ("Saturation", (), None, Panel(
        title="KV cache usage and preemptions (server)",
        unit="percentunit", min=0,
        queries=(
            Query('max(vllm:kv_cache_usage_perc{model_name=~"$model", instance=~"$instance"})', "KV cache usage"),
            Query(f"sum({rate('vllm:num_preemptions_total')})", "preemptions/s", unit="ops", right_axis=True),
        ),
        thresholds=((T.KV_CACHE_WARN, WARN), (T.KV_CACHE_BAD, BAD)),
        description="How close the KV cache is to full, and requests evicted for lack of it. Healthy: no "
                    "preemptions; a stress run that finds them has found the concurrency the cache "
                    "supports.",
    )),
]


def client_panel(needs: tuple[str, ...], panel: Panel | None, available: set[str]) -> Panel | None:
    """The client panel when the load generator emits every series it needs, else None."""
    if panel is None or not needs or not set(needs) <= available:
        return None
    return panel


def rows(available: set[str]) -> tuple[Row, ...]:
    built = []
    for title, needs, client, server in MEASURES:
        client = client_panel(needs, client, available)
        if client is None:
            built.append(Row(title, (replace(server, width=24),)))
        else:
            built.append(Row(title, (replace(client, width=12), replace(server, width=12))))
    return tuple(built)


BOARD = Board(
    uid="leakwatch-loadtest",
    title="leakwatch / Load test: client and server",
    description="A Locust run seen from both ends: latency and throughput the load generator measured "
                "next to what vLLM measured, plus the server's saturation.",
    source="leakwatch/dashboards/loadtest.py",
    time_from="now-1h",
    refresh="10s",
    variables=(MODEL, INSTANCE),
    rows=rows(set(loadgen_metrics())),
    annotations=(FIRING_ALERTS,),
)
