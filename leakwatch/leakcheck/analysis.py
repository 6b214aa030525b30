"""From samples to a verdict: bytes per request, growth per hour, time to exhaustion, LEAK or not.

Decision rule (per memory series; docs/leak-check.md has the maths), with T_req = min_bytes_per_request
and T_hour = min_growth_bytes_per_hour (config/leak_check.yaml's verdict.min_growth_per_request and
verdict.min_growth_rate), intervals at verdict.confidence:
  NO-LEAK       the memory's whole range in each segment is less than T_hour over that segment;
                or the later part of the window (verdict.recent_fraction) is flat: its bytes/request
                interval below T_req, or, having served min_requests, its growth/hour interval below
                T_hour (a step that plateaued is not a leak);
  LEAK          the bytes/request interval lies above T_req, or the growth/hour interval above T_hour
                (either decides by itself), and the later part still grows;
  NO-LEAK       every measure that exists has its interval below its threshold;
  INCONCLUSIVE  anything else (saying how many more requests or minutes would decide at the current
                traffic), and too little data.
A per-request LEAK forecasts the time to exhaustion from the recent request rate.
Overall: LEAK if any series leaks, NO-LEAK if every series is NO-LEAK, INCONCLUSIVE otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .estimator import NAN_INTERVAL, Interval, SlopeFit, theil_sen
from .series import MemorySeries, Segments, Timeline, segment, warmed_up
from .verdict_thresholds import CheckConfig

LEAK, NO_LEAK, INCONCLUSIVE = "LEAK", "NO-LEAK", "INCONCLUSIVE"
# Exit codes of `leakwatch check` (2 is every usage or connection error, as for every subcommand).
EXIT_CODES = {NO_LEAK: 0, LEAK: 1, INCONCLUSIVE: 3}


@dataclass
class SeriesResult:
    series: MemorySeries
    verdict: str
    reason: str
    points: int
    requests_served: float
    bytes_per_request: Interval
    growth_per_hour: Interval
    recent_bytes_per_request: Interval
    current_bytes: float | None
    hours_to_exhaustion: float | None
    # For plots: the analysed points and the fits (not part of the JSON).
    t: np.ndarray
    requests: np.ndarray
    memory: np.ndarray
    segment_ids: np.ndarray
    request_fit: SlopeFit | None
    time_fit: SlopeFit | None
    decided_by: str = "data"
    exhaustion_basis: str | None = None  # request_rate | growth_per_hour
    recent_requests_per_hour: float | None = None  # production hours
    more_requests: float | None = None
    more_minutes: float | None = None
    # Set after the verdict, for LEAK series: which endpoint's requests explain the growth
    # (attribution.py) and the plateau of a declared cache bound (bounded.py).
    attribution: Any = None
    bounded: Any = None

    def as_dict(self) -> dict:
        s = self.series
        return {
            "key": s.key,
            "kind": s.kind,
            "labels": s.labels,
            "source": s.source,
            "verdict": self.verdict,
            "reason": self.reason,
            "points": self.points,
            "segments": len(np.unique(self.segment_ids)) if self.points else 0,
            "requests_served": self.requests_served,
            "bytes_per_request": self.bytes_per_request.as_dict(),
            "growth_bytes_per_hour": self.growth_per_hour.as_dict(),
            "recent_bytes_per_request": self.recent_bytes_per_request.as_dict(),
            "current_bytes": self.current_bytes,
            "headroom_bytes": s.headroom_bytes,
            "limit_source": s.limit_source,
            "hours_to_exhaustion": self.hours_to_exhaustion,
            "exhaustion_basis": self.exhaustion_basis,
            "decided_by": self.decided_by,
            "recent_requests_per_hour": self.recent_requests_per_hour,
            "inconclusive_needs": None
            if self.verdict != INCONCLUSIVE
            else {"more_requests": self.more_requests, "more_minutes": self.more_minutes},
            "attribution": None if self.attribution is None else self.attribution.as_dict(),
            "bounded_caches": None if self.bounded is None else self.bounded.as_dict(),
        }


@dataclass
class CheckResult:
    verdict: str
    start: float
    end: float
    step: float
    time_compression: float
    config: CheckConfig
    timeline: Timeline
    segments: Segments
    series: list[SeriesResult]
    # The memory breakdown at the window's end (leakcheck/breakdown.py's MemoryBreakdown): informs,
    # decides nothing; None where it was not asked for (one side of a comparison).
    memory_breakdown: Any = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "window": {"start": self.start, "end": self.end, "step": self.step},
            "time_compression": self.time_compression,
            "thresholds": self.config.as_dict(),
            "restarts": self.segments.restarts,
            "segments": int(self.segments.ids.max()) + 1 if len(self.segments.ids) else 0,
            "series": [r.as_dict() for r in self.series],
            **({"memory_breakdown": self.memory_breakdown.as_dict()} if self.memory_breakdown is not None else {}),
        }


def _served(requests: np.ndarray, seg: np.ndarray) -> float:
    total = 0.0
    for s in np.unique(seg):
        r = requests[seg == s]
        total += float(r.max() - r.min())
    return total


def _range_rate(t: np.ndarray, mem: np.ndarray, seg: np.ndarray, time_compression: float) -> float:
    """The largest (max - min) / duration of any segment, in bytes per production hour: no growth
    in the window can have been faster than the memory's whole excursion allows."""
    worst = 0.0
    for s in np.unique(seg):
        m = seg == s
        duration_h = (t[m].max() - t[m].min()) * time_compression / 3600.0
        if duration_h <= 0:
            return math.inf
        worst = max(worst, float(mem[m].max() - mem[m].min()) / duration_h)
    return worst


