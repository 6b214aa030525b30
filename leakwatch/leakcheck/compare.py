"""Does the canary leak less per request than the stable deployment? (`leakwatch check --compare`)

Article A rolled its fix out to 10 % of traffic first and watched memory before going further; this
answers the question that rollout asks. Each side is the ordinary leak check of its own series (the
same collection, warm-up, segments and Theil-Sen fits, with `deployment="<side>"` added to every
query), and per memory series the difference canary - stable of their bytes per request is judged:

  LESS          the difference's interval lies below -margin: the canary leaks less;
  MORE          it lies above +margin: the canary leaks more;
  SAME          it lies inside (-margin, +margin);
  INCONCLUSIVE  anything else, saying how many more requests would decide at the current split,
                and the smallest canary share of the traffic that decides within --decide-within
                at --daily-requests.

margin = max(min_bytes_per_request, min_growth_bytes_per_hour / r), r the two sides' recent traffic
per production hour together (what the canary serves once promoted): a per-request difference
below it grows too slowly at that traffic to matter, exactly as the check's own threshold.

The difference's standard error is each side's, taken from its interval at the check's confidence
(half its width over z), added in quadrature: the sides are independent processes. Projections
(how many more requests, the smallest canary share) decide in POWER (80 %) of runs if the estimate
is the truth and the noise per scrape stays what it was: a slope's standard error falls like
1 / (requests on that side x sqrt(points)), and points grow with time.
Overall: MORE if any series is MORE, INCONCLUSIVE if any is, LESS if any is LESS (the rest SAME),
SAME if all are. Exit codes: 0 LESS or SAME (promote), 1 MORE, 3 INCONCLUSIVE, 2 error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from .analysis import CheckResult, SeriesResult, human_bytes
from .estimator import NAN_INTERVAL, Interval
from .verdict_thresholds import CheckConfig

LESS, SAME, MORE, INCONCLUSIVE = "LESS", "SAME", "MORE", "INCONCLUSIVE"
EXIT_CODES = {LESS: 0, SAME: 0, MORE: 1, INCONCLUSIVE: 3}
# The canary shares tried for "the smallest share that decides in time" (1 % steps up to an even split).
SHARES = tuple(i / 100 for i in range(1, 51))
# Projections are sized to decide in this share of runs: an interval sized to just reach the margin
# when the estimate holds exactly decides in only half of them (the estimate moves too).
POWER = 0.8


@dataclass(frozen=True)
class Projection:
    """What it takes to decide (in POWER of runs, if the estimates hold)."""

    more_requests: float | None  # more requests in all, at the current split ...
    towards: str | None  # ... to reach this verdict
    min_canary_share: float | None = None  # of daily_requests, to decide within decide_within_s ...
    share_towards: str | None = None  # ... this verdict, judged on ...
    share_margin: float | None = None  # ... that traffic's margin


@dataclass
class SeriesComparison:
    key: str
    verdict: str
    reason: str
    stable: SeriesResult | None
    canary: SeriesResult | None
    difference: Interval  # canary minus stable, bytes per request
    margin: float
    projection: Projection | None = None

    def as_dict(self) -> dict:
        def side(r: SeriesResult | None) -> dict | None:
            if r is None:
                return None
            return {
                "verdict": r.verdict,
                "bytes_per_request": r.bytes_per_request.as_dict(),
                "requests_served": r.requests_served,
            }

        p = self.projection
        return {
            "key": self.key,
            "verdict": self.verdict,
            "reason": self.reason,
            "difference_bytes_per_request": self.difference.as_dict(),
            "margin_bytes_per_request": self.margin,
            "stable": side(self.stable),
            "canary": side(self.canary),
            "more_requests": None if p is None else p.more_requests,
            "towards": None if p is None else p.towards,
            "min_canary_share": None if p is None else p.min_canary_share,
            "min_canary_share_decides": None if p is None else p.share_towards,
        }


@dataclass
class Comparison:
    verdict: str
    names: tuple[str, str]  # the stable and canary label values
    stable: CheckResult
    canary: CheckResult
    series: list[SeriesComparison]
    daily_requests: float
    decide_within_s: float

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "stable": self.names[0],
            "canary": self.names[1],
            "window": {"start": self.stable.start, "end": self.stable.end, "step": self.stable.step},
            "confidence": self.stable.config.confidence,
            "daily_requests": self.daily_requests,
            "decide_within_seconds": self.decide_within_s,
            "series": [s.as_dict() for s in self.series],
        }


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def standard_error(iv: Interval, confidence: float) -> float:
    """A slope's standard error from its (possibly asymmetric) interval; nan when it has none."""
    if not (math.isfinite(iv.low) and math.isfinite(iv.high)):
        return math.nan
    return (iv.high - iv.low) / (2.0 * _z(confidence))


