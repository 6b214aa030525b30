"""When would our rules page for a measured real leak in production? The leak's bytes per triggering
request, replayed through the backtest (the simulated Janeway host of `make bench-detection`, every
request a trigger) at the article's traffic and at a busy API's, with our production rules: hours
from the start to the first HostMemoryLeak."""

from __future__ import annotations

from dataclasses import replace

from ..backtest.scenario_run import OURS, run_scenario
from ..scenarios.model import Leak, Scenario, Traffic

ALERT = "HostMemoryLeak"
# traffic name -> (requests per day, days simulated): the article's 1000 a day over a week (a leak
# of KBs per request then grows a few MB a day: no page is the right answer), 10 a second over a day.
TRAFFIC = {"1000_per_day": (1000.0, 7.0), "10_per_s": (10.0 * 86400, 1.0)}


def scenario(role: str, bytes_per_request: float, requests_per_day: float, days: float) -> Scenario:
    return Scenario(
        f"real_leak_{role}",
        f"vLLM's own leak: {bytes_per_request:.0f} B per request in the {role}",
        days=days,
        traffic=replace(Traffic(), requests_per_day=requests_per_day),
        leaks=(Leak(role, bytes_per_request),),
    )


def hours_to_leak_alert(role: str, bytes_per_request: float) -> dict[str, float | None]:
    """Traffic name -> hours from the start to the first HostMemoryLeak (None: none in the days simulated)."""
    out: dict[str, float | None] = {}
    for name, (per_day, days) in TRAFFIC.items():
        outcome = run_scenario(name, scenario=scenario(role, bytes_per_request, per_day, days))
        fired = [
            e.firing_at - outcome.origin
            for r in outcome.alerts(OURS)
            if r.rule.name == ALERT
            for e in r.fired
            if e.firing_at is not None and e.firing_at >= outcome.origin
        ]
        out[name] = min(fired) / 3600 if fired else None
    return out
