"""What a simulation leaves besides its samples: the SimulationResult record and the event texts.

The simulator hands each tick's samples to a `Sink` as it goes; what the backtester and the detection
bench need afterwards (when the leak started, the events such as restarts and out-of-memory crashes,
the card's use and the requests served each tick) is kept in a `SimulationResult`, whose queries
answer "how many requests in between" and "when did memory first run out". Kept apart from the
simulator's models so the backtest and the bench read results and event texts without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# Event texts the bench reads: where the memory ran out, and the healer's restarts.
GPU_OUT_OF_MEMORY = "GPU out of memory: vLLM crashes and is restarted"
HOST_OUT_OF_MEMORY = "host out of memory: the OOM killer ends vLLM, which is restarted"
HEALER_RESTART = "the healer drains and restarts vLLM"


class Sink(Protocol):
    def tick(self, ts: float, samples: list[tuple[str, float]]) -> None: ...


@dataclass
class SimulationResult:
    name: str
    start: float
    end: float
    resolution_s: float
    leak_start: float | None = None  # first tick at which a leak retained memory
    events: list[tuple[float, str]] = field(default_factory=list)
    gpu_headroom_bytes: float | None = None  # card total minus used when the leak started
    gpu_used_bytes: list[tuple[float, float]] = field(default_factory=list)  # card 0, each tick
    # Requests finished since the scenario started (across restarts), each tick: detection is
    # also measured in requests served after the leak start.
    requests_served: list[tuple[float, float]] = field(default_factory=list)

    def requests_between(self, since: float, until: float) -> float:
        """Requests finished in (since, until]."""

        def at(ts: float) -> float:
            served = 0.0
            for t, total in self.requests_served:
                if t > ts:
                    break
                served = total
            return served

        return at(until) - at(since)

    def first_event(self, texts: tuple[str, ...], after: float) -> float | None:
        """When the first of these events happened at or after `after`."""
        return min((t for t, text in self.events if text in texts and t >= after), default=None)

    def out_of_memory_after(self, after: float) -> float | None:
        return self.first_event((GPU_OUT_OF_MEMORY, HOST_OUT_OF_MEMORY), after)
