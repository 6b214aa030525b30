"""vLLM's own view of a load test, from its /metrics: the server-side TTFT histogram, token counters
and running requests, to compare with what the client measured (tests and `make bench-loadgen`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import requests
from prometheus_client.parser import text_string_to_metric_families

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
GENERATION_TOKENS = "vllm:generation_tokens"  # counter family name (samples end in _total)
PROMPT_TOKENS = "vllm:prompt_tokens"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


@dataclass
class Snapshot:
    histograms: dict[str, dict[float, float]]  # family -> {le: cumulative count}, summed over label sets
    values: dict[str, float]  # counters (without _total) and gauges, summed

    def histogram(self, name: str) -> dict[float, float]:
        return self.histograms.get(name, {})


def scrape(base_url: str, timeout: float = 10.0) -> Snapshot:
    text = requests.get(base_url.rstrip("/") + "/metrics", timeout=timeout).text
    return parse(text)


def parse(text: str) -> Snapshot:
    histograms: dict[str, dict[float, float]] = {}
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            buckets = histograms.setdefault(family.name, {})
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + sample.value
        elif family.type in ("counter", "gauge"):
            total = sum(s.value for s in family.samples if not s.name.endswith("_created"))
            values[family.name] = values.get(family.name, 0.0) + total
    return Snapshot(histograms, values)


def delta(before: dict[float, float], after: dict[float, float]) -> dict[float, float]:
    return {le: after[le] - before.get(le, 0.0) for le in after}


@dataclass(frozen=True)
class BucketQuantile:
    lower: float  # lower edge of the bucket holding the quantile
    upper: float  # its upper edge
    estimate: float  # linear interpolation inside the bucket, as PromQL's histogram_quantile does


def quantile(buckets: dict[float, float], q: float) -> BucketQuantile | None:
    """The bucket that holds quantile q of a cumulative histogram (None when it is empty)."""
    edges = sorted(buckets)
    if not edges or buckets[edges[-1]] <= 0:
        return None
    total = buckets[edges[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for le in edges:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return BucketQuantile(lower, le, lower)
            inside = count - below
            fraction = (rank - below) / inside if inside else 0.0
            return BucketQuantile(lower, le, lower + (le - lower) * fraction)
        lower, below = le, count
    return None
