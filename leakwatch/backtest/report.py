"""Plain-text and JSON views of a backtest: when each alert first fired, and how often."""

from __future__ import annotations

import time

from .rule_evaluator import BacktestResult


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts)) + "Z"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f}"


def table(result: BacktestResult, origin: float, origin_name: str) -> list[str]:
    fired = sorted((r for r in result.alerts if r.first_firing is not None), key=lambda r: r.first_firing)
    quiet = len(result.alerts) - len(fired)
    lines = [f"{'alert':<44} {'rules':<26} {'first firing':<18} {'min after ' + origin_name:>18} {'times':>6}"]
    for r in fired:
        lines.append(
            f"{r.rule.key:<44} {r.rule.source:<26} {utc(r.first_firing):<18} "
            f"{minutes(r.first_firing - origin):>18} {len(r.fired):>6}"
        )
    lines.append(f"{quiet} other alert rule(s) never fired.")
    return lines


def as_json(result: BacktestResult, origin: float) -> dict:
    return {
        "start": result.start,
        "end": result.end,
        "step_s": result.step_s,
        "origin": origin,
        "timings_s": {k: round(v, 2) for k, v in result.timings.items()},
        "alerts": [
            {
                "alert": r.rule.name,
                "severity": r.rule.severity,
                "rules": r.rule.source,
                "first_firing": r.first_firing,
                "minutes_after_origin": None if r.first_firing is None else round((r.first_firing - origin) / 60, 1),
                "episodes": [
                    {"labels": e.labels, "pending_at": e.pending_at, "firing_at": e.firing_at, "ended_at": e.ended_at}
                    for e in r.fired
                ],
            }
            for r in result.alerts
        ],
    }
