"""Alerting rules: every rule the reference articles document (corrected) plus leak detection that
works under vLLM, and serving health. This module only assembles the groups, in the order the rule
file lists them; each group's alerts live in its own module (gpu_alerts, host_alerts,
metrics_alerts, serving_alerts, meta_alerts) and what they share beside them (alert_rule,
leak_conditions, running_out, profile_values)."""

from __future__ import annotations

from .gpu_alerts import gpu_alerts
from .host_alerts import host_alerts
from .meta_alerts import meta_alerts
from .metrics_alerts import metrics_alerts
from .serving_alerts import serving_alerts

GROUPS = (
    ("leakwatch.gpu", gpu_alerts),
    ("leakwatch.host", host_alerts),
    ("leakwatch.metrics", metrics_alerts),
    ("leakwatch.serving", serving_alerts),
    ("leakwatch.meta", meta_alerts),
)
