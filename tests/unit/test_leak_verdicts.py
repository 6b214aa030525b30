"""Verdicts on the traffic users actually send (issue 19): steady, bursty (150 requests every ~30 s)
and idle-gapped, with a 1 MiB/request leak in each vLLM process role and on the GPU in turn. The
leaking series is LEAK, every other series NO-LEAK; when the data cannot decide, the verdict says how
much more would, and that much more does decide."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leakwatch.leakcheck import verdict_thresholds
from leakwatch.leakcheck.analysis import INCONCLUSIVE, LEAK, NO_LEAK, Measures, _decide, analyse
from leakwatch.leakcheck.estimator import Interval
from leakwatch.leakcheck.series import MemorySeries
from tests.support.leak_scenarios import MB, make

CFG = verdict_thresholds.load()
MIB = 1 << 20
# What requests in flight hold at a scrape (tokenizer and sampler buffers), released after: the API
# server the most; on the GPU nothing (vLLM preallocates its KV cache).
TRANSIENT_BYTES = {"host": 2 * MB, "gpu": 0.0, "gpu_process": 0.0}
# (kind, key, labels): one series per place the exporter measures.
PLACES = [
    ("host", "host/api_server", {"role": "api_server"}),
    ("host", "host/engine_core", {"role": "engine_core"}),
    ("host", "host/worker/0", {"role": "worker", "rank": "0"}),
    ("gpu", "gpu/0", {"gpu": "0"}),
    ("gpu_process", "gpu_process/0/worker/0", {"gpu": "0", "role": "worker", "rank": "0"}),
]
# Twelve minutes as `leakwatch check --window 12m` sees a native stack (15 s scrapes).
TRAFFIC = {
    "steady": dict(requests_per_s=3.5),
    "bursty": dict(bursts=(150, 30), burst_jitter=0.3),
    # Bursts, then five minutes without a request: memory against time is a staircase with a long
    # tread, whose growth/hour interval is unbounded (the shape issue 19 measured).
    "idle-gapped": dict(bursts=(150, 30), burst_jitter=0.3, idle=((200, 520),)),
}


def stack_history(traffic: str, leaking: str | None, seed: int, hours: float = 0.2):
    """One request timeline and a memory series per place; only `leaking` keeps 1 MiB per request."""
    base = make(hours=hours, step=15, bytes_per_request=0, noise=1 * MB, ar=0.5, seed=seed, **TRAFFIC[traffic])
    series = []
    rng = np.random.default_rng(seed + 1000)
    for i, (kind, key, labels) in enumerate(PLACES):
        # Each place its own level. A healthy process's memory is a staircase of page faults, plus
        # what requests in flight hold at a scrape (freed after the burst); the leaking one also keeps
        # the injected bytes per request.
        pages = 4096.0 * np.cumsum(rng.choice([-1, 0, 0, 0, 1], size=len(base.t)))
        in_flight = np.diff(base.requests, prepend=base.requests[0]) > 0
        transient = in_flight * rng.uniform(0, TRANSIENT_BYTES[kind], len(base.t))
        values = (1_000 + 300 * i) * MB + pages + transient
        if key == leaking:
            values = values + MIB * base.requests
        series.append(MemorySeries(key, kind, labels, "synthetic", base.t, values, headroom_bytes=8e9))
    result = analyse(base.timeline(), series, CFG, start=float(base.t[0]), end=float(base.t[-1]), step=15.0)
    return base, result


@pytest.mark.parametrize("traffic", list(TRAFFIC))
@pytest.mark.parametrize("leaking", [key for _, key, _ in PLACES])
def test_a_leak_in_one_place_is_leak_there_and_no_leak_elsewhere(traffic, leaking):
    for seed in (1, 2):
        _, result = stack_history(traffic, leaking, seed)
        verdicts = {r.series.key: r.verdict for r in result.series}
        reasons = {r.series.key: r.reason for r in result.series}
        assert verdicts == {key: LEAK if key == leaking else NO_LEAK for _, key, _ in PLACES}, reasons
        leak = next(r for r in result.series if r.series.key == leaking)
        assert leak.bytes_per_request.estimate == pytest.approx(MIB, rel=0.02)
        assert result.verdict == LEAK and result.exit_code == 1


def test_idle_gapped_leak_is_leak_with_a_bounded_growth_interval_and_a_request_rate_forecast():
    """The measured case: a staircase leak with a five-minute idle tread. Its rank-based intervals
    alone were unbounded (ranks know no magnitude); the residuals' wander bounds them."""
    _base, result = stack_history("idle-gapped", "gpu/0", seed=1)
    r = next(r for r in result.series if r.series.key == "gpu/0")
    assert r.verdict == LEAK and r.decided_by in ("bytes_per_request", "both"), r.reason
    assert r.bytes_per_request.high - r.bytes_per_request.low < 0.01 * MIB
    assert math.isfinite(r.growth_per_hour.high) and r.growth_per_hour.low > CFG.min_growth_bytes_per_hour
    assert r.exhaustion_basis == "request_rate"
    assert r.hours_to_exhaustion == pytest.approx(8e9 / (r.bytes_per_request.estimate * r.recent_requests_per_hour))