@dataclass(frozen=True)
class Measures:
    """What one series' verdict is decided on (rates per production hour, amounts of traffic in
    wall-clock minutes: what a user waits for)."""

    bpr: Interval  # bytes per request, whole window
    gph: Interval  # growth per hour, whole window
    recent: Interval  # bytes per request, later part
    recent_gph: Interval  # growth per hour, later part
    recent_served: float
    served: float
    window_minutes: float  # wall-clock minutes of analysed points
    requests_per_minute: float  # the later part's traffic, per wall-clock minute
    requests_per_hour: float  # the whole window's traffic, per production hour
    range_rate: float = math.inf

    def per_request_threshold(self, cfg: CheckConfig) -> float:
        """Growth per request that matters at this traffic: min_bytes_per_request, or more where
        the window's traffic would need more per request to reach min_growth_bytes_per_hour (a
        per-request figure below that is, by the per-hour threshold's own definition, too slow to
        matter, and three 15 s scrapes of noise can put it a few hundred bytes above zero)."""
        if self.requests_per_hour <= 0:
            return cfg.min_bytes_per_request
        return max(cfg.min_bytes_per_request, cfg.min_growth_bytes_per_hour / self.requests_per_hour)


@dataclass(frozen=True)
class Decision:
    verdict: str
    reason: str
    decided_by: str  # bytes_per_request | growth_per_hour | both | range | recent | data
    more_requests: float | None = None  # INCONCLUSIVE: about this many more requests would decide ...
    more_minutes: float | None = None  # ... or this many more (wall-clock) minutes at the current traffic


def _more_data_factor(iv: Interval, threshold: float) -> float:
    """How many times the data so far would settle `iv` against `threshold`, if its estimate holds.

    The interval's half-width on the threshold's side shrinks like (amount of data)^(-3/2) when the
    window grows at the same traffic: a slope's standard error is sigma / sqrt(sum (x - mean x)^2),
    and that sum grows with the cube of the window (n points spread over a range that grows like n).
    inf when it cannot be said (an unbounded interval, an estimate on the threshold)."""
    distance = abs(iv.estimate - threshold)
    half = (iv.estimate - iv.low) if iv.estimate > threshold else (iv.high - iv.estimate)
    if distance <= 0 or not math.isfinite(half):
        return math.inf
    return max((half / distance) ** (2.0 / 3.0), 1.0)


