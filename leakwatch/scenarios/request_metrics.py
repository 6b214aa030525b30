"""vLLM's own request metrics in a simulated process: finished requests by reason, HTTP statuses,
garbage collections, KV-cache use, preemptions and the latency histograms.

One `RequestMetrics` per vLLM process, from zero at its start as vLLM's counters are. `serve`
accounts for the requests that finished during a tick: the error share, the KV cache the running
requests demand (and the preemptions when it overflows), and latencies drawn from the traffic
profile's log-normal time to first token and inter-token latency into vLLM's histograms. The
numbers only; series_writer names them.
"""

from __future__ import annotations

import math
import random

# vLLM's histogram edges: one definition, the load generator's (tests check it against vLLM's /metrics).
from ..loadgen.stats import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS
from .model import Scenario
from .traffic_model import poisson

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
SAMPLE_CAP = 64  # per tick, latencies of at most this many requests are drawn; counts are scaled


class Histogram:
    """One latency histogram: counts per bucket (+Inf last) and the sum."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.reset()

    def reset(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)  # cumulative at output time; +Inf last
        self.total = 0.0

    def observe(self, values: list[float], weight: float = 1.0) -> None:
        for v in values:
            for i, b in enumerate(self.bounds):
                if v <= b:
                    self.counts[i] += weight
                    break
            else:
                self.counts[-1] += weight
            self.total += v * weight


class RequestMetrics:
    """One vLLM process's request metrics."""

    def __init__(self) -> None:
        self.served = 0  # requests since this process started
        self.counters = {reason: 0.0 for reason in FINISHED_REASONS}
        self.http = {"2xx": 0.0}
        self.gc = [0.0, 0.0, 0.0]
        self.preemptions = 0.0
        self.kv = 0.0
        self.hist = {
            "vllm:time_to_first_token_seconds": Histogram(TTFT_BUCKETS),
            "vllm:inter_token_latency_seconds": Histogram(ITL_BUCKETS),
            "vllm:e2e_request_latency_seconds": Histogram(E2E_BUCKETS),
        }

    def serve(self, sc: Scenario, rng: random.Random, n: int, running: float, in_burst: bool) -> None:
        """Counters and histograms for the n requests that finished during this tick."""
        tr = sc.traffic
        self.served += n
        errors = min(n, poisson(rng, n * tr.error_share))
        ok = n - errors
        if errors:
            self.http["5xx"] = self.http.get("5xx", 0.0) + errors
        self.http["2xx"] += ok
        length = round(ok * 0.3)
        self.counters["length"] += length
        self.counters["stop"] += ok - length
        self.counters["error"] += errors
        tokens_per_seq = sum(tr.prompt_tokens) / 2 + sum(tr.output_tokens) / 4
        demand = (running - (tr.burst_concurrency if in_burst else 0)) * tokens_per_seq
        if in_burst:
            demand += tr.burst_concurrency * (tr.burst_prompt_tokens + sum(tr.output_tokens) / 4)
        capacity = sc.gpu.kv_capacity_tokens if sc.gpu else 2_000_000
        self.kv = min(1.0, demand / capacity)
        if demand > 0.97 * capacity:
            self.preemptions += max(1, round((demand - 0.97 * capacity) / tokens_per_seq))
        # Gen-0 collections follow allocations (per request), plus the scrapes' own.
        self.gc[0] += n * 30 + 2
        self.gc[1] = math.floor(self.gc[0] / 11)
        self.gc[2] = math.floor(self.gc[1] / 12)
        if n == 0:
            return
        load = 1 + running / 128  # decoding a few more sequences per step costs little
        drawn = min(n, SAMPLE_CAP)
        weight = n / drawn
        ttft: list[float] = []
        e2e: list[float] = []
        itl: list[float] = []
        out_tokens = 0
        for _ in range(drawn):
            first = rng.lognormvariate(math.log(tr.ttft_median_s * (1 + running / 32)), tr.ttft_sigma)
            tokens = rng.randint(*tr.output_tokens)
            step = rng.lognormvariate(math.log(tr.itl_median_s * load), tr.itl_sigma)
            ttft.append(first)
            e2e.append(first + tokens * step)
            itl.extend(rng.lognormvariate(math.log(step), 0.15) for _ in range(4))
            out_tokens += tokens
        self.hist["vllm:time_to_first_token_seconds"].observe(ttft, weight)
        self.hist["vllm:e2e_request_latency_seconds"].observe(e2e, weight)
        self.hist["vllm:inter_token_latency_seconds"].observe(itl, out_tokens * weight / len(itl))
