"""The healthy shapes and hour-shifted leaks of the scenario library do what their names say (short
simulations; the 30-day replays are `make bench-detection`)."""

from __future__ import annotations

import calendar
import itertools
import time

from leakwatch.scenarios import library
from leakwatch.scenarios.simulate import simulate
from leakwatch.scenarios.simulation_result import HEALER_RESTART

DCGM_USED = "DCGM_FI_DEV_FB_USED"


class Collect:
    def __init__(self, prefix: str, contains: str = ""):
        self.prefix = prefix
        self.contains = contains
        self.values: list[tuple[float, float]] = []

    def tick(self, ts, samples):
        for series, value in samples:
            if series.startswith(self.prefix) and self.contains in series:
                self.values.append((ts, value))


def _gpu(name: str, days: float, seed: int | None = None, scenario=None):
    sink = Collect(DCGM_USED)
    result = simulate(scenario or library.get(name, days, seed), sink)
    return result, sink.values


def test_sawtooth_creeps_in_segments_and_falls_back_every_period():
    _, used = _gpu("healthy_sawtooth", 0.5)
    ready = [(t, v) for t, v in used if v > 20000]
    falls = [(t, a - b) for (_, a), (t, b) in itertools.pairwise(ready) if a - b >= 40]
    # Every 2 h the cache is released (12 h: five or six releases), and readings move in 20 MiB segments
    # (plus the allocator's own noise and one-time steps).
    assert 5 <= len(falls) <= 6, falls
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(falls)]
    assert all(abs(g - 7200) <= 60 for g in gaps), gaps
    # The release timer is not aligned to the hour.
    assert any(t % 3600 not in (0, 60) for t, _ in falls)


def test_persistent_step_stays_and_arrivals_come_in_clumps():
    scenario = library.get("healthy_step_clumped", 2.8)
    result, used = _gpu("healthy_step_clumped", 2.8)
    served = result.requests_served
    per_tick = [b - a for (_, a), (_, b) in itertools.pairwise(served) if b > a]
    assert per_tick and all(n % 8 == 0 for n in per_tick)
    step_at = result.start + scenario.noise.step_at_s
    before = [v for t, v in used if step_at - 3600 <= t < step_at]
    after = [v for t, v in used if t >= step_at + 60]
    step = scenario.noise.step_mib["gpu"]
    assert min(after) - max(before) > 0.8 * step  # the step, less the noise's swing
    assert max(after) - min(after) < step  # and flat afterwards


def test_leaks_start_at_the_hour_asked_and_count_their_requests():
    for hour in library.LEAK_HOURS:
        scenario = library.leak_at_hour(hour, 2.0)
        [leak] = scenario.leaks
        starts = time.gmtime(
            calendar.timegm(time.strptime(scenario.start_date, "%Y-%m-%d")) + scenario.start_hour * 3600 + leak.start_s
        )
        assert (starts.tm_hour, starts.tm_min) == (int(hour), 0), (hour, starts)
        assert leak.start_s >= 2 * 3600 and leak.segment_mib == 20
    # Midnight, the quietest start: the history still holds enough leaking requests for the target.
    scenario = library.leak_at_hour(0.0, 2.0)
    result, _ = _gpu(scenario.name, None, scenario=scenario)
    assert time.gmtime(result.leak_start).tm_hour == 0
    assert result.requests_between(result.leak_start, result.end) > library.LEAK_REQUEST_TARGET


def test_a_fast_leak_survives_the_healers_restart_and_runs_the_host_out_of_memory():
    """fast_host_leak_after_heal: the healer's restart at 1 h frees the API server's leaked memory,
    the leak (in vLLM's code) comes back with the traffic, and the host runs out ~110 minutes later;
    the bench measures the fast-leak lead from that restart to that OOM kill."""
    scenario = library.get("fast_host_leak_after_heal")
    sink = Collect("node_memory_MemAvailable_bytes{")
    result = simulate(scenario, sink)
    (heal,) = [t for t, text in result.events if text == HEALER_RESTART]
    assert heal == result.start + 3600
    oom = result.out_of_memory_after(heal)
    assert oom is not None and 90 * 60 < oom - heal < 130 * 60, (oom - heal) / 60
    assert result.out_of_memory_after(result.start) == oom  # nothing ran out before the heal
    available = dict(sink.values)
    # The restart gave the leaked memory back: more available right after it than just before.
    assert available[heal + 300] - available[heal - 60] > 4 * 2**30


def test_the_healthy_fast_host_fills_its_cache_after_each_start_and_stops():
    """healthy_fast_host's worker grows ~700 MiB within minutes of each start, then stays: what a
    fast-leak rule must sit through."""
    scenario = library.get("healthy_fast_host", days=1.2)
    sink = Collect("leakwatch_process_anonymous_memory_bytes{", 'role="worker"')
    result = simulate(scenario, sink)
    assert result.out_of_memory_after(result.start) is None and result.leak_start is None
    ready = result.start + scenario.restart_downtime_s
    at = dict(sink.values)
    grown = at[ready + 1800] - at[ready + 60]
    assert 500 * 2**20 < grown < 800 * 2**20, grown / 2**20
    assert abs(at[ready + 4 * 3600] - at[ready + 1800]) < 120 * 2**20
