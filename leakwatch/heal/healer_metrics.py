"""The healer's Prometheus metrics (config/metrics/leakwatch-healer.csv), in their own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics

from ..core.metric_catalogue import METRICS_DIR, load_csv
from .policy import DECISIONS

CSV = METRICS_DIR / "leakwatch-healer.csv"
OUTCOMES = (
    "accepted",
    "no_action",
    "unauthorized",
    "too_large",
    "length_required",
    "unsupported_media_type",
    "bad_request",
    "invalid_schema",
    "not_remediable",
    "not_found",
    "method_not_allowed",
    "headers_too_large",
    "request_timeout",
    "unavailable",
)
RESULTS = ("success", "failed")
# What reconciling after a failed restart found: vLLM still running, stopped and started, or neither.
RECONCILED = ("running", "started", "failed")


class HealerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        # *_created series double the counters' series for no use here (process-wide setting).
        disable_created_metrics()
        self.registry = registry or CollectorRegistry()
        spec = load_csv(CSV)

        def make(cls, name, **kw):
            row = spec[name]
            return cls(
                name.removesuffix("_total") if cls is Counter else name,
                row["help"],
                row["labels"],
                registry=self.registry,
                **kw,
            )

        self.notifications = make(Counter, "leakwatch_healer_notifications_total")
        self.alerts = make(Counter, "leakwatch_healer_alerts_total")
        self.restarts = make(Counter, "leakwatch_healer_restarts_total")
        self.exporter_starts = make(Counter, "leakwatch_healer_exporter_starts_total")
        self.reconciles = make(Counter, "leakwatch_healer_reconciles_total")
        self.last_restart = make(Gauge, "leakwatch_healer_last_restart_timestamp_seconds")
        self.restart_duration = make(Gauge, "leakwatch_healer_last_restart_duration_seconds")
        self.drain_duration = make(Gauge, "leakwatch_healer_last_drain_duration_seconds")
        self.in_flight_at_stop = make(Gauge, "leakwatch_healer_requests_in_flight_at_stop")
        self.restarts_last_hour = make(Gauge, "leakwatch_healer_restarts_last_hour")
        self.in_progress = make(Gauge, "leakwatch_healer_remediation_in_progress")
        self.cooldown = make(Gauge, "leakwatch_healer_cooldown_seconds")
        self.max_per_hour = make(Gauge, "leakwatch_healer_max_restarts_per_hour")
        # Every label value exists from the start, so rate() and absent() behave before the first event.
        for outcome in OUTCOMES:
            self.notifications.labels(outcome)
        for decision in DECISIONS:
            self.alerts.labels(decision)
        for result in RESULTS:
            self.restarts.labels(result)
        for found in RECONCILED:
            self.reconciles.labels(found)
