"""The leak estimator on synthetic histories with a known answer: noise, autocorrelation, restarts,
gaps, warm-up, a step that plateaus, too little data, time compression."""

from __future__ import annotations

import math

import numpy as np
import pytest

from leakwatch.leakcheck import verdict_thresholds
from leakwatch.leakcheck.analysis import INCONCLUSIVE, LEAK, NO_LEAK, analyse
from leakwatch.leakcheck.estimator import theil_sen
from tests.support.leak_scenarios import MB, make

CFG = verdict_thresholds.load()


def check(s, *, time_compression=1.0, cfg=CFG, headroom=None, with_start_time=True):
    return analyse(
        s.timeline(with_start_time),
        s.series(headroom),
        cfg,
        start=float(s.t[0]),
        end=float(s.t[-1]),
        step=float(s.t[1] - s.t[0]),
        time_compression=time_compression,
    )


def only(result):
    assert len(result.series) == 1
    return result.series[0]


def test_theil_sen_recovers_a_slope_and_ignores_outliers():
    rng = np.random.default_rng(1)
    x = np.arange(200.0)
    y = 3.0 * x + rng.normal(0, 1, 200)
    y[::20] += 500  # 5 % wild outliers move least squares, not the median slope
    fit = theil_sen(x, y)
    assert fit.slope.low < 3.0 < fit.slope.high
    assert abs(fit.slope.estimate - 3.0) < 0.05
    assert abs(np.polyfit(x, y, 1)[0] - 3.0) > abs(fit.slope.estimate - 3.0)


def test_theil_sen_never_pairs_points_across_segments():
    # A process that grew to 2 GB, restarted (counter and memory back down), served 100 more requests.
    x = np.concatenate([np.arange(50.0), np.arange(100.0)])
    y = np.concatenate([2000 + 2 * np.arange(50.0), 10 + 2 * np.arange(100.0)])
    seg = np.repeat([0, 1], [50, 100])
    within = theil_sen(x, y, seg).slope
    assert within.low == within.estimate == within.high == pytest.approx(2.0)
    # Pairs across the restart would add slopes of about -20 and blow the interval open.
    assert theil_sen(x, y).slope.low < 0


def test_interval_covers_the_truth_under_autocorrelated_noise():
    """95 % intervals must cover a zero slope ~95 % of the time even when noise is AR(1); without the
    Hamed-Rao correction they cover far less."""
    rng = np.random.default_rng(7)
    covered = 0
    runs = 150
    for _ in range(runs):
        n = 150
        e = np.empty(n)
        e[0] = rng.normal()
        for i in range(1, n):
            e[i] = 0.8 * e[i - 1] + rng.normal() * math.sqrt(1 - 0.64)
        fit = theil_sen(np.arange(n, dtype=float), e)
        covered += fit.slope.low <= 0.0 <= fit.slope.high
    assert covered / runs >= 0.88, covered / runs


def test_a_quiet_process_with_tied_values_gets_a_finite_interval():
    """A worker whose memory sits on a few values (as RSS does between page faults) is flat, not
    'autocorrelated': ties must not blow the interval open."""
    rng = np.random.default_rng(2)
    t = np.arange(0.0, 130.0, 2.0)
    y = 733_600_000 + 4096 * rng.choice([0, 0, 0, 0, 1], size=len(t))
    fit = theil_sen(t, y)
    assert math.isfinite(fit.slope.low) and math.isfinite(fit.slope.high)
    assert fit.slope.low <= 0 <= fit.slope.high


def test_a_staircase_that_hardly_moves_is_no_leak_by_its_range():
    """A worker's RSS over two minutes of a drill: a few page-sized steps up, perfectly
    autocorrelated, so its rank-based intervals are wide; its whole range still rules a leak out."""
    s = make(hours=2, step=60, requests_per_s=0.05, bytes_per_request=0, noise=0, seed=18)
    steps = np.cumsum(np.random.default_rng(18).random(len(s.t)) < 0.1) * 4096.0
    s.memory["api_server"] = 1.8e9 + steps
    r = only(check(s))
    assert r.verdict == NO_LEAK, r.reason
    assert "whole range" in r.reason


