"""The drill checks its own alert figure before reporting it: which alert fired, on which series, and
that the injected leak could have raised it at all by then.

An alert 2.4 s after the first leaking request (issue 19, on a loaded machine) cannot come from the
leak: the rule needs its slice slopes to see growth and then holds for `for`. Such a figure is a
warm-up or control-phase alert, or one measured from the wrong moment, and the drill fails with that
explanation instead of reporting it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..core import alert_config
from ..core.promapi import Prometheus


@dataclass(frozen=True)
class LeakWindow:
    """How soon after a leak starts the host leak alert can fire, from config/alerts.yaml.

    The rule's slope is the `slice_quantile` of `leak_slices` slice slopes over `leak_window`
    (prometheus/rules/leakwatch-recording.yml). Prometheus interpolates quantiles at rank q (n - 1),
    so the value is above a positive threshold only if the slopes from index ceil(q (n - 1)) up are:
    at least k = n - ceil(q (n - 1)) slices must see growth. The oldest of them ends (k - 1) slices
    before now, so the leak must be older than (k - 1) slices, and the alert then pends for `for`."""

    slice_s: float
    slices_needed: int
    for_s: float

    @property
    def earliest_s(self) -> float:
        return (self.slices_needed - 1) * self.slice_s + self.for_s

    def describe(self) -> str:
        return (
            f"{self.slices_needed} of the slices ({self.slice_s:g}s each) must see growth and the alert then "
            f"pends {self.for_s:g}s: no earlier than {self.earliest_s:g}s after the leak starts"
        )


def leak_window(compression: float) -> LeakWindow:
    t = alert_config.load(time_scale=1.0 / compression)
    host = t.section("host")
    n = host.slices("leak_slices")
    needed = n - math.ceil(t.slice_quantile * (n - 1))
    return LeakWindow(host.seconds("leak_window") / n, max(needed, 1), host.seconds("leak_for"))


@dataclass
class AlertAttribution:
    alert: str
    window: LeakWindow
    alert_s: float | None = None
    labels: dict = field(default_factory=dict)  # the firing series
    pending_since_s: float | None = None  # relative to the leak start (negative: before it)
    control_alerts: list[dict] = field(default_factory=list)  # label sets seen during the control
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "alert": self.alert,
            "alert_s": self.alert_s,
            "labels": self.labels,
            "pending_since_s": self.pending_since_s,
            "earliest_s": self.window.earliest_s,
            "control_alerts": self.control_alerts,
            "failures": self.failures,
        }


def _series_samples(prom: Prometheus, expr: str, start: float, end: float, step: float) -> list[tuple[dict, float]]:
    return [(s["metric"], float(t)) for s in prom.query_range(expr, start, end, step) for t, _ in s["values"]]


def attribute(
    prom: Prometheus,
    alert: str,
    window: LeakWindow,
    *,
    control_start: float,
    leak_start: float,
    alert_at: float | None,
    role: str,
    step: float,
) -> AlertAttribution:
    """Check the leak alert against the leak: not seen before the leak (warm-up, control phase), fired
    on the role that leaks, pending no earlier than the leak began, and not sooner than the rule's
    windows allow. Every breach is a failure that says what happened."""
    out = AlertAttribution(alert, window)
    before = _series_samples(prom, f'ALERTS{{alertname="{alert}"}}', control_start, leak_start, step)
    seen = {tuple(sorted(m.items())) for m, _ in before}
    out.control_alerts = [dict(s) for s in sorted(seen)]
    if before:
        first = min(t for _, t in before)
        out.failures.append(
            f"{alert} was already {before[0][0].get('alertstate', 'active')} during the warm-up or "
            f"control phase ({first - leak_start:.0f}s before the leak began, on "
            f"{_describe(before[0][0])}): a drill figure measured from it would not be the leak's"
        )
    if alert_at is None:
        return out
    out.alert_s = alert_at - leak_start
    firing = _series_samples(
        prom, f'ALERTS{{alertname="{alert}", alertstate="firing"}}', leak_start, alert_at + step, step
    )
    if not firing:
        out.failures.append(
            f"{alert} was seen firing {out.alert_s:.1f}s into the leak, but Prometheus's ALERTS "
            "history has no firing sample for it: the figure cannot be attributed"
        )
        return out
    labels, _ = min(firing, key=lambda item: item[1])
    out.labels = {k: v for k, v in labels.items() if k not in ("__name__",)}
    if labels.get("role") != role:
        out.failures.append(f"{alert} fired on {_describe(labels)}, not on the role the drill leaks ({role})")
    pending = _series_samples(
        prom,
        f'ALERTS{{alertname="{alert}", alertstate="pending", role="{labels.get("role", "")}"}}',
        control_start,
        alert_at + step,
        step,
    )
    if pending:
        out.pending_since_s = min(t for _, t in pending) - leak_start
        if out.pending_since_s < 0:
            out.failures.append(
                f"{alert} on {_describe(labels)} was pending {-out.pending_since_s:.0f}s before the "
                "leak began: it was not raised by the leak"
            )
    if out.alert_s < window.earliest_s:
        out.failures.append(
            f"{alert} fired {out.alert_s:.1f}s after the leak began, but {window.describe()}: "
            "this alert is not the leak's (a warm-up or control alert, or a clock taken from "
            "the wrong moment)"
        )
    return out


def _describe(labels: dict) -> str:
    keep = [f'{k}="{v}"' for k, v in sorted(labels.items()) if k in ("role", "rank", "severity", "remediate")]
    return "{" + ", ".join(keep) + "}"
