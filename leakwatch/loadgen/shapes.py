"""How many Locust users run at each moment of the two load shapes (pure, so tests need no Locust).

- high concurrency: closed-loop users, one stream each; a step ramp to N streams, a hold, and the
  same steps back down. N defaults to 256, the articles' --max-num-seqs.
- production day: a fixed pool of users that take arrival times from one shared open-loop schedule;
  the pool only caps how many requests can be in flight at once (when it is exhausted the client
  falls behind the schedule, and that lateness is reported as client queue delay).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SHAPES = ("production-day", "high-concurrency", "steady")


@dataclass(frozen=True)
class HighConcurrencyPlan:
    streams: int = 256
    step: int = 32
    step_s: float = 10.0
    hold_s: float = 60.0

    def __post_init__(self):
        if self.streams < 1 or self.step < 1:
            raise ValueError(f"streams and ramp step must be >= 1 (got {self.streams}, {self.step})")
        if self.step_s <= 0 or self.hold_s < 0:
            raise ValueError(f"step duration must be > 0 and hold >= 0 (got {self.step_s}, {self.hold_s})")

    @property
    def steps(self) -> int:
        return math.ceil(self.streams / self.step)

    @property
    def ramp_s(self) -> float:
        return self.steps * self.step_s

    @property
    def duration_s(self) -> float:
        return 2 * self.ramp_s + self.hold_s

    @property
    def spawn_rate(self) -> float:
        """Users per second: a step starts within about half a second (Locust warns above 100/s)."""
        return float(min(100, max(1, self.step * 2)))

    def users_at(self, t: float) -> int | None:
        """Users wanted t seconds into the test; None once the ramp-down is over."""
        if t < self.ramp_s:
            return min(self.streams, (int(t // self.step_s) + 1) * self.step)
        if t < self.ramp_s + self.hold_s:
            return self.streams
        down = int((t - self.ramp_s - self.hold_s) // self.step_s) + 1
        left = self.streams - down * self.step
        return left if left > 0 else None

    def phase_at(self, t: float) -> str:
        if t < self.ramp_s:
            return "ramp-up"
        if t < self.ramp_s + self.hold_s:
            return "hold"
        return "ramp-down" if self.users_at(t) else "done"


@dataclass(frozen=True)
class ProductionDayPlan:
    pool: int = 64
    real_duration_s: float = 86400.0
    # After the last arrival, how long in-flight requests may take to finish before users stop.
    drain_s: float = 120.0

    def __post_init__(self):
        if self.pool < 1:
            raise ValueError(f"the user pool must be >= 1 (got {self.pool})")

    @property
    def spawn_rate(self) -> float:
        return float(self.pool)

    def users_at(self, t: float, in_flight: int = 0) -> int | None:
        if t < self.real_duration_s:
            return self.pool
        if in_flight > 0 and t < self.real_duration_s + self.drain_s:
            return self.pool
        return None
