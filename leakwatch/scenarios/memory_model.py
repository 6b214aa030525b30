"""The simulated memory of vLLM's processes and cards, tick by tick: what each part holds and what a
leak adds to it.

Host: each process (API server, engine core, one worker per rank) holds its base RSS, a warm-up,
allocator events wandering within a cap, a one-time plateau after the first long request, a load per
running request, jitter, a periodically released cache (the sawtooth), a one-time step, and leaked
bytes that stay resident or move to swap; the host's available memory, free swap, PSS and cgroup
usage follow, and with them whether the OOM killer strikes (`HostMemory`). GPU: per card, the ready
footprint plus warm-up, the allocator's steps at record-long requests, wandering events, leaked bytes
and the sawtooth, rounded up to the segments DCGM sees. `MemoryModel.restart` drops what a process
held; the phases of the wander and of the sawtooth's release timer outlive restarts.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .model import GIB, MIB, ROLES, Scenario

# The first and the tenth long request after a start set new records for the allocator's segments.
RECORD_LONG_REQUESTS = (1, 10)


@dataclass
class ProcessMemory:
    """One vLLM process (per role and rank): its memory parts."""

    role: str
    rank: str
    base: float
    offset: float = 0.0  # allocator/heap wander (bytes)
    plateau: float = 0.0
    leak_hot: float = 0.0  # leaked and still resident
    swap: float = 0.0  # leaked and swapped out


@dataclass(frozen=True)
class HostMemory:
    """The host's memory at a scrape: per process (role, rank) and in all."""

    rss: dict[tuple[str, str], float]
    swap: dict[tuple[str, str], float]
    pss: dict[tuple[str, str], float]
    available: float
    swap_free: float
    cgroup_usage: float
    out_of_memory: bool  # what vLLM holds leaves the host no memory, or its cgroup hit the limit


