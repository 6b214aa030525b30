"""Requests reaching the simulated vLLM: a diurnal background rate, bursts of concurrent clients,
clumped Poisson arrivals and the long requests among them.

`TrafficModel` keeps the burst schedule (exponential gaps, `bursts_per_day`) and, for each tick vLLM
answers, draws how many requests finished, how many of them were long, and how many were running
and waiting at the scrape (a `TickTraffic`). It draws from the simulation's one random stream, so
the order of its draws among the memory and request models' is part of what a seed produces.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .model import Scenario


def poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, int(round(rng.gauss(lam, math.sqrt(lam)))))
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


@dataclass(frozen=True)
class TickTraffic:
    """Requests finished during a tick, and what was running at its scrape."""

    n: int = 0  # requests finished
    long: int = 0  # long requests among them
    running: float = 0.0
    waiting: float = 0.0
    in_burst: bool = False


class TrafficModel:
    def __init__(self, scenario: Scenario, rng: random.Random, start: float):
        self.sc = scenario
        self.rng = rng
        self.burst_until = -1.0
        self.next_burst = self._next_burst(start)

    def _next_burst(self, t: float) -> float:
        per_day = self.sc.traffic.bursts_per_day
        return t + self.rng.expovariate(per_day / 86400) if per_day > 0 else math.inf

    def burst_rate(self) -> float:
        """Requests per second during a burst (each client sends its next request at once)."""
        tr = self.sc.traffic
        e2e = tr.ttft_median_s * 2 + (sum(tr.output_tokens) / 2) * tr.itl_median_s
        return tr.burst_concurrency / e2e

    def rate(self, t: float) -> float:
        """Background arrivals per second: the daily total minus what the bursts bring."""
        tr = self.sc.traffic
        per_day = tr.requests_per_day - tr.bursts_per_day * tr.burst_minutes * 60 * self.burst_rate()
        hour = (t % 86400) / 3600
        return (
            max(0.0, per_day) / 86400 * (1 + tr.diurnal_amplitude * math.cos(2 * math.pi * (hour - tr.peak_hour) / 24))
        )

    def tick(self, t: float, dt: float, ready: bool) -> TickTraffic:
        """The tick ending at `t`; nothing arrives while vLLM is not ready."""
        if not ready:
            return TickTraffic()
        sc, rng, tr = self.sc, self.rng, self.sc.traffic
        mean_e2e = (sum(tr.output_tokens) / 2) * tr.itl_median_s + tr.ttft_median_s
        if t >= self.next_burst:
            self.burst_until = t + tr.burst_minutes * 60
            self.next_burst = self._next_burst(t)
        in_burst = t < self.burst_until
        lam = self.rate(t) * dt + (self.burst_rate() * dt if in_burst else 0.0)
        clump = max(1, tr.clump_size)
        n = clump * poisson(rng, lam / clump)
        long = sum(1 for _ in range(min(n, 200)) if rng.random() < tr.long_request_share)
        base_running = poisson(rng, self.rate(t) * mean_e2e)
        running = base_running + (tr.burst_concurrency if in_burst else 0)
        waiting = max(0.0, running - sc.max_num_seqs)
        running = min(running, sc.max_num_seqs)
        return TickTraffic(n, long, running, waiting, in_burst)
