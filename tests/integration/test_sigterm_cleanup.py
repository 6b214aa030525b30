"""A SIGTERM (a CI timeout, `kill`) stops the servers a command started: the real `leakwatch
backtest` is terminated while its private Prometheus answers queries, and neither the Prometheus nor
the work folder outlives it (Python's default would die at once and leave both behind)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

LEAKWATCH = str(Path(sys.executable).with_name("leakwatch"))


def _child_named(parent: psutil.Process, name: str) -> psutil.Process | None:
    """A child process called `name`; children that exit while being looked at (the backtest runs
    short-lived promtool commands too) are skipped, not an error."""
    for child in parent.children():
        try:
            if child.name() == name:
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def test_sigterm_during_a_backtest_stops_its_prometheus_and_removes_its_work_folder():
    # Two weeks of history: minutes of queries, so the signal lands while Prometheus runs.
    proc = subprocess.Popen(
        [LEAKWATCH, "backtest", "--scenario", "slow_leak", "--days", "14"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        command = psutil.Process(proc.pid)
        prometheus = None
        deadline = time.monotonic() + 300
        while prometheus is None and proc.poll() is None and time.monotonic() < deadline:
            prometheus = _child_named(command, "prometheus")
            time.sleep(0.2)
        assert prometheus is not None, "the backtest's Prometheus never started"
        workdir = next(arg.split("=", 1)[1] for arg in prometheus.cmdline() if arg.startswith("--storage.tsdb.path="))
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    _, alive = psutil.wait_procs([prometheus], timeout=10)
    assert not alive, f"the backtest's Prometheus (pid {prometheus.pid}) outlived it"
    assert not Path(workdir).parent.exists(), f"{Path(workdir).parent} left behind"
