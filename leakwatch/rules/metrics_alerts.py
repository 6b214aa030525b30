"""The leakwatch.metrics group: vLLM's /metrics gaining series. Churning label values grow the API
server's memory and Prometheus's while no request leaks, so this growth is read from the number of
series the exporter counts on /metrics, not from any process's memory."""

from __future__ import annotations

from ..core.alert_config import number
from .alert_rule import SIDE, Alert
from .promql import fill
from .recording import Context


def metrics_alerts(ctx: Context) -> list[Alert]:
    m = ctx.thresholds.section("metrics")
    return [
        Alert(
            "VLLMMetricsCardinalityGrowing",
            "warning",
            f"{ctx.series_deriv} * 3600 > {number(m.per_second('series_min_growth_rate') * 3600)}\n"
            f"unless {ctx.on_side()} {ctx.restarted_within(m.seconds('series_window'), 'metrics')}",
            m.dur("series_for"),
            "vLLM's /metrics keeps gaining series (label cardinality).",
            fill(
                "vLLM's /metrics on {{ $labels.instance }}"
                + SIDE
                + " gains {{ $value | humanize }} series per hour (in most "
                "slices of the last <window>). Churning label values (e.g. per-adapter labels) grow the API "
                "server's memory and Prometheus's.",
                window=m.dur("series_window"),
            ),
        )
    ]