def _measures(bpr, gph, *, served=2500.0, minutes=12.0):
    rate = served / minutes
    # The later part: the same estimates, intervals unknown (so the plateau rule does not decide).
    recent = Interval(bpr.estimate, -math.inf, math.inf)
    recent_gph = Interval(gph.estimate, -math.inf, math.inf)
    return Measures(
        bpr=bpr,
        gph=gph,
        recent=recent,
        recent_gph=recent_gph,
        recent_served=served / 2,
        served=served,
        window_minutes=minutes,
        requests_per_minute=rate,
        requests_per_hour=rate * 60,
    )


def test_the_per_request_interval_decides_alone_when_growth_per_hour_is_unbounded():
    """Issue 19's numbers: 1.049 MB/request [1.049 .. 1.051 MB], growth/hour interval unbounded. The
    old rule waited for both and said INCONCLUSIVE."""
    d = _decide(CFG, _measures(Interval(1.049 * MB, 1.049 * MB, 1.051 * MB), Interval(14e9, -math.inf, math.inf)))
    assert (d.verdict, d.decided_by) == (LEAK, "bytes_per_request"), d.reason
    d = _decide(CFG, _measures(Interval(1.049 * MB, -math.inf, math.inf), Interval(14e9, 12e9, 16e9)))
    assert (d.verdict, d.decided_by) == (LEAK, "growth_per_hour"), d.reason


def test_no_leak_needs_both_measures_below():
    below_req = Interval(0.0, -50.0, 50.0)
    d = _decide(CFG, _measures(below_req, Interval(5e6, -math.inf, math.inf)))
    assert d.verdict == INCONCLUSIVE, d.reason
    d = _decide(CFG, _measures(below_req, Interval(0.0, -1e6, 1e6)))
    assert d.verdict == NO_LEAK, d.reason


def test_growth_per_hour_alone_decides_a_leak_that_no_request_explains():
    """Memory that grows with time (a timer thread's cache) whatever the traffic: the per-request
    fit is muddled by idle stretches, the per-hour interval is well above the threshold."""
    s = make(hours=2, step=15, bytes_per_request=0, noise=2 * MB, bursts=(20, 300), burst_jitter=0.8, seed=5)
    s.memory["api_server"] = s.memory["api_server"] + 200 * MB * (s.t - s.t[0]) / 3600.0
    r = analyse(s.timeline(), s.series(), CFG, start=float(s.t[0]), end=float(s.t[-1]), step=15.0).series[0]
    assert r.verdict == LEAK, r.reason
    assert r.decided_by in ("growth_per_hour", "both")
    assert r.growth_per_hour.estimate == pytest.approx(200 * MB, rel=0.1)


def test_growth_per_hour_alone_keeps_a_flat_per_request_fit_from_no_leak():
    """A flat per-request fit is not enough while memory still climbs against time."""
    s = make(hours=2, step=15, bytes_per_request=0, noise=2 * MB, bursts=(20, 300), burst_jitter=0.8, seed=5)
    s.memory["api_server"] = s.memory["api_server"] + 200 * MB * (s.t - s.t[0]) / 3600.0
    r = analyse(s.timeline(), s.series(), CFG, start=float(s.t[0]), end=float(s.t[-1]), step=15.0).series[0]
    assert r.verdict != NO_LEAK


def test_inconclusive_says_how_much_more_would_decide_and_that_much_more_does():
    weak = dict(requests_per_s=0.02, bytes_per_request=0.3 * MB, noise=20 * MB, ar=0.5)
    short = make(hours=1, step=30, seed=13, **weak)
    r = analyse(
        short.timeline(), short.series(), CFG, start=float(short.t[0]), end=float(short.t[-1]), step=30.0
    ).series[0]
    assert r.verdict == INCONCLUSIVE, r.reason
    assert r.more_minutes is not None and math.isfinite(r.more_minutes) and r.more_minutes > 0, r.reason
    assert "more requests" in r.reason and "would decide LEAK" in r.reason
    # Twice the suggested extra (the forecast assumes the estimate holds), on fresh noise.
    hours = 1 + 2 * r.more_minutes / 60.0
    decided = 0
    for seed in (31, 32, 33):
        longer = make(hours=hours, step=30, seed=seed, **weak)
        res = analyse(
            longer.timeline(), longer.series(), CFG, start=float(longer.t[0]), end=float(longer.t[-1]), step=30.0
        ).series[0]
        decided += res.verdict == LEAK
    assert decided >= 2, hours


def test_too_few_requests_says_how_many_more():
    s = make(hours=0.5, step=15, requests_per_s=0.01, bytes_per_request=1 * MB, noise=1 * MB, seed=12)
    r = analyse(s.timeline(), s.series(), CFG, start=float(s.t[0]), end=float(s.t[-1]), step=15.0).series[0]
    assert r.verdict == INCONCLUSIVE
    assert r.more_requests == pytest.approx(CFG.min_requests - r.requests_served)
    assert f"{CFG.min_requests - r.requests_served:.0f} more" in r.reason
