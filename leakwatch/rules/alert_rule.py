"""One alerting rule as leakwatch writes it, and the annotation fragments that say where an alert
fires. Alert holds a rule's condition, its hysteresis (written into the expression, after
KEEP_FIRING_MARKER, where the backtester splits it again) and the healer's label on the remediated
ones; every group builds Alerts, so that shape and those texts live in one place."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.topology import DEPLOYMENT_LABEL
from ..heal import healer_settings

# The line between an alert's own condition and the one that keeps it firing (the backtester
# splits expressions there to replay the hysteresis; Prometheus reads it as a comment).
KEEP_FIRING_MARKER = "# leakwatch: keeps firing while"


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    expr: str
    for_: str
    summary: str
    description: str
    remediate: bool = False
    # Hysteresis: once firing, the alert stays firing while this (looser) expression holds, so a
    # leak that keeps leaking does not flap when its rate dips under a threshold between an
    # allocator's segments or at night. keep_firing_for does not exist in Debian's Prometheus 2.42,
    # so the expression reads the alert's own ALERTS series (written at each evaluation).
    keep_firing_while: str | None = None

    def rule(self, runbook_url: str) -> dict:
        labels = {"severity": self.severity}
        if self.remediate:
            # The label the healer acts on (config/healer.yaml), so rules and healer cannot drift.
            policy = healer_settings.load()
            labels[policy.label_name] = policy.label_value
        expr = self.expr
        if self.keep_firing_while:
            own = f'ALERTS{{alertname="{self.name}", alertstate="firing", severity="{self.severity}"}}'
            expr = (
                f"{expr}\n{KEEP_FIRING_MARKER}\nor (\n{self.keep_firing_while}\n)"
                f" and ignoring (alertname, alertstate, {', '.join(labels)}) {own}"
            )
        return {
            "alert": self.name,
            "expr": expr,
            "for": self.for_,
            "labels": labels,
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": f"{runbook_url}#{self.name.lower()}",
            },
        }


CARD = "GPU {{ $labels.gpu }} ({{ $labels.modelName }}) on {{ $labels.Hostname }}"
# The canary's side, where the series carry one (docs/canary.md); nothing without a canary.
SIDE = f"{{{{ with $labels.{DEPLOYMENT_LABEL} }}}} ({{{{ . }}}} deployment){{{{ end }}}}"
ROLE = "vLLM {{ $labels.role }}{{ with $labels.rank }} rank {{ . }}{{ end }} on {{ $labels.instance }}" + SIDE
