"""Durations: one grammar for every config file, flag and query.

A sequence of <number><unit> parts with Prometheus's units (y w d h m s ms), fractions allowed:
90s, 15m, 1h30m, 1.5h, 500ms, 7d. `bare_seconds=True` also takes a plain number of seconds (the load
generator's flags: --run-time 90). `format_duration` writes the shortest Prometheus duration back, so
the rules generated from config/alerts.yaml always carry valid ones whatever was written there.
"""

from __future__ import annotations

import re

from .errors import LeakwatchError

UNITS = {"y": 31_536_000, "w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1, "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|[ywdhms])")
EXAMPLES = "90s, 15m, 1h30m, 7d"


class DurationError(LeakwatchError, ValueError):
    """Not a duration. Also a ValueError, for parsers (argparse, Locust's options) that report those."""


def parse_duration(text: str | float, *, bare_seconds: bool = False, positive: bool = False) -> float:
    """Seconds in `text`; raises DurationError with the examples when it is not a duration (or, with
    positive=True, when it is zero)."""
    seconds = _seconds(text, bare_seconds)
    if positive and seconds <= 0:
        raise DurationError(f"duration {text!r} must be positive")
    return seconds


def _seconds(text: str | float, bare_seconds: bool) -> float:
    if bare_seconds and isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    raw = str(text).strip().lower()
    if bare_seconds:
        try:
            return float(raw)
        except ValueError:
            pass
    parts = _PART.findall(raw)
    if not raw or "".join(number + unit for number, unit in parts) != raw:
        examples = EXAMPLES + (", 90" if bare_seconds else "")
        raise DurationError(f"{text!r} is not a duration (examples: {examples})")
    return sum(float(number) * UNITS[unit] for number, unit in parts)


def format_duration(seconds: float) -> str:
    """The shortest Prometheus duration for a number of seconds (whole milliseconds)."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise DurationError(f"a duration must be positive, got {seconds}s")
    out = []
    for unit, size in UNITS.items():
        size_ms = round(size * 1000)
        if ms >= size_ms:
            count, ms = divmod(ms, size_ms)
            out.append(f"{count}{unit}")
    return "".join(out)