def _still_growing(m: Measures, cfg: CheckConfig) -> bool:
    return m.recent.estimate > m.per_request_threshold(cfg) or m.recent_gph.estimate > cfg.min_growth_bytes_per_hour


def _decide(cfg: CheckConfig, m: Measures) -> Decision:
    t_req, t_hour = m.per_request_threshold(cfg), cfg.min_growth_bytes_per_hour
    bpr, gph, recent, recent_gph = m.bpr, m.gph, m.recent, m.recent_gph
    # Magnitude before ranks: a series that hardly moved cannot leak at the threshold's rate, however
    # its rank statistics look (a quiet process's RSS is a staircase of page faults).
    if m.range_rate < t_hour:
        return Decision(NO_LEAK, f"its whole range moved at most {_b(m.range_rate)}/h, below {_b(t_hour)}/h", "range")
    # The later part of the window decides whether growth is still going on: a leak keeps growing
    # with every request, a one-time step (a cache filled by a long request) then stays flat.
    recent_flat = recent.high < t_req or (m.recent_served >= cfg.min_requests and recent_gph.high < t_hour)
    by_request = bpr.low > t_req
    by_hour = math.isfinite(gph.low) and gph.low > t_hour
    if recent_flat:
        grew = by_request or by_hour
        what = "grew earlier but" if grew else "memory"
        return Decision(
            NO_LEAK,
            f"{what} did not grow in the later part of the window (high ends "
            f"{_b(recent.high)}/request, {_b(recent_gph.high)}/h)"
            f"{': a step that plateaued, not a leak' if grew else ''}",
            "recent",
        )
    # Either measure decides a leak on its own: bursty or idle-gapped traffic makes memory against
    # time a staircase whose growth/hour interval can stay unbounded while every request's growth
    # is measured to the byte (issue 19).
    if (by_request or by_hour) and _still_growing(m, cfg):
        parts = []
        if by_request:
            parts.append(
                f"grows {_b(bpr.estimate)}/request (interval {_b(bpr.low)} .. {_b(bpr.high)} above {_b(t_req)})"
            )
        if by_hour:
            parts.append(f"grows {_b(gph.estimate)}/h (interval {_b(gph.low)} .. {_b(gph.high)} above {_b(t_hour)}/h)")
        basis = "both" if by_request and by_hour else ("bytes_per_request" if by_request else "growth_per_hour")
        return Decision(LEAK, " and ".join(parts) + ", still growing at the end", basis)
    # NO-LEAK needs every measure there is to be below its threshold.
    below = [(bpr.high < t_req, math.isfinite(bpr.estimate)), (gph.high < t_hour, math.isfinite(gph.estimate))]
    if all(ok for ok, exists in below if exists) and any(exists for _, exists in below):
        return Decision(
            NO_LEAK,
            f"bytes/request below {_b(t_req)} (high end {_b(bpr.high)}) and growth/hour "
            f"below {_b(t_hour)}/h (high end {_b(gph.high)}/h)",
            "both",
        )
    return _undecided(cfg, m)


