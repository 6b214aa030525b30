"""Open-loop arrival schedules: when each request should be sent, independent of response times.

A production day is a Poisson process (exponential gaps) at `requests_per_day`, optionally modulated
by a daily cosine (diurnal traffic) through thinning, and optionally compressed in time so a day can
run in minutes. The schedule is generated once from a seed, so every run and every worker sees the
same arrival times; a worker takes every k-th arrival, and the workers together send exactly the
global schedule.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class ArrivalProcess:
    requests_per_day: float = 1000.0
    # Simulated seconds per real second: 720 runs a 24 h day in 2 minutes.
    compression: float = 1.0
    # Simulated span of the schedule (a day by default; 72 h reproduces the articles' leak window).
    duration_s: float = SECONDS_PER_DAY
    # 0 = constant rate; 0.5 = the rate swings between 0.5x and 1.5x the mean over a day.
    diurnal_amplitude: float = 0.0
    peak_hour: float = 14.0
    # Simulated hour of day at which the schedule starts.
    start_hour: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if self.requests_per_day <= 0:
            raise ValueError(f"requests per day must be positive, not {self.requests_per_day}")
        if self.compression <= 0:
            raise ValueError(f"time compression must be positive, not {self.compression}")
        if self.duration_s <= 0:
            raise ValueError(f"the schedule's duration must be positive, not {self.duration_s}")
        if not 0 <= self.diurnal_amplitude <= 1:
            raise ValueError(f"diurnal amplitude must be within 0..1, not {self.diurnal_amplitude}")

    @property
    def mean_rate(self) -> float:
        """Requests per real second, averaged over a day."""
        return self.requests_per_day / SECONDS_PER_DAY * self.compression

    @property
    def real_duration_s(self) -> float:
        return self.duration_s / self.compression

    def relative_rate(self, real_t: float) -> float:
        """The rate at real time t as a multiple of the mean (1 without diurnal modulation)."""
        if not self.diurnal_amplitude:
            return 1.0
        hour = (self.start_hour + real_t * self.compression / 3600.0) % 24.0
        return 1.0 + self.diurnal_amplitude * math.cos(2 * math.pi * (hour - self.peak_hour) / 24.0)

    def rate_at(self, real_t: float) -> float:
        """Requests per real second at real time t."""
        return self.mean_rate * self.relative_rate(real_t)

    def expected_count(self) -> float:
        """Expected number of arrivals over the whole schedule."""
        if not self.diurnal_amplitude:
            return self.mean_rate * self.real_duration_s
        steps = 10000
        dt = self.real_duration_s / steps
        return sum(self.rate_at((i + 0.5) * dt) * dt for i in range(steps))

    def arrivals(self) -> Iterator[float]:
        """Arrival times in real seconds since the start, ascending, ending at the duration.

        Homogeneous Poisson: exponential gaps at the mean rate. Diurnal: candidates at the peak rate,
        each kept with probability rate(t) / peak rate (Lewis-Shedler thinning), which yields a
        non-homogeneous Poisson process with exactly that rate.
        """
        rng = random.Random(self.seed)
        peak = self.mean_rate * (1.0 + self.diurnal_amplitude)
        end = self.real_duration_s
        t = 0.0
        while True:
            t += rng.expovariate(peak)
            if t >= end:
                return
            if self.diurnal_amplitude and rng.random() * (1.0 + self.diurnal_amplitude) > self.relative_rate(t):
                continue
            yield t


def worker_share(arrivals: Iterator[float], index: int, count: int) -> Iterator[float]:
    """The arrivals worker `index` of `count` sends: every count-th one, so the union is the whole."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"worker index {index} is outside 0..{count - 1}")
    return islice(arrivals, index, None, count)