def test_article_a_leak_is_estimated_within_five_percent():
    s = make(hours=24, step=60, bytes_per_request=6 * MB, noise=30 * MB, ar=0.5, seed=3)
    r = only(check(s))
    assert r.verdict == LEAK, r.reason
    assert r.bytes_per_request.estimate == pytest.approx(6 * MB, rel=0.05)
    assert r.bytes_per_request.low < 6 * MB < r.bytes_per_request.high
    # ~1000 requests/day at 6 MB each: ~250 MB per hour.
    assert r.growth_per_hour.estimate == pytest.approx(6 * MB * 1000 / 24, rel=0.25)


def test_restarts_split_the_fit_instead_of_hiding_the_leak():
    s = make(
        hours=12,
        requests_per_s=0.05,
        bytes_per_request=1 * MB,
        noise=15 * MB,
        restarts_at=(3 * 3600, 6 * 3600, 9 * 3600),
        warmup_s=300,
        warmup_bytes=400 * MB,
        seed=4,
    )
    result = check(s)
    r = only(result)
    assert result.segments.restarts == 3
    assert r.verdict == LEAK, r.reason
    assert r.bytes_per_request.estimate == pytest.approx(1 * MB, rel=0.05)


def test_restarts_without_start_time_are_found_from_counter_resets():
    s = make(hours=8, requests_per_s=0.05, bytes_per_request=1 * MB, noise=15 * MB, restarts_at=(4 * 3600,), seed=5)
    result = check(s, with_start_time=False)
    assert result.segments.restarts == 1
    assert only(result).bytes_per_request.estimate == pytest.approx(1 * MB, rel=0.05)


def test_a_gap_in_the_data_is_tolerated():
    s = make(hours=8, requests_per_s=0.05, bytes_per_request=1 * MB, noise=15 * MB, seed=6)
    holed = s.drop(s.t[0] + 3 * 3600, s.t[0] + 4 * 3600)
    result = check(holed)
    assert result.segments.restarts == 0
    assert len(result.segments.boundaries) == 1  # the hole split it; it is not a restart
    r = only(result)
    assert r.verdict == LEAK
    assert r.bytes_per_request.estimate == pytest.approx(1 * MB, rel=0.05)


def test_a_healthy_server_with_a_warm_up_step_is_no_leak():
    # vLLM's warm-up takes 400 MB in the first 10 minutes after each (re)start, then stays flat.
    s = make(
        hours=12,
        requests_per_s=0.05,
        bytes_per_request=0,
        noise=15 * MB,
        ar=0.5,
        restarts_at=(6 * 3600,),
        warmup_s=600,
        warmup_bytes=400 * MB,
        lead_in=0,
        seed=8,
    )
    r = only(check(s))
    assert r.verdict == NO_LEAK, r.reason
    assert abs(r.bytes_per_request.estimate) < 10_000


def test_warm_up_that_is_not_skipped_would_bias_the_estimate():
    """The test above passes because warm-up is skipped, not by luck."""
    s = make(
        hours=2,
        requests_per_s=0.5,
        bytes_per_request=0,
        noise=5 * MB,
        warmup_s=1800,
        warmup_bytes=400 * MB,
        lead_in=0,
        seed=9,
    )
    no_skip = only(check(s, cfg=CFG.with_overrides(warmup_seconds=0.0, warmup_requests=0.0)))
    skipped = only(check(s, cfg=CFG.with_overrides(warmup_seconds=1800.0)))
    assert no_skip.points > skipped.points
    assert no_skip.bytes_per_request.estimate > 5_000
    assert no_skip.bytes_per_request.estimate > 10 * abs(skipped.bytes_per_request.estimate)
    assert skipped.verdict == NO_LEAK


