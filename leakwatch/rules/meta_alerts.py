"""The leakwatch.meta group: the alerting pipeline itself (Prometheus failing to evaluate rules,
Alertmanager failing to deliver, and the always-firing Watchdog). An alert that is never
evaluated or never delivered is silent, so these are what say that the others cannot speak."""

from __future__ import annotations

from ..core.durations import format_duration
from .alert_rule import Alert
from .recording import Context


def meta_alerts(ctx: Context) -> list[Alert]:
    m = ctx.thresholds.section("meta")
    return [
        Alert(
            "PrometheusRuleFailures",
            "warning",
            f"increase(prometheus_rule_evaluation_failures_total[{m.dur('rule_failures_window')}]) > 0",
            m.dur("rule_failures_for"),
            "Prometheus fails to evaluate some rules.",
            "Prometheus at {{ $labels.instance }} failed {{ $value | humanize }} evaluations of rule group "
            "{{ $labels.rule_group }}; the alerts in it may stay silent.",
        ),
        Alert(
            "AlertmanagerNotificationsFailing",
            "warning",
            f"increase(alertmanager_notifications_failed_total[{m.dur('notifications_window')}]) > 0",
            m.dur("notifications_for"),
            "Alertmanager cannot deliver notifications to a receiver.",
            "Alertmanager at {{ $labels.instance }} failed {{ $value | humanize }} notifications through "
            "{{ $labels.integration }}; for the remediation webhook this means the healer cannot act.",
        ),
        Alert(
            "Watchdog",
            "none",
            "vector(1)",
            format_duration(60 * ctx.thresholds.time_scale),
            "Always firing: proves the path from Prometheus through Alertmanager works.",
            "This alert always fires. Route it to a dead man's switch (a heartbeat that pages when "
            "notifications stop); if it is missing, alerting is broken.",
        ),
    ]
