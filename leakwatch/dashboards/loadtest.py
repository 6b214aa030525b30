"""Load test: what the load generator measured next to what vLLM measured, one row per measure.

The server side comes from vLLM's /metrics. The client side comes from the Locust exporter, whose
series are listed in config/metrics/loadgen.csv; a client panel is only built when every series it
needs is in that list, so the dashboard never queries a name the load generator does not emit.
"""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import LeakwatchError
from ..core.metric_catalogue import METRICS_DIR, load_csv, metric_names
from . import levels
from .board import TOKENS_PER_S, Board, Panel, Query, Row
from .common import FIRING_ALERTS, INSTANCE, MODEL, percentiles, running_and_waiting
from .levels import NEUTRAL
from .queries import VLLM, failed_api_calls, rate

LOADGEN_CSV = METRICS_DIR / "loadgen.csv"
# The load generator's series carry no model label; a run drives one model at a time.
LOADGEN = "leakwatch_loadgen"


def loadgen_series() -> set[str] | None:
    """Sample names the load generator emits (a histogram as its _bucket/_sum/_count); None while
    config/metrics/loadgen.csv does not exist."""
    if not LOADGEN_CSV.exists():
        return None
    names = set()
    for name, row in load_csv(LOADGEN_CSV).items():
        names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if row["type"] == "histogram" else {name}
    return names


def server_percentiles(histogram: str) -> tuple[Query, ...]:
    return percentiles(histogram, (0.5, 0.9), prefix="server ")


def client_percentiles(histogram: str, qs=(0.5, 0.9)) -> tuple[Query, ...]:
    # One overall figure per percentile, comparable with the server's: the buckets are vLLM's edges.
    return percentiles(histogram, qs, prefix="client ", by="", selector="")


