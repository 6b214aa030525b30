"""The exporter's HTTP endpoint (/metrics, /-/healthy) and its background sampler."""

from __future__ import annotations

import logging
import math
import socketserver
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ..core.settings import load as load_settings
from .collector import VllmMemoryCollector, scrape_timeout

log = logging.getLogger("leakwatch.exporter")

HEALTH_PATH = load_settings().service("leakwatch_exporter").ready_path


def make_app(registry: CollectorRegistry):
    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
            with scrape_timeout(prometheus_scrape_timeout(environ)):
                body = encoder(registry)
            start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
            return [body]
        if path == HEALTH_PATH:
            # Alive and serving; whether vLLM is up is a metric (leakwatch_vllm_up), not our health.
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [f"leakwatch exporter: metrics at /metrics, health at {HEALTH_PATH}\n".encode()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


def prometheus_scrape_timeout(environ: dict) -> float | None:
    """Prometheus's timeout for this scrape (its X-Prometheus-Scrape-Timeout-Seconds header); None
    when absent or not a positive number (curl, other scrapers: vLLM is then waited for)."""
    try:
        seconds = float(environ.get("HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS", ""))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):  # one line per scrape would drown the log
        pass


def serve(registry: CollectorRegistry, address: str, port: int):
    """Starts serving in a daemon thread; returns the server (call .shutdown() to stop)."""
    server = make_server(address, port, make_app(registry), _ThreadingServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


class Sampler:
    """Samples between scrapes so a burst's peak and the idle period after it are seen even when
    Prometheus scrapes every 15 s or more. A sample newer than `interval_s` (e.g. a scrape's) is reused."""

    def __init__(self, collector: VllmMemoryCollector, interval_s: float):
        self.collector = collector
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        tick = max(0.05, min(1.0, self.interval_s / 4))
        while not self._stop.wait(tick):
            try:
                self.collector.sample_if_stale(self.interval_s)
            except Exception:  # the sampler must outlive any surprise; the scrape path reports it
                log.exception("background sample failed")
