"""The load generator's Prometheus metrics, as listed in config/metrics/loadgen.csv.

A custom collector reads the run's statistics at scrape time (on the master they are the merged
worker reports), so nothing is double-counted and the names, types and help texts come from the one
CSV that dashboards and rules are checked against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry

from ..core.metric_catalogue import loadgen_metrics
from .outcomes import OUTCOMES
from .stats import RunStats

PREFIX = "leakwatch_loadgen_"
HISTOGRAMS = {
    "time_to_first_token_seconds": "ttft",
    "inter_token_latency_seconds": "itl",
    "time_per_output_token_seconds": "tpot",
    "e2e_request_latency_seconds": "e2e",
    "queue_delay_seconds": "queue_delay",
}


@dataclass
class RunState:
    """What the exporter reads besides the statistics: callables, so values are current at scrape time."""

    shape: Callable[[], str] = lambda: ""
    model: Callable[[], str] = lambda: ""
    users: Callable[[], int] = lambda: 0
    target_rate: Callable[[], float] = lambda: 0.0
    extra: dict = field(default_factory=dict)


class LoadgenCollector:
    def __init__(self, stats: Callable[[], RunStats], state: RunState):
        self._stats = stats
        self._state = state
        self._contract = loadgen_metrics()

    def _help(self, name: str) -> str:
        return self._contract[name]["help"]

    def describe(self):
        return []  # collected lazily; avoids a scrape at registration

    def collect(self):
        stats = self._stats()
        name = PREFIX + "requests_total"
        requests = CounterMetricFamily(name[: -len("_total")], self._help(name), labels=["workload", "outcome"])
        prompt = CounterMetricFamily(
            PREFIX + "prompt_tokens", self._help(PREFIX + "prompt_tokens_total"), labels=["workload"]
        )
        output = CounterMetricFamily(
            PREFIX + "output_tokens", self._help(PREFIX + "output_tokens_total"), labels=["workload"]
        )
        histograms = {
            suffix: HistogramMetricFamily(PREFIX + suffix, self._help(PREFIX + suffix), labels=["workload"])
            for suffix in HISTOGRAMS
        }
        for workload, w in sorted(stats.workloads.items()):
            for outcome in OUTCOMES:
                if outcome in w.outcomes:
                    requests.add_metric([workload, outcome], w.outcomes[outcome])
            prompt.add_metric([workload], w.prompt_tokens)
            output.add_metric([workload], w.output_tokens)
            for suffix, key in HISTOGRAMS.items():
                dist = w.dists[key]
                buckets = [(_le(edge), count) for edge, count in dist.cumulative_edge_counts()]
                histograms[suffix].add_metric([workload], buckets, dist.total)
        yield requests
        yield prompt
        yield output
        yield from histograms.values()

        state = self._state
        yield _gauge(PREFIX + "streams_in_flight", self._help(PREFIX + "streams_in_flight"), stats.in_flight)
        yield _gauge(PREFIX + "users", self._help(PREFIX + "users"), state.users())
        yield _gauge(PREFIX + "target_request_rate", self._help(PREFIX + "target_request_rate"), state.target_rate())
        info = GaugeMetricFamily(PREFIX + "info", self._help(PREFIX + "info"), labels=["shape", "model"])
        info.add_metric([state.shape(), state.model()], 1)
        yield info


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def _le(edge: float) -> str:
    return "+Inf" if edge == float("inf") else repr(float(edge))


def registry(stats: Callable[[], RunStats], state: RunState) -> CollectorRegistry:
    """A registry holding only the load generator's metrics (no process/GC collectors of Locust)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LoadgenCollector(stats, state))
    return reg
