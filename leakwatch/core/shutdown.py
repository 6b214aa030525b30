"""SIGTERM unwinds a command the way Ctrl-C does, so the servers it started stop with it."""

from __future__ import annotations

import signal
import sys


def unwind_on_sigterm() -> None:
    """SIGTERM (a CI timeout, `kill`, `timeout`) becomes SystemExit(143) in the main thread.

    Python's default is to die at once, which leaves a backtest's Prometheus, a drill's stack or a
    bench's vLLM running; as an exception, the `finally` blocks and context managers that stop them
    run first. A second SIGTERM during that clean-up is ignored (SIGKILL still ends the process)."""
    signal.signal(signal.SIGTERM, _exit)


def _exit(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(128 + signum)