def test_a_step_that_plateaus_is_not_a_leak():
    # The first long request grows a cache by 300 MB an hour into the window; nothing grows after.
    s = make(
        hours=8, requests_per_s=0.05, bytes_per_request=0, noise=10 * MB, step_at=3600, step_bytes=300 * MB, seed=10
    )
    r = only(check(s))
    assert r.bytes_per_request.estimate > 1000  # the whole-window fit sees growth ...
    assert r.verdict == NO_LEAK, r.reason  # ... but the later part is flat
    assert "later part" in r.reason


def test_the_exporter_baseline_decides_warm_up_when_present():
    s = make(
        hours=4,
        requests_per_s=0.2,
        bytes_per_request=0,
        noise=2 * MB,
        warmup_s=1800,
        warmup_bytes=300 * MB,
        lead_in=0,
        seed=11,
    )
    s.baseline_ready = np.where(s.t - s.t[0] >= 1800, 1.0, 0.0)
    assert only(check(s, cfg=CFG.with_overrides(warmup_seconds=0.0, warmup_requests=0.0))).verdict == NO_LEAK


def test_too_little_data_is_inconclusive():
    s = make(hours=0.05, step=15, requests_per_s=0.01, bytes_per_request=1 * MB, seed=12)
    r = only(check(s))
    assert r.verdict == INCONCLUSIVE
    assert "points" in r.reason or "requests" in r.reason
    assert check(s).exit_code == 3


def test_a_weak_signal_in_a_short_window_is_inconclusive():
    s = make(hours=1, requests_per_s=1000 / 86400, bytes_per_request=0.5 * MB, noise=40 * MB, ar=0.7, seed=13)
    assert only(check(s)).verdict == INCONCLUSIVE


def test_time_to_exhaustion_from_headroom_and_growth():
    s = make(hours=24, step=60, requests_per_s=1000 / 86400, bytes_per_request=6 * MB, noise=10 * MB, seed=14)
    r = only(check(s, headroom=2_000 * MB))
    # A per-request leak grows with the traffic: the forecast is the recent request rate's growth.
    assert r.exhaustion_basis == "request_rate"
    growth = r.bytes_per_request.estimate * r.recent_requests_per_hour
    assert r.hours_to_exhaustion == pytest.approx(2_000 * MB / growth)
    assert 5 < r.hours_to_exhaustion < 12  # ~2 GB at ~250 MB/h
    assert r.recent_requests_per_hour == pytest.approx(1000 / 24, rel=0.25)


def test_time_compression_scales_growth_to_production_hours():
    """A drill running a day in 14.4 minutes (time compression 100) reports production-hour figures."""
    fast = make(hours=0.24, step=2, requests_per_s=100 * 1000 / 86400, bytes_per_request=1 * MB, noise=2 * MB, seed=15)
    r = only(check(fast, time_compression=100))
    assert r.verdict == LEAK, r.reason
    assert r.bytes_per_request.estimate == pytest.approx(1 * MB, rel=0.05)
    assert r.growth_per_hour.estimate == pytest.approx(1 * MB * 1000 / 24, rel=0.2)


def test_overall_verdict_and_exit_codes():
    leak = make(hours=6, requests_per_s=0.05, bytes_per_request=1 * MB, noise=5 * MB, seed=16)
    leak.memory["worker"] = make(hours=6, requests_per_s=0.05, bytes_per_request=0, noise=5 * MB, seed=16).memory[
        "api_server"
    ]
    result = check(leak)
    assert {r.series.key: r.verdict for r in result.series} == {"host/api_server": LEAK, "host/worker": NO_LEAK}
    assert result.verdict == LEAK and result.exit_code == 1
    healthy = make(hours=6, requests_per_s=0.05, bytes_per_request=0, noise=5 * MB, seed=17)
    assert check(healthy).verdict == NO_LEAK and check(healthy).exit_code == 0
