"""Time windows on the command line: durations like 2h or 1h30m, instants as unix seconds or ISO 8601."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from ..core import durations
from ..core.errors import LeakwatchError


def parse_duration(text: str) -> float:
    """Seconds in a window's length (90s, 30m, 2h, 1d, 1w, 1h30m): positive."""
    return durations.parse_duration(text, positive=True)


def parse_instant(text: str) -> float:
    """Unix seconds from `1700000000`, `2026-01-31T12:00:00Z` or `2026-01-31 12:00` (UTC if no zone)."""
    raw = text.strip()
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise LeakwatchError(f"{text!r} is not a time (unix seconds or ISO 8601, e.g. 2026-01-31T12:00:00Z)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def resolve(start: str | None, end: str | None, window: str | None, default_window: str = "2h") -> tuple[float, float]:
    """(start, end) unix seconds from any two of start/end/window; end defaults to now."""
    end_ts = parse_instant(end) if end else None
    start_ts = parse_instant(start) if start else None
    if start_ts is not None and end_ts is None and window:
        end_ts = start_ts + parse_duration(window)
    if end_ts is None:
        end_ts = time.time()
    if start_ts is None:
        start_ts = end_ts - parse_duration(window or default_window)
    if start_ts >= end_ts:
        raise LeakwatchError(f"the window is empty: start {iso(start_ts)} is not before end {iso(end_ts)}")
    return start_ts, end_ts


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
