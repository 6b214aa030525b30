"""The samples a leak check works on: vLLM's request counter on a time grid, the restart evidence
that splits it into segments, the warm-up to skip, and the memory series to fit."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Timeline:
    """vLLM's cumulative request counter and what tells restarts and warm-up apart, on one grid."""

    t: np.ndarray  # unix seconds, increasing
    requests: np.ndarray  # sum of vllm:request_success_total (resets to 0 on a restart)
    start_time: np.ndarray  # process_start_time_seconds of the API server; nan when unknown
    baseline_ready: np.ndarray  # the exporter's leakwatch_baseline_ready (1/0); nan when absent

    @classmethod
    def build(cls, t, requests, start_time=None, baseline_ready=None) -> Timeline:
        t = np.asarray(t, dtype=float)
        order = np.argsort(t, kind="stable")
        nan = np.full(len(t), np.nan)
        as_arr = lambda v: nan.copy() if v is None else np.asarray(v, dtype=float)  # noqa: E731
        return cls(t[order], as_arr(requests)[order], as_arr(start_time)[order], as_arr(baseline_ready)[order])

    def __len__(self) -> int:
        return len(self.t)


@dataclass(frozen=True)
class Segments:
    ids: np.ndarray  # segment number of every timeline point
    restarts: int  # how many boundaries were a restart or a counter reset (not just a gap)
    boundaries: list[float] = field(default_factory=list)  # unix time where each new segment starts


def segment(timeline: Timeline, max_gap_s: float) -> Segments:
    """A new segment starts at a restart (the process start time changes), a counter reset (the
    request counter goes down) or a hole in the data longer than max_gap_s."""
    n = len(timeline)
    ids = np.zeros(n, dtype=int)
    restarts = 0
    boundaries = []
    current = 0
    for i in range(1, n):
        t0, t1 = timeline.t[i - 1], timeline.t[i]
        s0, s1 = timeline.start_time[i - 1], timeline.start_time[i]
        restarted = bool(np.isfinite(s0) and np.isfinite(s1) and abs(s1 - s0) > 1.0)
        reset = timeline.requests[i] < timeline.requests[i - 1]
        gap = (t1 - t0) > max_gap_s
        if restarted or reset or gap:
            current += 1
            boundaries.append(float(t1))
            restarts += int(restarted or reset)
        ids[i] = current
    return Segments(ids, restarts, boundaries)


def warmed_up(timeline: Timeline, segments: Segments, warmup_s: float, warmup_requests: float) -> np.ndarray:
    """True for points past the warm-up of their process.

    The exporter's baseline, where present, decides (it is taken once vLLM is healthy and has served
    its warm-up requests). Elsewhere a point is warm once its process has run warmup_s and served
    warmup_requests; the request counter counts from the process start, so that test needs no more.
    """
    n = len(timeline)
    warm = timeline.requests >= warmup_requests
    started = timeline.start_time.copy()
    # Without a start time, a segment that began with a restart inside the window started at its
    # first point; the first segment is taken as already running long enough.
    for seg_id in np.unique(segments.ids):
        idx = np.flatnonzero(segments.ids == seg_id)
        unknown = ~np.isfinite(started[idx])
        if seg_id > 0 and unknown.any():
            started[idx[unknown]] = timeline.t[idx[0]]
    old_enough = np.where(np.isfinite(started), timeline.t - started >= warmup_s, True)
    warm &= old_enough
    exporter = np.isfinite(timeline.baseline_ready)
    warm = np.where(exporter, timeline.baseline_ready >= 1, warm)
    return warm.astype(bool) if n else np.zeros(0, dtype=bool)


@dataclass
class MemorySeries:
    key: str  # stable name, e.g. "host/worker/0", "gpu/0", "gpu/0/engine_core"
    kind: str  # host | gpu | gpu_process
    labels: dict
    source: str  # the metric it comes from, for the reader
    t: np.ndarray
    values: np.ndarray  # bytes
    headroom_bytes: float | None = None  # what is left before the limit (cgroup/host RAM, the card)
    limit_source: str = ""

    def aligned(self, timeline: Timeline) -> tuple[np.ndarray, np.ndarray]:
        """Indices into the timeline and matching memory values, for timestamps both have."""
        index = {round(float(t), 3): i for i, t in enumerate(timeline.t)}
        pos, vals = [], []
        for t, v in zip(self.t, self.values):
            i = index.get(round(float(t), 3))
            if i is not None and np.isfinite(v):
                pos.append(i)
                vals.append(v)
        return np.asarray(pos, dtype=int), np.asarray(vals, dtype=float)