# One row per measure: (title, client panel, server panel). A client panel is built only when the
# load generator emits every series it uses (see rows()).
MEASURES: list[tuple[str, Panel, Panel]] = [
    (
        "Time to first token",
        Panel(
            title="Time to first token (client)",
            unit="s",
            queries=client_percentiles(f"{LOADGEN}_time_to_first_token_seconds"),
            thresholds=levels.TTFT,
            description="From sending a request to its first streamed chunk, as the load generator saw it "
            "(HTTP, tokenisation and the API server's queue included). Healthy: a little above "
            "the server's figure; far above it, the client is saturated and inflates TTFT.",
        ),
        Panel(
            title="Time to first token (server)",
            unit="s",
            queries=server_percentiles("vllm:time_to_first_token_seconds"),
            thresholds=levels.TTFT,
            description="vLLM's own TTFT: queueing plus prefill, without HTTP and client overhead. Healthy: the "
            "client's figure slightly higher; a large gap means a saturated client (it "
            "inflates TTFT) or network trouble.",
        ),
    ),
    (
        "Time between tokens",
        Panel(
            title="Inter-token latency (client)",
            unit="s",
            queries=client_percentiles(f"{LOADGEN}_inter_token_latency_seconds"),
            thresholds=levels.ITL,
            description="Gaps between consecutive streamed chunks at the client, at full precision (not "
            "Locust's rounded buckets). Healthy: close to the server's figure.",
        ),
        Panel(
            title="Inter-token latency (server)",
            unit="s",
            queries=server_percentiles("vllm:inter_token_latency_seconds"),
            thresholds=levels.ITL,
            description="Gap between streamed tokens as vLLM measures it. Healthy: below 100 ms and flat as "
            "concurrency ramps; a knee shows where batching stops paying off.",
        ),
    ),
    (
        "End-to-end latency",
        Panel(
            title="End-to-end latency (client)",
            unit="s",
            queries=client_percentiles(f"{LOADGEN}_e2e_request_latency_seconds"),
            thresholds=levels.E2E_LATENCY,
            description="From sending a request to its last chunk at the client. Healthy: the server's figure "
            "plus a little; the articles alert above 15 s.",
        ),
        Panel(
            title="End-to-end latency (server)",
            unit="s",
            queries=server_percentiles("vllm:e2e_request_latency_seconds"),
            thresholds=levels.E2E_LATENCY,
            description="Whole-request time inside vLLM; grows with output length and concurrency. Healthy: "
            "below 10 s at the target concurrency; the articles alert above 15 s.",
        ),
    ),
    (
        "Throughput",
        Panel(
            title="Requests and tokens per second (client)",
            unit="reqps",
            queries=(
                Query(f'sum(rate({LOADGEN}_requests_total{{outcome="ok"}}[$__rate_interval]))', "client requests/s"),
                Query(f"sum({LOADGEN}_target_request_rate)", "schedule asks (production day)", dashed=True),
                Query(
                    f"sum(rate({LOADGEN}_output_tokens_total[$__rate_interval]))",
                    "client output tokens/s",
                    unit=TOKENS_PER_S,
                    right_axis=True,
                ),
            ),
            base_colour=NEUTRAL,
            description="Successful requests and output tokens (the server's usage counts) per second at the "
            "client, against the rate the production-day schedule asks for. Healthy: achieved "
            "rate on the schedule's line.",
        ),
        Panel(
            title="Requests and tokens per second (server)",
            unit="reqps",
            queries=(
                Query(f"sum({rate('vllm:request_success_total')})", "server requests/s"),
                Query(
                    f"sum({rate('vllm:generation_tokens_total')})",
                    "server output tokens/s",
                    unit=TOKENS_PER_S,
                    right_axis=True,
                ),
            ),
            base_colour=NEUTRAL,
            description="Requests finished and tokens generated per second by vLLM. Healthy: follows the "
            "load shape; a plateau while users keep ramping is the server's capacity.",
        ),
    ),
    (
        "Concurrency",
        Panel(
            title="Streams open and users (client)",
            unit="short",
            queries=(
                Query(f"sum({LOADGEN}_streams_in_flight)", "client streams open"),
                Query(f"sum({LOADGEN}_users)", "Locust users"),
            ),
            base_colour=NEUTRAL,
            description="Streams the load generator holds open and Locust users running. Healthy: open "
            "streams follow the ramp up to the target (e.g. 256).",
        ),
        Panel(
            title="Requests running and queued (server)",
            unit="short",
            queries=running_and_waiting(prefix="server "),
            base_colour=NEUTRAL,
            description="Requests in vLLM's running batch and queue. Running tops out at max-num-seqs (256 in "
            "the articles). Healthy: waiting at 0; above 0 the run pushes past what the server "
            "batches.",
        ),
    ),
    (
        "Errors",
        Panel(
            title="Request outcomes (client)",
            unit="reqps",
            stacked=True,
            queries=(
                Query(f"sum by (outcome) (rate({LOADGEN}_requests_total[$__rate_interval]))", "client {{outcome}}"),
            ),
            base_colour=NEUTRAL,
            description="Requests the load generator finished per second by outcome: ok, cancelled (users "
            "stopped mid-stream at ramp-down) or a failure class (HTTP status, timeout, stream cut). "
            "Healthy: ok only; failures the server does not show are network or client trouble.",
        ),
        Panel(
            title="Failed API calls (server)",
            unit="reqps",
            queries=(Query(failed_api_calls("status"), "server {{status}}"),),
            thresholds=levels.FAILURES_PER_S,
            description="Non-2xx answers vLLM sent per second. Healthy: none during a load test; 4xx usually "
            "means a wrong model name or over-long prompts in the profile.",
        ),
    ),
    (
        "Saturation",
        Panel(
            title="Schedule lag (client)",
            unit="s",
            queries=client_percentiles(f"{LOADGEN}_queue_delay_seconds", qs=(0.9, 0.99)),
            thresholds=levels.SCHEDULE_LAG,
            description="How late the client sent requests against the open-loop schedule (coordinated "
            "omission). Healthy: near 0; growing lag means the client, not the server, limits the "
            "run and its latency figures are too optimistic.",
        ),
        Panel(
            title="KV cache usage and preemptions (server)",
            unit="percentunit",
            min=0,
            queries=(
                Query(f"max(vllm:kv_cache_usage_perc{{{VLLM}}})", "KV cache usage"),
                Query(f"sum({rate('vllm:num_preemptions_total')})", "preemptions/s", unit="ops", right_axis=True),
            ),
            thresholds=levels.KV_CACHE,
            description="How close the KV cache is to full, and requests evicted for lack of it. Healthy: no "
            "preemptions; a stress run that finds them has found the concurrency the cache "
            "supports.",
        ),
    ),
]


def rows(available: set[str] | None) -> tuple[Row, ...]:
    """Client and server side by side once the load generator's contract exists (every series a
    client panel uses must be in it); the server side alone before."""
    built = []
    for title, client, server in MEASURES:
        if available is None:
            built.append(Row(title, (replace(server, width=24),)))
            continue
        missing = {name for query in client.queries for name in metric_names(query.expr)} - available
        if missing:
            raise LeakwatchError(f"load-test panel {client.title!r} uses {sorted(missing)}, not in {LOADGEN_CSV}")
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
    rows=rows(loadgen_series()),
    annotations=(FIRING_ALERTS,),
)