def _production_hours(r: SeriesResult, time_compression: float) -> float:
    if len(r.t) < 2:
        return 0.0
    return float(r.t.max() - r.t.min()) * time_compression / 3600.0


def margin(cfg: CheckConfig, requests_per_hour: float) -> float:
    """The smallest per-request difference that matters at this traffic (production hours)."""
    if requests_per_hour <= 0:
        return cfg.min_bytes_per_request
    return max(cfg.min_bytes_per_request, cfg.min_growth_bytes_per_hour / requests_per_hour)


def requests_for_a_check(cfg: CheckConfig) -> float:
    """Expected requests a side needs for its own check to give an interval: min_requests after its
    warm-up, and two Poisson standard deviations more, so that random traffic reaches it (~98 %)."""
    need = cfg.min_requests + cfg.warmup_requests
    return need + 2.0 * math.sqrt(need)


def _target(d: float, margin_bytes: float) -> tuple[str, float]:
    """The verdict an estimate `d` heads for, and how far it is from the margin."""
    towards = (LESS if d < 0 else MORE) if abs(d) > margin_bytes else SAME
    return towards, abs(abs(d) - margin_bytes)


def project(
    stable: SeriesResult,
    canary: SeriesResult,
    diff: Interval,
    margin_bytes: float,
    check: CheckResult,
    daily_requests: float,
    decide_within_s: float,
) -> Projection:
    """How much more traffic would decide (in POWER of runs, if the estimates and the noise per scrape hold)."""
    confidence, compression = check.config.confidence, check.time_compression
    z = _z(confidence) + NormalDist().inv_cdf(POWER)
    towards, distance = _target(diff.estimate, margin_bytes)
    se = [standard_error(r.bytes_per_request, confidence) for r in (stable, canary)]
    served = [r.requests_served for r in (stable, canary)]
    if distance <= 0 or not all(math.isfinite(s) and s > 0 for s in se) or min(served) <= 0:
        return Projection(None, None)
    # At the current split: a window f times as long has f times the requests and the points,
    # so each side's standard error falls like f^(-3/2).
    factor = max((z * math.hypot(*se) / distance) ** (2.0 / 3.0), 1.0)
    more_requests = (factor - 1.0) * sum(served)
    # At another split over decide_within_s of daily_requests (whose margin is that traffic's):
    # each side's standard error scales with (requests now / requests then) * sqrt(hours now / hours then).
    hours_now = [_production_hours(r, compression) for r in (stable, canary)]
    hours = decide_within_s / 3600.0
    share_found = None
    margin_then = margin(check.config, daily_requests / 24.0)
    towards_then, distance_then = _target(diff.estimate, margin_then)
    enough_requests = requests_for_a_check(check.config)
    if distance_then > 0 and min(hours_now) > 0:
        for share in SHARES:
            then = ((1.0 - share) * daily_requests * hours / 24.0, share * daily_requests * hours / 24.0)
            if min(then) < enough_requests:
                continue  # too few for the canary's own check to give an interval at all
            projected = [
                s * (n / m) * math.sqrt(h / hours) for s, n, m, h in zip(se, served, then, hours_now, strict=True)
            ]
            if z * math.hypot(*projected) <= distance_then:
                share_found = share
                break
    return Projection(more_requests, towards, share_found, towards_then, margin_then)


