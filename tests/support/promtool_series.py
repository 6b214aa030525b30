"""Expands promtool's input-series notation ('22528+20x90', '1x5', '0 1 2') into samples, so that
the backtester can replay exactly what a promtool unit test feeds the rules."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"^(-?[0-9.e+]+?)(?:([+-])([0-9.e]+))?x(\d+)$")


def expand(values: str) -> list[float]:
    out: list[float] = []
    for token in str(values).split():
        match = _TOKEN.match(token)
        if match:
            start, sign, step, count = match.groups()
            delta = float(step or 0) * (-1 if sign == "-" else 1)
            out.extend(float(start) + i * delta for i in range(int(count) + 1))
        elif token in ("_", "stale") or token.startswith("_x"):
            raise ValueError(f"gaps and stale markers ({token!r}) are not supported here")
        else:
            out.append(float(token))
    return out


def to_openmetrics(input_series: list[dict], interval_s: float) -> str:
    """The series as an OpenMetrics text with timestamps from 0, one sample per interval."""
    lines = []
    for item in input_series:
        series = item["series"].strip()
        for i, value in enumerate(expand(item["values"])):
            lines.append(f"{series} {value!r} {i * interval_s:g}")
    return "\n".join(lines) + "\n# EOF\n"
