"""Turns a Scenario into the samples Prometheus would have scraped: vLLM's /metrics, DCGM, node
exporter and `leakwatch exporter` (its baseline, growth, growth per request, retention and restart
count from the exporter's own leakwatch/exporter/derived.py, fed what it would sample), one scrape
per tick.

Deterministic for a scenario's seed. vLLM's own series vanish while it restarts (Prometheus sees
`up == 0`), its counters restart from zero, and the exporter re-takes its baseline.

This module holds vLLM's lifecycle and the order of a scrape's phases; the numbers come from
traffic_model, memory_model and request_metrics, series_writer names them, and simulation_result
holds what the backtest reads afterwards.
"""

from __future__ import annotations

import calendar
import math
import random
import time

from ..exporter.derived import DerivedState, Sample
from ..exporter.vllm_scrape import VllmStats
from .memory_model import HostMemory, MemoryModel
from .model import MIB, ROLES, Scenario
from .request_metrics import RequestMetrics
from .series_writer import SeriesWriter
from .simulation_result import GPU_OUT_OF_MEMORY, HEALER_RESTART, HOST_OUT_OF_MEMORY, SimulationResult, Sink
from .traffic_model import TickTraffic, TrafficModel


class Simulator:
    """One scenario, scrape by scrape: the lifecycle of vLLM (starts, planned and healer restarts,
    out-of-memory crashes) over the traffic, memory and request models, and the series writer."""

    def __init__(self, scenario: Scenario, resolution_s: float = 60.0):
        self.sc = scenario
        self.dt = float(resolution_s)
        self.rng = random.Random(scenario.seed)
        midnight = calendar.timegm(time.strptime(scenario.start_date, "%Y-%m-%d"))
        self.start = midnight + scenario.start_hour * 3600
        self.end = self.start + scenario.days * 86400
        self.result = SimulationResult(scenario.name, self.start, self.end, self.dt)
        self.ranks = [str(i) for i in range(scenario.gpu.count if scenario.gpu else 1)]
        self.writer = SeriesWriter(scenario, self.ranks)
        self.restarts = 0
        # One random stream for every model: the order of their draws is part of what a seed gives.
        self.traffic = TrafficModel(scenario, self.rng, self.start)
        self.memory = MemoryModel(scenario, self.rng, self.dt, self.start, self.ranks, self.result.events)
        self.total_served = 0.0
        # The exporter's own derived-state code (baseline, retention, restarts), fed what it would
        # sample, so the backtester judges the rules against the exporter we ship.
        self.derived = DerivedState(warmup_requests=scenario.warmup_requests)
        self._start_process(self.start, "vLLM starts")
        self.restarts = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def _start_process(self, t: float, why: str) -> None:
        self.result.events.append((t, why))
        self.process_start = t
        self.ready_at = t + self.sc.restart_downtime_s
        self.restarts += 1
        self.requests = RequestMetrics()
        self.memory.restart()

    def _planned_restarts(self, t: float) -> None:
        """The daily restart and the healer's, when one falls in the tick ending at `t`."""
        sc, dt = self.sc, self.dt
        if sc.daily_restart_hour is not None:
            boundary = (math.floor((t - sc.daily_restart_hour * 3600) / 86400) * 86400) + sc.daily_restart_hour * 3600
            if t - dt < boundary <= t and t - self.process_start > 3600:
                self._start_process(t, "planned daily restart")
        for at_s in sc.healer_restarts_s:
            if t - dt < self.start + at_s <= t:
                self._start_process(t, HEALER_RESTART)

    def _out_of_memory(self, t: float, event: str, why: str) -> list[tuple[str, float]]:
        """vLLM dies and is restarted at once; the scrape at `t` is taken again."""
        self.result.events.append((t, event))
        self._start_process(t, why)
        return self.step(t)

    # -- one scrape --------------------------------------------------------------------------------

    def run(self, sink: Sink) -> SimulationResult:
        t = self.start
        while t < self.end - 1e-9:
            sink.tick(t, self.step(t))
            t += self.dt
        return self.result

    def step(self, t: float) -> list[tuple[str, float]]:
        """The scrape at `t`: restarts due, the tick's traffic, the cards' then the host's memory (a
        crash when either runs out), the leak's start, the requests vLLM served, what the exporter
        derives, and every target's samples. The phases draw from one random stream in this order."""
        gpu = self.sc.gpu
        self._planned_restarts(t)
        ready = t >= self.ready_at
        starting_share = 1.0 if ready else max(0.0, (t - self.process_start) / self.sc.restart_downtime_s)
        traffic = self.traffic.tick(t, self.dt, ready)
        if ready:
            self.memory.sawtooth_step(t, traffic.n)
        self._count_served(t, traffic.n)
        gpu_used: list[float] = []
        leak_started = False
        if gpu:
            gpu_used, leak_started = self.memory.gpu_step(
                t, ready, traffic.n, traffic.running, traffic.long, starting_share
            )
            if ready and any(u >= gpu.total_mib for u in gpu_used):
                return self._out_of_memory(t, GPU_OUT_OF_MEMORY, "vLLM restarts after the crash")
        if ready:
            leak_started |= self.memory.host_step(t, traffic.n, traffic.long)
        self.memory.count_long_requests(traffic.long)
        mem = self.memory.host_state(t, ready, starting_share, traffic.running, self.ready_at)
        if ready and mem.out_of_memory:
            return self._out_of_memory(t, HOST_OUT_OF_MEMORY, "vLLM restarts after the OOM kill")
        self._record(t, leak_started, gpu_used)
        if ready:
            self.requests.serve(self.sc, self.rng, traffic.n, traffic.running, traffic.in_burst)
        host_by_role, gpu_bytes = self._feed_exporter(t, ready, traffic, mem, gpu_used)
        return self._scrape(t, ready, traffic, mem, gpu_used, host_by_role, gpu_bytes)

    def _count_served(self, t: float, n: int) -> None:
        self.total_served += n
        self.result.requests_served.append((t, self.total_served))

    def _record(self, t: float, leak_started: bool, gpu_used: list[float]) -> None:
        """The result's leak start (and the card's headroom then) and card 0's use."""
        gpu = self.sc.gpu
        if leak_started and self.result.leak_start is None:
            self.result.leak_start = t
            self.result.events.append((t, "leak starts"))
            if gpu:
                self.result.gpu_headroom_bytes = (gpu.total_mib - gpu_used[0]) * MIB
        if gpu_used:
            self.result.gpu_used_bytes.append((t, gpu_used[0] * MIB))

    def _feed_exporter(
        self, t: float, ready: bool, traffic: TickTraffic, mem: HostMemory, gpu_used: list[float]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """What `leakwatch exporter` samples, fed to its derived state; returns the host memory per
        role and the GPU memory per card (bytes) it sampled."""
        rss_now, swap_now = mem.rss, mem.swap
        in_flight = traffic.running + traffic.waiting
        host_by_role = {role: round(sum(rss_now[k] + swap_now[k] for k in rss_now if k[0] == role)) for role in ROLES}
        gpu_bytes = {str(i): round(u * MIB) for i, u in enumerate(gpu_used)}
        self.derived.update(
            Sample(
                time=t,
                # A new API server process each start: the exporter's restart signal.
                identity=(1000 + self.restarts, round(self.process_start)),
                vllm=VllmStats(series=0, requests_served=float(self.requests.served), in_flight=float(in_flight))
                if ready
                else None,
                healthy=ready,
                host=host_by_role,
                gpu=gpu_bytes or None,
            )
        )
        return host_by_role, gpu_bytes

    def _scrape(
        self,
        t: float,
        ready: bool,
        traffic: TickTraffic,
        mem: HostMemory,
        gpu_used: list[float],
        host_by_role: dict[str, int],
        gpu_bytes: dict[str, int],
    ) -> list[tuple[str, float]]:
        """Every target's samples, in scrape order: vLLM, DCGM, node exporter, leakwatch exporter."""
        samples: list[tuple[str, float]] = []
        writer = self.writer
        writer.vllm(samples, ready, traffic, self.requests, self.process_start, mem)
        writer.dcgm(samples, gpu_used)
        writer.node(samples, mem)
        writer.exporter(
            samples,
            t,
            ready,
            self.ready_at,
            self.requests.served,
            mem,
            gpu_used,
            self.derived,
            host_by_role,
            gpu_bytes,
        )
        return samples


def simulate(scenario: Scenario, sink: Sink, resolution_s: float = 60.0) -> SimulationResult:
    return Simulator(scenario, resolution_s).run(sink)
