"""Compose: starts the exporter again after vLLM restarted without the healer.

The exporter shares vLLM's PID namespace (it reads vLLM's processes in /proc). When vLLM's container
exits (an OOM kill, a crash, a `docker restart` by hand) the exporter dies with it; Docker's restart
policy tries to start it while vLLM is still down, fails to join the namespace and never tries again
(moby/moby#35502). The leak alerts would be blind from the very event they exist for. The healer's
own restarts start the exporter afterwards (DockerRestarter.restart); this loop covers every other
restart, through the one exporter start the socket proxy allows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .restarters import DockerRestarter, RestartError

log = logging.getLogger("leakwatch.heal")


class ExporterKeeper:
    def __init__(self, restarter: DockerRestarter, interval_s: float, on_started: Callable[[], None] = lambda: None):
        self.restarter = restarter
        self.interval_s = interval_s
        self.on_started = on_started
        self._stop = threading.Event()
        self._last_error: str | None = None

    def check_once(self) -> str | None:
        """The exporter's name when it was stopped and has been started now."""
        try:
            started = self.restarter.start_stopped_exporter()
        except RestartError as exc:
            # vLLM down or restarting: expected for a while, so logged once per kind of error.
            if str(exc) != self._last_error:
                log.info("exporter check: %s (retrying every %gs)", exc, self.interval_s)
                self._last_error = str(exc)
            return None
        self._last_error = None
        if started:
            log.warning("started %s: it had stopped with vLLM's PID namespace (vLLM restarted)", started)
            self.on_started()
        return started

    def run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check_once()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="exporter-keeper", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