def _undecided(cfg: CheckConfig, m: Measures) -> Decision:
    """INCONCLUSIVE, with how much more traffic or time would decide if the estimates hold.

    Either measure above its threshold decides LEAK by itself, so the nearer of those is the answer;
    NO-LEAK needs both below, so it takes the farther one."""
    t_req, t_hour = m.per_request_threshold(cfg), cfg.min_growth_bytes_per_hour
    rate = m.requests_per_minute
    options = []  # (towards, more requests, more minutes)
    for iv, threshold, name in ((m.bpr, t_req, "bytes_per_request"), (m.gph, t_hour, "growth_per_hour")):
        if not math.isfinite(iv.estimate):
            continue
        factor = _more_data_factor(iv, threshold)
        towards = LEAK if iv.estimate > threshold else NO_LEAK
        if name == "bytes_per_request":
            more_req = (factor - 1.0) * m.served
            more_min = more_req / rate if rate > 0 else math.inf
        else:
            more_min = (factor - 1.0) * m.window_minutes
            more_req = more_min * rate
        options.append((towards, more_req, more_min))
    leak_paths = [o for o in options if o[0] == LEAK]
    if leak_paths:
        target, more_req, more_min = LEAK, *min((o[1:] for o in leak_paths), key=lambda x: x[1])
    elif options:
        target, more_req, more_min = NO_LEAK, *max((o[1:] for o in options), key=lambda x: x[1])
    else:
        target, more_req, more_min = None, math.inf, math.inf
    straddle = (
        f"intervals straddle the thresholds: {_b(m.bpr.low)} .. {_b(m.bpr.high)}/request, "
        f"{_b(m.gph.low)} .. {_b(m.gph.high)}/h"
    )
    traffic = f"{rate:.3g} requests/min" if rate > 0 else "no requests in the later part of the window"
    if target is None or not math.isfinite(more_min):
        hint = (
            f"the data so far cannot say how much more would decide ({traffic}); widen the window or send more traffic"
        )
        return Decision(INCONCLUSIVE, f"{straddle}; {hint}", "data")
    hint = (
        f"if the estimates hold, about {more_req:.0f} more requests (~{more_min:.0f} min at the current "
        f"{traffic}) would decide {target}"
    )
    return Decision(INCONCLUSIVE, f"{straddle}; {hint}", "data", round(more_req), more_min)


def _b(value: float) -> str:
    """Bytes for people: 5.8 MB, -12 kB, 90 B."""
    if value is None or not math.isfinite(value):
        return "unbounded" if value is not None and math.isinf(value) else "n/a"
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{sign}{value:.4g} {unit}"
        value /= 1000.0
    return f"{sign}{value:.4g} TB"


human_bytes = _b


def format_hours(hours: float | None) -> str:
    if hours is None:
        return "-"
    if hours > 24 * 365:
        return "> 1 year"
    return f"{hours:.1f} h" if hours < 72 else f"{hours / 24:.0f} d"