def compare_series(
    key: str,
    stable: SeriesResult | None,
    canary: SeriesResult | None,
    check: CheckResult,
    daily_requests: float,
    decide_within_s: float,
) -> SeriesComparison:
    confidence = check.config.confidence
    if stable is None or canary is None:
        missing = "stable" if stable is None else "canary"
        return SeriesComparison(
            key, INCONCLUSIVE, f"no such series on the {missing} side", stable, canary, NAN_INTERVAL, math.nan
        )
    # What the canary serves once promoted: both sides' recent traffic together.
    m = margin(check.config, (stable.recent_requests_per_hour or 0.0) + (canary.recent_requests_per_hour or 0.0))
    se_s = standard_error(stable.bytes_per_request, confidence)
    se_c = standard_error(canary.bytes_per_request, confidence)
    if not (math.isfinite(se_s) and math.isfinite(se_c)):
        side = "stable" if not math.isfinite(se_s) else "canary"
        why = (stable if side == "stable" else canary).reason
        return SeriesComparison(
            key, INCONCLUSIVE, f"no bytes/request interval on the {side} side ({why})", stable, canary, NAN_INTERVAL, m
        )
    d = canary.bytes_per_request.estimate - stable.bytes_per_request.estimate
    half = _z(confidence) * math.hypot(se_s, se_c)
    diff = Interval(d, d - half, d + half)
    span = f"canary - stable {human_bytes(d)}/request ({human_bytes(diff.low)} .. {human_bytes(diff.high)})"
    if diff.high < -m:
        return SeriesComparison(
            key, LESS, f"{span}: the canary leaks less (margin {human_bytes(m)})", stable, canary, diff, m
        )
    if diff.low > m:
        return SeriesComparison(
            key, MORE, f"{span}: the canary leaks more (margin {human_bytes(m)})", stable, canary, diff, m
        )
    if -m < diff.low and diff.high < m:
        return SeriesComparison(key, SAME, f"{span}: within +-{human_bytes(m)}", stable, canary, diff, m)
    p = project(stable, canary, diff, m, check, daily_requests, decide_within_s)
    if p.more_requests is None or p.share_margin is None:
        hint = "the data so far cannot say how much more would decide"
    else:
        at = f"at {daily_requests:g} requests/day (margin {human_bytes(p.share_margin)})"
        share = (
            f"{at} a canary share of {p.min_canary_share:.0%} would decide {p.share_towards} within "
            f"{decide_within_s / 3600:g} h"
            if p.min_canary_share is not None
            else f"{at} no canary share up to 50 % would decide within {decide_within_s / 3600:g} h"
        )
        hint = f"about {p.more_requests:.0f} more requests at this split would decide {p.towards}; {share}"
    reason = f"{span} straddles the margin +-{human_bytes(m)}; {hint}"
    return SeriesComparison(key, INCONCLUSIVE, reason, stable, canary, diff, m, p)


def overall(verdicts: list[str]) -> str:
    if not verdicts:
        return INCONCLUSIVE
    for decisive in (MORE, INCONCLUSIVE, LESS):
        if decisive in verdicts:
            return decisive
    return SAME


def compare(
    names: tuple[str, str], stable: CheckResult, canary: CheckResult, daily_requests: float, decide_within_s: float
) -> Comparison:
    by_key = {r.series.key: r for r in stable.series}, {r.series.key: r for r in canary.series}
    keys = sorted(set(by_key[0]) | set(by_key[1]))
    rows = [
        compare_series(k, by_key[0].get(k), by_key[1].get(k), stable, daily_requests, decide_within_s) for k in keys
    ]
    return Comparison(overall([r.verdict for r in rows]), names, stable, canary, rows, daily_requests, decide_within_s)


def format_text(c: Comparison) -> str:
    conf = int(round(c.stable.config.confidence * 100))
    stable_name, canary_name = c.names
    lines = [
        f"leakwatch check --compare {stable_name} {canary_name}: {c.verdict}",
        f"each side's bytes/request ({conf}% CI) and its own check verdict; the difference canary - stable",
        "",
    ]
    for s in c.series:
        lines.append(f"{s.key:<28} {s.verdict:<13} {s.reason}")
        for name, r in ((stable_name, s.stable), (canary_name, s.canary)):
            if r is None:
                lines.append(f"{'':<28} {name:<13} no data")
                continue
            iv = r.bytes_per_request
            figure = (
                f"{human_bytes(iv.estimate)}/request [{human_bytes(iv.low)} .. {human_bytes(iv.high)}]"
                if math.isfinite(iv.estimate)
                else "n/a"
            )
            lines.append(f"{'':<28} {name:<13} {figure}, {r.requests_served:.0f} requests, {r.verdict}")
    return "\n".join(lines)
