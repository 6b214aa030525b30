"""Sizes and rates: one grammar for every config file, beside durations.py.

A size is a number and an IEC unit, written together: 64B, 512KiB, 1.5MiB, 48MiB, 8GiB, 1TiB
(B = 1 byte, KiB = 1024 bytes, MiB = 1024 KiB, ...). Fractions are allowed (0.3MiB is
314572.8 bytes: thresholds may fall between bytes); a size is never negative. A bare number is not a
size, and decimal (SI) units (kB, MB, GB, TB) are refused with a hint rather than guessed: a config
file that says 48MB may mean 48,000,000 or 50,331,648 bytes, and memory is counted in powers of 1024
everywhere in leakwatch (the exporter, the rules, the dashboards).

A rate is an amount per duration, written with a slash: 48MiB/h (bytes per hour), 5/h (a count per
hour: series, requests), 1000/d. The duration is a Prometheus duration (durations.py) whose leading
1 may be left out: /h is /1h, /30m is half an hour.
"""

from __future__ import annotations

import re

from .durations import parse_duration
from .errors import LeakwatchError

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
# What people write for the IEC units: decimal (SI) symbols and the lower-case spellings.
_SI = {"kb": "KiB", "mb": "MiB", "gb": "GiB", "tb": "TiB"}
_IEC_LOWER = {unit.lower(): unit for unit in UNITS} | {"k": "KiB", "m": "MiB", "g": "GiB", "t": "TiB"}
_SIZE = re.compile(r"(?P<sign>[-+]?)(?P<number>\d+(?:\.\d+)?|\.\d+)(?P<unit>[A-Za-z]*)")
_COUNT = re.compile(r"\d+(?:\.\d+)?")
EXAMPLES = "64B, 512KiB, 1.5MiB, 8GiB"
RATE_EXAMPLES = "48MiB/h, 512KiB/m, 5/h"


class SizeError(LeakwatchError, ValueError):
    """Not a size or a rate (also a ValueError, as DurationError is)."""


def parse_size(text: str | float) -> float:
    """Bytes in `text` (a float: fractions of a byte are allowed in thresholds). Raises SizeError
    saying what is wrong: no unit, a decimal (SI) unit, an unknown unit, a negative size."""
    if isinstance(text, bool):
        raise SizeError(f"{text!r} is not a size (examples: {EXAMPLES})")
    if isinstance(text, (int, float)):
        raise SizeError(f"{text!r} has no unit: write a size with an IEC unit, e.g. {text:g}MiB or {text:g}B")
    raw = str(text).strip()
    match = _SIZE.fullmatch(raw)
    if not match:
        joined = "".join(raw.split())
        spaced = _SIZE.fullmatch(joined)
        if joined != raw and spaced and spaced["unit"] in UNITS:
            raise SizeError(f"{text!r} is not a size: write the number and its unit together, {joined}")
        raise SizeError(f"{text!r} is not a size (examples: {EXAMPLES})")
    number, unit = match["number"], match["unit"]
    if match["sign"] == "-":
        raise SizeError(f"{text!r} is negative; a size is at least 0B")
    if not unit:
        raise SizeError(f"{text!r} has no unit: write a size with an IEC unit, e.g. {number}MiB or {number}B")
    if unit not in UNITS:
        lower = unit.lower()
        if lower in _SI:
            raise SizeError(
                f"{text!r} uses the decimal unit {unit} ({1000 ** (list(_SI).index(lower) + 1):,} bytes), which "
                f"leakwatch does not take: memory is counted in IEC units (powers of 1024); write "
                f"{number}{_SI[lower]} if you meant that"
            )
        hint = f"; did you mean {number}{_IEC_LOWER[lower]}?" if lower in _IEC_LOWER else ""
        raise SizeError(f"{text!r} has an unknown unit {unit!r} (units: {', '.join(UNITS)}){hint}")
    return float(number) * UNITS[unit]


def parse_rate(text: str, *, size: bool, per: float = 1.0) -> float:
    """The amount of `text` (a size when `size`, else a plain count) per `per` seconds: "48MiB/h"
    with per=1 is 48 MiB in bytes / 3600. Computed as the amount / the duration x per, exactly the
    amount where `per` is the written duration (10MiB/h per hour is 10485760.0)."""
    if isinstance(text, bool) or not isinstance(text, str):
        example = f"{text}MiB/h" if size else f"{text}/h"
        raise SizeError(f"{text!r} is not a rate: write an amount per duration, e.g. {example}")
    amount_text, slash, duration_text = text.strip().partition("/")
    if not slash or not duration_text.strip():
        raise SizeError(f"{text!r} is not a rate: write an amount per duration (examples: {RATE_EXAMPLES})")
    if size:
        amount = parse_size(amount_text)
    elif amount_text.strip().startswith("-"):
        raise SizeError(f"{text!r} is negative; a rate is at least 0")
    elif _COUNT.fullmatch(amount_text.strip()):
        amount = float(amount_text)
    else:
        raise SizeError(f"{text!r} is not a count per duration (examples: 5/h, 1000/d)")
    duration_text = duration_text.strip()
    try:
        seconds = parse_duration("1" + duration_text if duration_text.isalpha() else duration_text, positive=True)
    except LeakwatchError:
        raise SizeError(f"{text!r}: {duration_text!r} is not a duration such as h, 30m or 1d") from None
    return amount if seconds == per else amount / seconds * per