def analyse_series(
    series: MemorySeries,
    timeline: Timeline,
    segments: Segments,
    warm: np.ndarray,
    cfg: CheckConfig,
    time_compression: float,
) -> SeriesResult:
    pos, mem = series.aligned(timeline)
    keep = warm[pos] if len(pos) else np.zeros(0, dtype=bool)
    pos, mem = pos[keep], mem[keep]
    t, req, seg = timeline.t[pos], timeline.requests[pos], segments.ids[pos]
    served = _served(req, seg) if len(pos) else 0.0
    current = float(series.values[np.isfinite(series.values)][-1]) if np.isfinite(series.values).any() else None

    # Traffic at the end of the window: what forecasts and "how much more" are scaled by.
    cut = (
        t[int(math.floor(len(t) * (1 - cfg.recent_fraction)))]
        if len(t) and cfg.recent_fraction < 1
        else (t[0] if len(t) else 0.0)
    )
    late = t >= cut
    late_served = _served(req[late], seg[late]) if late.any() else 0.0
    late_wall_s = float(t[late].max() - t[late].min()) if late.sum() > 1 else 0.0
    per_minute = late_served / late_wall_s * 60.0 if late_wall_s > 0 else 0.0
    per_prod_hour = per_minute * 60.0 / time_compression

    def empty(reason: str, more_requests=None, more_minutes=None) -> SeriesResult:
        return SeriesResult(
            series,
            INCONCLUSIVE,
            reason,
            len(pos),
            served,
            NAN_INTERVAL,
            NAN_INTERVAL,
            NAN_INTERVAL,
            current,
            None,
            t,
            req,
            mem,
            seg,
            None,
            None,
            recent_requests_per_hour=per_prod_hour,
            more_requests=more_requests,
            more_minutes=more_minutes,
        )

    if len(pos) < cfg.min_points:
        step_s = float(np.median(np.diff(timeline.t))) if len(timeline) > 1 else math.nan
        minutes = (cfg.min_points - len(pos)) * step_s / 60.0
        return empty(
            f"only {len(pos)} post-warm-up points (need {cfg.min_points}): about {minutes:.1f} more "
            f"minutes of samples would do; widen the window",
            None,
            minutes,
        )
    if served < cfg.min_requests:
        need = cfg.min_requests - served
        at = (
            f"~{need / per_minute:.0f} min at the current {per_minute:.3g} requests/min"
            if per_minute > 0
            else "no requests in the later part of the window"
        )
        return empty(
            f"only {served:.0f} requests served after warm-up (need {cfg.min_requests:.0f}): {need:.0f} more ({at})",
            need,
            need / per_minute if per_minute > 0 else None,
        )

    request_fit = theil_sen(req, mem, seg, cfg.confidence)
    time_fit = theil_sen(t, mem, seg, cfg.confidence)
    recent_fit = theil_sen(req[late], mem[late], seg[late], cfg.confidence)
    recent_time_fit = theil_sen(t[late], mem[late], seg[late], cfg.confidence)
    if not request_fit.ok:
        return empty("no two post-warm-up points with different request counts")

    bpr = request_fit.slope
    # Growth per production hour: wall-clock seconds times the drill's compression.
    gph = time_fit.slope.scaled(3600.0 / time_compression) if time_fit.ok else NAN_INTERVAL
    unknown = Interval(bpr.estimate, -math.inf, math.inf)
    recent = recent_fit.slope if recent_fit.ok else unknown
    recent_gph = recent_time_fit.slope.scaled(3600.0 / time_compression) if recent_time_fit.ok else unknown
    window_minutes = sum(float(t[seg == s_].max() - t[seg == s_].min()) for s_ in np.unique(seg)) / 60.0
    window_prod_h = window_minutes * 60.0 * time_compression / 3600.0
    decision = _decide(
        cfg,
        Measures(
            bpr,
            gph,
            recent,
            recent_gph,
            late_served,
            served,
            window_minutes,
            per_minute,
            served / window_prod_h if window_prod_h > 0 else 0.0,
            _range_rate(t, mem, seg, time_compression),
        ),
    )

    # Time to exhaustion: a per-request leak grows with the traffic it gets, so the forecast uses
    # the recent request rate; otherwise (and for series that do not leak) the growth per hour.
    hours, basis = None, None
    if series.headroom_bytes is not None:
        room = max(series.headroom_bytes, 0.0)
        if decision.verdict == LEAK and decision.decided_by in ("bytes_per_request", "both") and per_prod_hour > 0:
            hours, basis = room / (bpr.estimate * per_prod_hour), "request_rate"
        elif math.isfinite(gph.estimate) and gph.estimate > 0:
            hours, basis = room / gph.estimate, "growth_per_hour"
    return SeriesResult(
        series,
        decision.verdict,
        decision.reason,
        len(pos),
        served,
        bpr,
        gph,
        recent,
        current,
        hours,
        t,
        req,
        mem,
        seg,
        request_fit,
        time_fit,
        decided_by=decision.decided_by,
        exhaustion_basis=basis,
        recent_requests_per_hour=per_prod_hour,
        more_requests=decision.more_requests,
        more_minutes=decision.more_minutes,
    )


def overall(verdicts: list[str]) -> str:
    if LEAK in verdicts:
        return LEAK
    if verdicts and all(v == NO_LEAK for v in verdicts):
        return NO_LEAK
    return INCONCLUSIVE


def analyse(
    timeline: Timeline,
    series: list[MemorySeries],
    cfg: CheckConfig,
    *,
    start: float,
    end: float,
    step: float,
    time_compression: float = 1.0,
) -> CheckResult:
    """The whole check on collected samples; time-based settings are in production seconds."""
    # A hole shorter than a few query steps is the grid, not missing data.
    segments = segment(timeline, max(cfg.max_gap_seconds / time_compression, 3 * step))
    warm = warmed_up(timeline, segments, cfg.warmup_seconds / time_compression, cfg.warmup_requests)
    results = [analyse_series(s, timeline, segments, warm, cfg, time_compression) for s in series]
    return CheckResult(
        overall([r.verdict for r in results]), start, end, step, time_compression, cfg, timeline, segments, results
    )
