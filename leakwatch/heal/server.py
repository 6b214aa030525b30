"""The healer's HTTP side: POST /alerts (Alertmanager's webhook, bearer token), GET /metrics, GET /healthz.

Checks run cheapest and safest first: path, token (before a byte of the body is read), length,
content type, JSON, schema, remediation label. Every refusal is a 4xx with a one-line reason, and
nothing acts unless a firing alert carries the remediation label and passes the policy.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .config import HealerConfig
from .metrics import HealerMetrics
from .payload import Alert, PayloadError, parse
from .policy import REMEDIATE, Policy

log = logging.getLogger("leakwatch.heal")
WEBHOOK_PATH = "/alerts"


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
        return hmac.compare_digest(header[len("Bearer "):].strip().encode(), self._token)

    def notify(self, alerts: list[Alert]) -> tuple[int, str, dict]:
        """(HTTP status, outcome, body) for a parsed notification."""
        unlabelled = [a for a in alerts if a.status == "firing" and not self.policy.remediable(a)]
        if unlabelled:
            for a in unlabelled:
                log.warning("refused alert %s (fingerprint %s): not labelled %s=%r", a.name, a.fingerprint,
                            self.cfg.label_name, self.cfg.label_value)
            names = ", ".join(sorted({a.name for a in unlabelled}))[:200]
            return 422, "not_remediable", {
                "error": f"firing alert(s) {names} not labelled {self.cfg.label_name}=\"{self.cfg.label_value}\"; "
                         "route only remediation alerts to this receiver"}
        decisions = self.policy.decide(alerts)
        trigger = None
        for alert, decision in decisions:
            self.metrics.alerts.labels(decision).inc()
            log.info("alert %s status=%s fingerprint=%s starts_at=%.0f decision=%s", alert.name, alert.status,
                     alert.fingerprint, alert.starts_at, decision)
            if decision == REMEDIATE:
                trigger = alert
        self.metrics.restarts_last_hour.set(self.policy.restarts_last_hour())
        body = {"alerts": [{"alertname": a.name, "fingerprint": a.fingerprint, "decision": d} for a, d in decisions]}
        if trigger is None:
            return 200, "no_action", {**body, "action": "none"}
        self.worker = threading.Thread(target=self._remediate, args=(trigger,), name="healer-restart", daemon=True)
        self.worker.start()
        return 202, "accepted", {**body, "action": f"drain and restart {self.restarter.describe()}"}

    def _remediate(self, trigger: Alert) -> None:
        began_wall, began = time.time(), time.monotonic()
        self.metrics.in_progress.set(1)
        self.metrics.last_restart.set(began_wall)
        log.info("remediation begins for %s (fingerprint %s): waiting up to %.0fs for idle, then SIGTERM",
                 trigger.name, trigger.fingerprint, self.cfg.idle_wait_s)
        result = "failed"
        try:
            in_flight = self.probe.wait_idle(self.cfg.idle_wait_s)
            if in_flight is not None:
                self.metrics.in_flight_at_stop.set(in_flight)
            # A restarter that acts on the alert's target (Kubernetes: its pod) gets the alert.
            timing = self.restarter.restart(trigger) if getattr(self.restarter, "acts_on_alert", False) \
                else self.restarter.restart()
            self.metrics.drain_duration.set(timing.stop_s)
            log.info("%s stopped after %.1fs (in flight at stop: %s); started in %.1fs; waiting for /health",
                     self.restarter.describe(), timing.stop_s, in_flight, timing.start_s)
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


def make_handler(healer: Healer):
    cfg = healer.cfg
    metrics = healer.metrics

    class Handler(BaseHTTPRequestHandler):
        server_version = "leakwatch-healer"
        sys_version = ""
        timeout = 10  # seconds to send a request; a slow client cannot hold a thread for long

        def log_message(self, fmt, *args):
            log.debug("%s %s", self.address_string(), fmt % args)

        def _send(self, status: int, body: dict | bytes, outcome: str | None = None,
                  content_type: str = "application/json", headers: dict | None = None) -> None:
            if outcome:
                metrics.notifications.labels(outcome).inc()
            data = body if isinstance(body, bytes) else (json.dumps(body) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _refuse(self, status: int, outcome: str, message: str, **headers) -> None:
            # The body of a refused request is never read: close instead of reusing the connection.
            self.close_connection = True
            log.warning("refused %s %s from %s: %s", self.command, self.path[:80], self.client_address[0], message)
            self._send(status, {"error": message}, outcome, headers={**headers, "Connection": "close"})

        def do_GET(self):
            if self.path == "/metrics":
                self._send(200, generate_latest(metrics.registry), content_type=CONTENT_TYPE_LATEST)
            elif self.path in ("/healthz", "/-/healthy", "/-/ready"):
                self._send(200, {"status": "ok"})
            else:
                self._send(404, {"error": "not found"})

        do_HEAD = do_GET

        def _method_not_allowed(self):
            self._refuse(405, "method_not_allowed", f"{self.command} is not allowed", Allow="GET, POST")

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _method_not_allowed

        def do_POST(self):
            try:
                self._post()
            except Exception:
                log.exception("internal error on POST %s", self.path[:80])
                self.close_connection = True
                self._send(500, {"error": "internal error; see the healer's log"})

        def _post(self):
            if self.path != WEBHOOK_PATH:
                return self._refuse(404, "not_found", f"POST to {WEBHOOK_PATH}, not {self.path[:80]}")
            if not healer.authorized(self.headers.get("Authorization")):
                return self._refuse(401, "unauthorized", "missing or wrong bearer token",
                                    **{"WWW-Authenticate": 'Bearer realm="leakwatch-healer"'})
            if self.headers.get("Transfer-Encoding"):
                return self._refuse(411, "length_required", "chunked bodies are not accepted; send Content-Length")
            raw_length = self.headers.get("Content-Length")
            if raw_length is None:
                return self._refuse(411, "length_required", "Content-Length is required")
            try:
                length = int(raw_length)
                if length < 0:
                    raise ValueError
            except ValueError:
                return self._refuse(400, "bad_request", "Content-Length is not a number")
            if length > cfg.max_body_bytes:
                return self._refuse(413, "too_large", f"body of {length} bytes; at most {cfg.max_body_bytes}")
            ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
            if ctype != "application/json":
                return self._refuse(415, "unsupported_media_type", f"Content-Type {ctype[:60]!r}; send application/json")
            try:
                body = self.rfile.read(length)
            except OSError:
                return self._refuse(400, "bad_request", "could not read the body")
            if len(body) != length:
                return self._refuse(400, "bad_request", "body shorter than Content-Length")
            try:
                alerts = parse(body, cfg.max_alerts)
            except PayloadError as exc:
                outcome = {400: "bad_request", 413: "too_large"}.get(exc.status, "invalid_schema")
                return self._refuse(exc.status, outcome, str(exc))
            status, outcome, reply = healer.notify(alerts)
            self._send(status, reply, outcome)

    return Handler


class HealerServer(ThreadingHTTPServer):
    daemon_threads = True
    # Bounded concurrency: Alertmanager sends one notification at a time per group.
    request_queue_size = 16

    def handle_error(self, request, client_address):
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, TimeoutError)):
            # A client that went away (a scrape that timed out): nothing to fix here.
            log.debug("client %s went away: %s", client_address[0], exc)
            return
        log.exception("unexpected error serving %s", client_address[0])


def serve(healer: Healer, host: str, port: int) -> HealerServer:
    return HealerServer((host, port), make_handler(healer))
