"""Runs the real `locust` command headless on loadtest/ and collects what it wrote."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from leakwatch.core.paths import REPO_ROOT
from leakwatch.core.ports import free_port
from leakwatch.loadgen.report_writers import read_request_log

LOCUST = str(Path(sys.executable).with_name("locust"))
LOADTEST = REPO_ROOT / "loadtest"


@dataclass
class LocustRun:
    returncode: int
    output: str
    out_dir: Path

    def csv(self, suffix: str) -> list[dict]:
        with open(self.out_dir / f"run_{suffix}.csv", newline="") as fh:
            return list(csv.DictReader(fh))

    @property
    def summary(self) -> dict:
        return json.loads((self.out_dir / "summary.json").read_text())

    @property
    def requests(self) -> list[dict]:
        return read_request_log(self.out_dir / "requests.csv")

    def outcomes(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for workload in self.summary["workloads"].values():
            for outcome, n in workload["outcomes"].items():
                total[outcome] = total.get(outcome, 0) + n
        return total


def run_locust(
    out_dir: Path,
    host: str,
    *args: str,
    locustfile: Path = LOADTEST,
    timeout: float = 300,
    env: dict | None = None,
    background: bool = False,
):
    """`locust -f loadtest/ --headless ...` writing CSV, HTML, request log and summary into out_dir.

    Prometheus' exporter binds a free port (Prometheus finds it through the file_sd target when a
    native stack's state dir is in LEAKWATCH_STATE_DIR). Returns a LocustRun, or the Popen when
    `background` is set."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        LOCUST,
        "-f",
        str(locustfile),
        "--headless",
        "-H",
        host,
        "--only-summary",
        "--csv",
        str(out_dir / "run"),
        "--html",
        str(out_dir / "report.html"),
        "--request-log",
        str(out_dir / "requests.csv"),
        "--loadgen-summary",
        str(out_dir / "summary.json"),
        *args,
    ]
    full_env = {**os.environ, "LOCUST_EXPORTER_PORT": str(free_port()), **(env or {})}
    if background:
        return subprocess.Popen(
            cmd,
            stdout=open(out_dir / "locust.log", "w"),
            stderr=subprocess.STDOUT,
            cwd=out_dir,
            env=full_env,
            text=True,
        )
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=out_dir, env=full_env)
    return LocustRun(proc.returncode, proc.stdout + proc.stderr, out_dir)


def finish(proc: subprocess.Popen, out_dir: Path, timeout: float) -> LocustRun:
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return LocustRun(proc.returncode, (out_dir / "locust.log").read_text(), out_dir)
