"""`leakwatch check --compare`: a stable and a canary deployment's bytes per request side by side, on
synthetic histories with a known leak on one side (tests/support/leak_scenarios.py). The projections (how
many more requests, the smallest canary share) are checked by simulating the traffic they name."""

from __future__ import annotations

import math

import pytest

from leakwatch.leakcheck import compare, verdict_thresholds
from leakwatch.leakcheck.analysis import CheckResult, analyse
from tests.support.leak_scenarios import MB, make

CFG = verdict_thresholds.load()
DAY = 86400.0


def side(hours: float, requests_per_s: float, bytes_per_request: float, seed: int, noise: float = 20 * MB):
    s = make(
        hours=hours,
        step=15,
        requests_per_s=requests_per_s,
        bytes_per_request=bytes_per_request,
        noise=noise,
        ar=0.3,
        seed=seed,
    )
    return analyse(s.timeline(), s.series(), CFG, start=s.t[0], end=s.t[-1], step=15)


def versus(stable: CheckResult, canary: CheckResult, within: float = DAY) -> compare.Comparison:
    return compare.compare(("stable", "canary"), stable, canary, 1000.0, within)


# 10 % canary, 0.5 requests/s in all, 6 hours.
TOTAL, SHARE = 0.5, 0.1


def test_a_canary_without_the_stable_sides_leak_is_less_and_exits_0():
    result = versus(side(6, TOTAL * (1 - SHARE), 2 * MB, 1), side(6, TOTAL * SHARE, 0, 2))
    assert result.verdict == compare.LESS and result.exit_code == 0
    (row,) = result.series
    assert row.key == "host/api_server"
    assert row.difference.estimate == pytest.approx(-2 * MB, rel=0.01)
    assert row.difference.high < -row.margin
    assert row.stable.verdict == "LEAK" and row.canary.verdict == "NO-LEAK"


def test_a_canary_that_brings_a_leak_is_more_and_exits_1():
    result = versus(side(6, TOTAL * (1 - SHARE), 0, 1), side(6, TOTAL * SHARE, 2 * MB, 2))
    assert result.verdict == compare.MORE and result.exit_code == 1
    assert result.series[0].difference.low > result.series[0].margin


def test_two_healthy_deployments_are_the_same_and_exit_0():
    result = versus(side(6, TOTAL * (1 - SHARE), 0, 1, 5 * MB), side(6, TOTAL * SHARE, 0, 2, 5 * MB))
    assert result.verdict == compare.SAME and result.exit_code == 0
    row = result.series[0]
    assert -row.margin < row.difference.low and row.difference.high < row.margin


def test_the_margin_is_the_checks_threshold_at_the_promoted_traffic():
    """A per-request difference below min_growth_bytes_per_hour / (both sides' traffic) grows too
    slowly to matter once the canary serves everything: the check's own per-request threshold."""
    result = versus(side(6, TOTAL * (1 - SHARE), 0, 1), side(6, TOTAL * SHARE, 0, 2))
    row = result.series[0]
    per_hour = row.stable.recent_requests_per_hour + row.canary.recent_requests_per_hour
    assert per_hour == pytest.approx(TOTAL * 3600, rel=0.15)
    assert row.margin == pytest.approx(max(CFG.min_bytes_per_request, CFG.min_growth_bytes_per_hour / per_hour))