class MemoryModel:
    def __init__(
        self,
        scenario: Scenario,
        rng: random.Random,
        dt: float,
        start: float,
        ranks: list[str],
        events: list[tuple[float, str]],
    ):
        self.sc = scenario
        self.rng = rng
        self.dt = dt
        self.start = start
        self.ranks = ranks
        self.events = events  # the simulation's: allocator steps are logged there
        self.wander_phase = self.rng.uniform(0, 2 * math.pi)
        # The release timer runs from an arbitrary moment, not from the hour.
        period = scenario.noise.sawtooth_period_s
        self.sawtooth_phase = self.rng.uniform(0, period) if period else 0.0
        self.restart()

    def restart(self) -> None:
        """A new vLLM process: nothing held, nothing leaked, no long request seen yet."""
        host = self.sc.host
        self.procs = [
            ProcessMemory(role, rank, host.base_rss_bytes[role])
            for role in ROLES
            for rank in (self.ranks if role == "worker" else [""])
        ]
        self.gpu_offset = [0.0] * len(self.ranks)
        self.gpu_leaked = [0.0] * len(self.ranks)
        self.gpu_steps_done = 0
        self.gpu_warm = False
        self.long_seen = 0
        self.sawtooth = {target: 0.0 for target in self.sc.noise.sawtooth_mib_per_request}  # MiB

    def sawtooth_step(self, t: float, n: int) -> None:
        """Creep with the requests served; fall back to the plateau when the release timer fires."""
        noise = self.sc.noise
        period = noise.sawtooth_period_s
        if not period:
            return
        since = t - self.start - self.sawtooth_phase
        released = math.floor(since / period) != math.floor((since - self.dt) / period)
        for target, per_request in noise.sawtooth_mib_per_request.items():
            if released:
                self.sawtooth[target] = 0.0
            else:
                self.sawtooth[target] = min(noise.sawtooth_cap_mib, self.sawtooth[target] + n * per_request)

    def step_mib(self, t: float, target: str) -> float:
        noise = self.sc.noise
        if noise.step_at_s and t - self.start >= noise.step_at_s:
            return noise.step_mib.get(target, 0.0)
        return 0.0

    def gpu_step(
        self, t: float, ready: bool, n: int, running: float, long: int, starting_share: float
    ) -> tuple[list[float], bool]:
        """Memory in use per card (MiB) after this tick, and whether a leak retained some (a scenario
        with cards only)."""
        sc, rng, g, noise = self.sc, self.rng, self.sc.gpu, self.sc.noise
        assert g is not None
        leaked = False
        if ready and n > 0:
            self.gpu_warm = True
        for step_mib, threshold in zip(noise.gpu_plateau_mib, RECORD_LONG_REQUESTS):
            if self.long_seen < threshold <= self.long_seen + long:
                self.gpu_steps_done += 1
                self.events.append((t, f"record-long request: allocator step of {step_mib:.0f} MiB"))
        used_now = []
        for i in range(len(self.ranks)):
            if ready and (n > 0 or running > 0) and rng.random() < noise.gpu_events_per_hour * self.dt / 3600:
                size = rng.uniform(*noise.gpu_event_mib)
                cap = noise.gpu_event_cap_mib
                up = rng.random() < 0.5 * (1 - self.gpu_offset[i] / cap)
                self.gpu_offset[i] = max(-cap, min(cap, self.gpu_offset[i] + (size if up else -size)))
            for leak in sc.leaks:
                if leak.target == "gpu" and t - self.start >= leak.start_s and n:
                    self.gpu_leaked[i] += n * leak.bytes_per_request / MIB
                    leaked = True
            ready_used = g.ready_used_mib()
            if ready:
                # DCGM sees reserved segments, not the bytes inside them.
                saw = self.sawtooth.get("gpu", 0.0)
                seg = noise.sawtooth_segment_mib
                shown_saw = math.ceil(saw / seg) * seg if seg and saw else saw
                segment = max((leak.segment_mib for leak in sc.leaks if leak.target == "gpu"), default=0.0)
                leaked_mib = self.gpu_leaked[i]
                shown_leak = math.ceil(leaked_mib / segment) * segment if segment and leaked_mib else leaked_mib
                used = (
                    ready_used
                    + (noise.gpu_warmup_mib if self.gpu_warm else 0.0)
                    + sum(noise.gpu_plateau_mib[: self.gpu_steps_done])
                    + self.gpu_offset[i]
                    + shown_leak
                    + shown_saw
                    + self.step_mib(t, "gpu")
                )
            else:
                used = g.idle_mib + (ready_used - g.idle_mib) * starting_share
            used_now.append(min(float(g.total_mib), math.floor(used)))
        return used_now, leaked

    def host_step(self, t: float, n: int, long: int) -> bool:
        """Heap noise, one-time steps and leaks of each process; True when a leak retained some."""
        sc, rng, noise = self.sc, self.rng, self.sc.noise
        leaked = False
        for p in self.procs:
            if rng.random() < noise.host_events_per_hour * self.dt / 3600:
                size = rng.uniform(*noise.host_event_mib) * MIB
                cap = noise.host_event_cap_mib * MIB
                up = rng.random() < 0.5 * (1 - p.offset / cap)
                p.offset = max(-cap, min(cap, p.offset + (size if up else -size)))
            if self.long_seen < 1 <= self.long_seen + long and p.role in noise.host_plateau_mib:
                p.plateau = noise.host_plateau_mib[p.role] * MIB
            for leak in sc.leaks:
                if leak.target == p.role and t - self.start >= leak.start_s and n:
                    p.leak_hot += n * leak.bytes_per_request
                    leaked = True
            if p.leak_hot and any(leak.to_swap for leak in sc.leaks if leak.target == p.role):
                moved = p.leak_hot * min(1.0, self.dt / 600)  # cold pages are swapped out within minutes
                p.leak_hot -= moved
                p.swap += moved
        return leaked

    def count_long_requests(self, long: int) -> None:
        self.long_seen += long

    def host_state(self, t: float, ready: bool, starting_share: float, running: float, ready_at: float) -> HostMemory:
        """Each process's RSS (while vLLM starts, a share of its base), swap and PSS; the host's
        available memory, free swap and cgroup usage; whether it is out of memory."""
        sc, rng, noise = self.sc, self.rng, self.sc.noise

        def rss(p: ProcessMemory) -> float:
            if not ready:
                return p.base * (0.3 + 0.7 * starting_share)
            uptime = t - ready_at
            warm = noise.host_warmup_mib.get(p.role, 0.0) * MIB * (1 - math.exp(-uptime / noise.host_warmup_tau_s))
            load = noise.host_per_running_kib.get(p.role, 0.0) * 1024 * running
            jitter = rng.uniform(-1, 1) * noise.host_jitter_mib * MIB
            shape = (self.sawtooth.get(p.role, 0.0) + self.step_mib(t, p.role)) * MIB
            return p.base + warm + p.plateau + load + p.offset + p.leak_hot + jitter + shape

        rss_now = {(p.role, p.rank): rss(p) for p in self.procs}
        swap_now = {(p.role, p.rank): p.swap for p in self.procs}
        host = sc.host
        used_by_vllm = sum(rss_now.values())
        swapped = sum(swap_now.values())
        wander = 256 * MIB * math.sin(2 * math.pi * (t - self.start) / 86400 + self.wander_phase)
        available = host.mem_total_bytes - host.other_used_bytes - used_by_vllm + wander
        swap_free = max(0.0, host.swap_total_bytes - swapped - 64 * MIB) if host.swap_total_bytes else 0.0
        pss_now = {k: max(0.0, v - 180 * MIB) for k, v in rss_now.items()}
        cgroup_usage = used_by_vllm + 1 * GIB
        oom = available + max(0.0, swap_free) <= 0 or (
            host.cgroup_limit_bytes and cgroup_usage >= host.cgroup_limit_bytes
        )
        return HostMemory(rss_now, swap_now, pss_now, available, swap_free, cgroup_usage, bool(oom))
