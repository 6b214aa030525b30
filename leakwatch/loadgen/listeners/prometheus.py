"""The Prometheus exporter of the load generator's own metrics, and the file_sd target that lets the
stack's Prometheus find it (removed when Locust quits)."""

from __future__ import annotations

import atexit
import logging
from pathlib import Path

from ...core.settings import load as load_settings
from ...core.topology import reachable_host
from .. import file_sd
from ..metric_collector import RunState, registry

log = logging.getLogger("leakwatch.loadgen")


class PrometheusExporter:
    """Serves /metrics from the master (or the local runner) for the whole run."""

    def __init__(self, run):
        self.run = run
        self.server = None
        self.sd_file: Path | None = None
        if run.role != "worker":
            run.env.events.quitting.add_listener(lambda **kwargs: self.stop())
            self.start()

    def start(self) -> None:
        from gevent.pywsgi import WSGIServer
        from prometheus_client import make_wsgi_app

        run, opts = self.run, self.run.options
        settings = load_settings()
        port = opts.metrics_port if opts.metrics_port is not None else settings.service("locust_exporter").port
        if port == -1:
            return
        bind = settings.bind_address
        state = RunState(
            shape=lambda: run.options.shape if run.options else "",
            model=lambda: run.model or (run.options.model if run.options else ""),
            users=lambda: run.env.runner.user_count if run.env.runner else 0,
            target_rate=run.target_rate,
        )
        app = make_wsgi_app(registry(lambda: run.stats, state))
        server = WSGIServer((bind, port), app, log=None, error_log=None)
        try:
            server.start()
        except OSError as exc:
            log.error(
                "cannot serve load-generator metrics on %s:%s (%s); pick another port with --metrics-port "
                "(0: any free port, -1: off)",
                bind,
                port,
                exc,
            )
            return
        self.server = server
        port = server.server_port
        log.info("load-generator metrics for Prometheus: http://%s:%d/metrics", bind, port)
        sd_dir = self._sd_dir()
        if sd_dir:
            host = opts.sd_host or reachable_host(bind)
            self.sd_file = file_sd.write_target(sd_dir, f"{host}:{port}")
            atexit.register(self.stop)
            log.info("Prometheus discovers it through %s (removed when Locust quits)", self.sd_file)

    def _sd_dir(self) -> Path | None:
        value = self.run.options.sd_dir
        if value == "auto":
            from ...native.runner import NativeStack  # only to find a running native stack's folder

            stack = NativeStack()
            return stack.layout.targets if stack.is_running() else None
        return Path(value) if value else None

    def stop(self) -> None:
        if self.sd_file is not None:
            file_sd.remove_target(self.sd_file)
            self.sd_file = None
        if self.server is not None:
            self.server.stop(timeout=1)
            self.server = None
