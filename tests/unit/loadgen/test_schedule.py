"""The open-loop schedule: Poisson at the configured rate, diurnal by thinning, split across workers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from leakwatch.loadgen.schedule import ArrivalProcess, worker_share


def test_gaps_are_exponential_at_the_configured_rate():
    process = ArrivalProcess(requests_per_day=1000, compression=720, duration_s=86400 * 3, seed=7)
    times = np.fromiter(process.arrivals(), float)
    assert process.mean_rate == pytest.approx(1000 / 86400 * 720)
    assert len(times) == pytest.approx(process.expected_count(), rel=0.05)
    gaps = np.diff(times)
    result = stats.kstest(gaps, "expon", args=(0, 1 / process.mean_rate))
    assert result.pvalue > 0.01, result
    # The test has power: the same gaps do not pass for a rate 10 % off.
    assert stats.kstest(gaps, "expon", args=(0, 1.1 / process.mean_rate)).pvalue < 0.01


def test_the_schedule_is_fixed_by_its_seed_and_ends_at_the_duration():
    a = ArrivalProcess(requests_per_day=5000, compression=100, duration_s=3600, seed=1)
    assert list(a.arrivals()) == list(a.arrivals())
    assert list(a.arrivals()) != list(
        ArrivalProcess(requests_per_day=5000, compression=100, duration_s=3600, seed=2).arrivals()
    )
    times = list(a.arrivals())
    assert times == sorted(times) and times[0] > 0 and times[-1] < a.real_duration_s == 36


def test_diurnal_modulation_follows_the_daily_curve():
    process = ArrivalProcess(
        requests_per_day=200000, compression=1, duration_s=86400, diurnal_amplitude=0.6, peak_hour=14, seed=3
    )
    hours = np.fromiter(process.arrivals(), float) // 3600
    counts = np.bincount(hours.astype(int), minlength=24)
    expected = np.array([process.rate_at(h * 3600 + 1800) * 3600 for h in range(24)])
    assert counts.argmax() in (13, 14, 15) and counts.argmin() in (1, 2, 3)
    assert counts.sum() == pytest.approx(200000, rel=0.02)  # the mean rate is kept
    chi2 = stats.chisquare(counts, expected * counts.sum() / expected.sum())
    assert chi2.pvalue > 0.001, chi2
    assert process.relative_rate(14 * 3600) == pytest.approx(1.6)


def test_workers_split_the_schedule_without_overlap():
    process = ArrivalProcess(requests_per_day=10000, compression=50, duration_s=7200, seed=5)
    whole = list(process.arrivals())
    parts = [list(worker_share(process.arrivals(), i, 3)) for i in range(3)]
    assert sorted(t for part in parts for t in part) == whole
    assert [len(p) for p in parts] == [math.ceil((len(whole) - i) / 3) for i in range(3)]
    with pytest.raises(ValueError):
        worker_share(iter([]), 3, 3)


@pytest.mark.parametrize(
    "kwargs", [dict(requests_per_day=0), dict(compression=-1), dict(duration_s=0), dict(diurnal_amplitude=1.5)]
)
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        ArrivalProcess(**kwargs)