@pytest.mark.parametrize("seed", [2, 3])
def test_an_undecided_comparison_says_how_many_more_requests_and_that_many_decide(seed):
    """A 1-hour window that cannot tell a 500 kB/request leak from none under 100 MB of noise:
    INCONCLUSIVE with a number of requests; the same traffic for that much longer decides LESS."""
    stable, canary = side(1, 0.3 * 0.9, 500e3, 10 + seed, 100 * MB), side(1, 0.3 * 0.1, 0, 20 + seed, 100 * MB)
    result = versus(stable, canary)
    assert result.verdict == compare.INCONCLUSIVE and result.exit_code == 3
    row = result.series[0]
    p = row.projection
    assert p is not None and p.towards == compare.LESS and p.more_requests > 0
    assert f"about {p.more_requests:.0f} more requests at this split would decide LESS" in row.reason
    served = row.stable.requests_served + row.canary.requests_served
    longer = 1 + p.more_requests / served
    decided = versus(
        side(longer, 0.3 * 0.9, 500e3, 10 + seed, 100 * MB), side(longer, 0.3 * 0.1, 0, 20 + seed, 100 * MB)
    )
    assert decided.verdict == compare.LESS, decided.series[0].reason


def test_the_smallest_canary_share_that_decides_within_half_a_day_at_1000_requests():
    """The printed share, simulated: 12 hours of 1000 requests/day with that share of them on the
    canary decide, on most days (the projection is sized for 80 %), the verdict it named; half that
    share decides on fewer."""
    stable, canary = side(1, 0.3 * 0.9, 500e3, 13, 100 * MB), side(1, 0.3 * 0.1, 0, 23, 100 * MB)
    row = versus(stable, canary, within=DAY / 2).series[0]
    p = row.projection
    assert p.min_canary_share is not None and 0 < p.min_canary_share <= 0.5
    assert p.share_towards == compare.LESS
    assert f"a canary share of {p.min_canary_share:.0%} would decide LESS within 12 h" in row.reason

    def days(share: float) -> list[str]:
        per_s = 1000 / DAY
        return [
            versus(
                side(12, per_s * (1 - share), 500e3, 300 + day, 100 * MB),
                side(12, per_s * share, 0, 400 + day, 100 * MB),
            ).verdict
            for day in range(5)
        ]

    enough, half = days(p.min_canary_share), days(p.min_canary_share / 2)
    assert enough.count(compare.LESS) >= 3, enough
    assert half.count(compare.LESS) < enough.count(compare.LESS), (enough, half)


def test_a_series_on_one_side_only_or_without_an_interval_is_inconclusive():
    stable = side(6, TOTAL * 0.9, 0, 1)
    starved = side(1, 0.001, 0, 2)  # a handful of requests: no interval
    row = versus(stable, starved).series[0]
    assert row.verdict == compare.INCONCLUSIVE and "no bytes/request interval on the canary side" in row.reason
    assert math.isnan(row.difference.estimate)
    canary = side(6, TOTAL * 0.1, 0, 2)
    canary.series[0].series.key = "host/worker/0"
    result = versus(stable, canary)
    assert result.verdict == compare.INCONCLUSIVE
    assert {r.key: r.reason for r in result.series} == {
        "host/api_server": "no such series on the canary side",
        "host/worker/0": "no such series on the stable side",
    }


def test_overall_verdict_and_json():
    assert compare.overall([compare.SAME, compare.LESS]) == compare.LESS
    assert compare.overall([compare.LESS, compare.INCONCLUSIVE]) == compare.INCONCLUSIVE
    assert compare.overall([compare.INCONCLUSIVE, compare.MORE]) == compare.MORE
    assert compare.overall([compare.SAME, compare.SAME]) == compare.SAME
    assert compare.overall([]) == compare.INCONCLUSIVE
    result = versus(side(6, TOTAL * 0.9, 2 * MB, 1), side(6, TOTAL * 0.1, 0, 2))
    data = result.as_dict()
    assert data["verdict"] == "LESS" and data["exit_code"] == 0 and data["canary"] == "canary"
    (row,) = data["series"]
    assert row["stable"]["verdict"] == "LEAK" and row["canary"]["verdict"] == "NO-LEAK"
    assert row["difference_bytes_per_request"]["high"] < -row["margin_bytes_per_request"]
    text = compare.format_text(result)
    assert text.splitlines()[0] == "leakwatch check --compare stable canary: LESS"
