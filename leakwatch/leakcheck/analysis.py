"""From samples to a verdict: bytes per request, growth per hour, time to exhaustion, LEAK or not.

Decision rule (per memory series; docs/leak-check.md), with T_req = min_bytes_per_request and
T_hour = min_growth_bytes_per_hour from config/leak_check.yaml, intervals at verdict.confidence:
  NO-LEAK       the memory's whole range in each segment is less than T_hour over that segment;
                or the later part of the window (verdict.recent_fraction) is flat: its bytes/request
                interval below T_req, or, having served min_requests, its growth/hour interval below
                T_hour (a step that plateaued is not a leak); or over the whole window the
                bytes/request interval is below T_req or the growth/hour interval below T_hour;
  LEAK          otherwise, when the whole window's bytes/request interval is above T_req, its
                growth/hour interval above T_hour, and the later part still grows per request;
  INCONCLUSIVE  anything else, and too little data.
Overall: LEAK if any series leaks, NO-LEAK if every series is NO-LEAK, INCONCLUSIVE otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import CheckConfig
from .estimator import NAN_INTERVAL, Interval, SlopeFit, theil_sen
from .series import MemorySeries, Segments, Timeline, segment, warmed_up

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


def _decide(
    cfg: CheckConfig,
    bpr: Interval,
    gph: Interval,
    recent: Interval,
    recent_gph: Interval,
    recent_served: float,
    range_rate: float = math.inf,
) -> tuple[str, str]:
    t_req, t_hour = cfg.min_bytes_per_request, cfg.min_growth_bytes_per_hour
    # Magnitude before ranks: a series that hardly moved cannot leak at the threshold's rate, however
    # its rank statistics look (a quiet process's RSS is a staircase of page faults).
    if range_rate < t_hour:
        return NO_LEAK, (f"its whole range moved at most {_b(range_rate)}/h, below {_b(t_hour)}/h")
    # The later part of the window decides whether growth is still going on: a leak keeps growing
    # with every request, a one-time step (a cache filled by a long request) then stays flat.
    recent_flat = recent.high < t_req or (recent_served >= cfg.min_requests and recent_gph.high < t_hour)
    grew = bpr.low > t_req and gph.low > t_hour
    if recent_flat:
        what = "grew earlier but" if grew else "memory"
        return NO_LEAK, (
            f"{what} did not grow in the later part of the window (high ends {_b(recent.high)}/request, "
            f"{_b(recent_gph.high)}/h){': a step that plateaued, not a leak' if grew else ''}"
        )
    if grew and recent.estimate > t_req:
        return LEAK, (
            f"grows {_b(bpr.estimate)}/request (interval {_b(bpr.low)} .. {_b(bpr.high)} above "
            f"{_b(t_req)}) and {_b(gph.estimate)}/h (above {_b(t_hour)}/h), still growing at the end"
        )
    if bpr.high < t_req:
        return NO_LEAK, f"bytes/request interval below {_b(t_req)} (high end {_b(bpr.high)})"
    if gph.high < t_hour:
        return NO_LEAK, f"growth/hour interval below {_b(t_hour)}/h (high end {_b(gph.high)}/h)"
    return INCONCLUSIVE, (
        f"intervals straddle the thresholds: {_b(bpr.low)} .. {_b(bpr.high)}/request, "
        f"{_b(gph.low)} .. {_b(gph.high)}/h; a longer window or more traffic decides"
    )


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

    def empty(reason: str) -> SeriesResult:
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
        )

    if len(pos) < cfg.min_points:
        return empty(f"only {len(pos)} post-warm-up points (need {cfg.min_points}); widen the window")
    if served < cfg.min_requests:
        return empty(f"only {served:.0f} requests served after warm-up (need {cfg.min_requests:.0f})")

    request_fit = theil_sen(req, mem, seg, cfg.confidence)
    time_fit = theil_sen(t, mem, seg, cfg.confidence)
    # Later part: the last recent_fraction of the analysed points in time.
    cut = t[int(math.floor(len(t) * (1 - cfg.recent_fraction)))] if cfg.recent_fraction < 1 else t[0]
    late = t >= cut
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
    verdict, reason = _decide(
        cfg, bpr, gph, recent, recent_gph, _served(req[late], seg[late]), _range_rate(t, mem, seg, time_compression)
    )

    hours = None
    if series.headroom_bytes is not None and math.isfinite(gph.estimate) and gph.estimate > 0:
        hours = max(series.headroom_bytes, 0.0) / gph.estimate
    return SeriesResult(
        series,
        verdict,
        reason,
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
