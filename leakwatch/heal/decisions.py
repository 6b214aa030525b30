"""The healer's decisions on Alertmanager's notifications, and the restart it runs in the background.
The HTTP side is leakwatch/heal/http_server.py."""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time

from .healer_metrics import HealerMetrics
from .healer_settings import HealerConfig
from .payload import Alert
from .policy import NOT_REMEDIABLE, REMEDIATE, Policy, StateWriteError
from .restarters import RestartError, TargetRefused

log = logging.getLogger("leakwatch.heal")


def safe(value: str, limit: int = 120) -> str:
    """A client's string for a log line: control characters escaped (a newline cannot forge a line)."""
    return json.dumps(str(value)[:limit], ensure_ascii=True)[1:-1]


class Healer:
    """Decides on notifications and runs at most one drain-and-restart at a time in the background."""

    def __init__(self, cfg: HealerConfig, token: str, policy: Policy, restarter, probe, metrics: HealerMetrics):
        self.cfg = cfg
        self._token = token.encode()
        self.policy = policy
        self.restarter = restarter
        self.probe = probe
        self.metrics = metrics
        self.worker: threading.Thread | None = None
        metrics.cooldown.set(cfg.cooldown_s)
        metrics.max_per_hour.set(cfg.max_restarts_per_hour)
        metrics.restarts_last_hour.set(policy.restarts_last_hour())
        if policy.state.restarts:
            metrics.last_restart.set(max(policy.state.restarts))

    def authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), self._token)

    def notify(self, alerts: list[Alert]) -> tuple[int, str, dict]:
        """(HTTP status, outcome, body) for a parsed notification."""
        refused = [(a, self.policy.refusal(a)) for a in alerts if a.status == "firing"]
        refused = [(a, why) for a, why in refused if why]
        if refused:
            # One refused firing alert spoils the whole notification: misrouting is surfaced, not half-acted on.
            for a, why in refused:
                log.warning(
                    "refused alert %s (fingerprint %s, job %s, instance %s): %s",
                    safe(a.name),
                    a.fingerprint,
                    safe(a.labels.get("job", "")),
                    safe(a.labels.get("instance", "")),
                    why,
                )
            reasons = "; ".join(f"{safe(a.name)}: {why}" for a, why in refused)[:400]
            return (
                422,
                "not_remediable",
                {"error": f"firing alert(s) refused ({reasons}); route only remediation alerts of this stack here"},
            )
        target_answer = self._foreign_targets(alerts)
        if target_answer is not None:
            return target_answer
        try:
            decisions = self.policy.decide(alerts)
        except StateWriteError as exc:
            # 5xx: Alertmanager retries the notification; nothing was claimed, so the retry decides afresh.
            log.error("%s; nothing restarted, Alertmanager will retry", exc)
            return 503, "unavailable", {"error": "the healer cannot persist its state; nothing restarted (see its log)"}
        trigger = None
        for alert, decision in decisions:
            self.metrics.alerts.labels(decision).inc()
            log.info(
                "alert %s status=%s fingerprint=%s starts_at=%.0f decision=%s",
                safe(alert.name),
                alert.status,
                alert.fingerprint,
                alert.starts_at,
                decision,
            )
            if decision == REMEDIATE:
                trigger = alert
        self.metrics.restarts_last_hour.set(self.policy.restarts_last_hour())
        body = {"alerts": [{"alertname": a.name, "fingerprint": a.fingerprint, "decision": d} for a, d in decisions]}
        if trigger is None:
            return 200, "no_action", {**body, "action": "none"}
        self.worker = threading.Thread(target=self._remediate, args=(trigger,), name="healer-restart", daemon=True)
        self.worker.start()
        return 202, "accepted", {**body, "action": f"drain and restart {self.restarter.describe()}"}

    def _foreign_targets(self, alerts: list[Alert]) -> tuple[int, str, dict] | None:
        """A restarter that acts on the alert's target (Kubernetes: its pod) checks each firing alert's
        target before anything is claimed: a pod of another release costs no cap and no cooldown
        (422), and an API server that cannot tell now gets Alertmanager to retry (503)."""
        target = getattr(self.restarter, "target", None)
        if target is None:
            return None
        for alert in alerts:
            # An episode already acted on names a pod that is gone by now: its repeats are duplicates
            # (200), not refusals that Alertmanager would count as failed notifications.
            if alert.status != "firing" or self.policy.already_decided(alert):
                continue
            try:
                target(alert.labels)
            except RestartError as exc:
                log.warning("alert %s (fingerprint %s): %s", safe(alert.name), alert.fingerprint, exc)
                if isinstance(exc, TargetRefused):
                    self.metrics.alerts.labels(NOT_REMEDIABLE).inc()
                    return 422, "not_remediable", {"error": f"{safe(alert.name)}: {safe(str(exc), 300)}"}
                return 503, "unavailable", {"error": "cannot check the alert's target now; nothing restarted"}
        return None

    def _reconcile(self) -> None:
        """A restart is a transaction that ends with vLLM running or a log and a metric that say it is
        not: after a failed one, a restarter that can reconcile (supervisord) starts what is stopped."""
        reconcile = getattr(self.restarter, "reconcile", None)
        if reconcile is None:
            return
        try:
            found = reconcile()
        except Exception as exc:  # noqa: BLE001 - logged and counted like the restart itself
            log.error("reconciling after the failed restart failed: %s", exc)
            self.metrics.reconciles.labels("failed").inc()
            return
        log.warning("reconciled after the failed restart: %s was %s", self.restarter.describe(), found)
        self.metrics.reconciles.labels(found).inc()

    def _remediate(self, trigger: Alert) -> None:
        began_wall, began = time.time(), time.monotonic()
        self.metrics.in_progress.set(1)
        self.metrics.last_restart.set(began_wall)
        log.info(
            "remediation begins for %s (fingerprint %s): waiting up to %.0fs for idle, then SIGTERM",
            safe(trigger.name),
            trigger.fingerprint,
            self.cfg.idle_wait_s,
        )
        result = "failed"
        try:
            in_flight = self.probe.wait_idle(self.cfg.idle_wait_s)
            if in_flight is not None:
                self.metrics.in_flight_at_stop.set(in_flight)
            # A restarter that acts on the alert's target (Kubernetes: its pod) gets the alert.
            timing = (
                self.restarter.restart(trigger)
                if getattr(self.restarter, "acts_on_alert", False)
                else self.restarter.restart()
            )
            self.metrics.drain_duration.set(timing.stop_s)
            log.info(
                "%s stopped after %.1fs (in flight at stop: %s); started in %.1fs; waiting for vLLM's health check",
                self.restarter.describe(),
                timing.stop_s,
                in_flight,
                timing.start_s,
            )
            if self.probe.wait_healthy(self.cfg.ready_timeout_s):
                result = "success"
            else:
                log.error("vLLM not healthy %.0fs after the restart", self.cfg.ready_timeout_s)
        except Exception as exc:  # noqa: BLE001 - a failed restart is logged and counted, never fatal
            log.error("restart failed: %s", exc)
        finally:
            duration = time.monotonic() - began
            self.metrics.restart_duration.set(duration)
            self.metrics.restarts.labels(result).inc()
            self.metrics.in_progress.set(0)
            self.policy.finish()
            log.info("remediation %s after %.1fs", result, duration)
        if result == "failed":
            # After the failure is on record (a hung supervisord must not hold the healer), so the
            # next episode can be decided; its restart waits for this one's reconciling.
            self._reconcile()
