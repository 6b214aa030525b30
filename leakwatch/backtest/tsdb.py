"""A throw-away Prometheus over backfilled history: promtool turns OpenMetrics files into TSDB
blocks, and the Debian `prometheus` binary serves queries on them (no scraping, no rules)."""

from __future__ import annotations

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from ..core.errors import LeakwatchError
from ..core.ports import free_port
from ..core.promapi import Prometheus
from ..core.settings import load as load_settings
from ..native.programs import binary


def create_blocks(files: list[Path], data_dir: Path, jobs: int = 2) -> None:
    """`promtool tsdb create-blocks-from openmetrics` for each file (2-hour blocks)."""
    promtool = shutil.which("promtool")
    if not promtool:
        raise LeakwatchError("promtool is not installed (Debian package 'prometheus'; `make setup-dev` installs it)")
    data_dir.mkdir(parents=True, exist_ok=True)

    def one(path: Path) -> None:
        result = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(path), str(data_dir)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise LeakwatchError(
                f"promtool could not import {path.name}: {(result.stderr or result.stdout).strip()[-500:]}"
            )

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, files))


class TSDBServer:
    """`prometheus` on a data directory, listening on a free loopback port; restartable so that
    blocks written meanwhile are loaded."""

    def __init__(self, data_dir: Path, lookback_s: float, log: Path):
        self.data_dir = Path(data_dir)
        self.lookback_s = lookback_s
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.config = self.data_dir.parent / "prometheus-backtest.yml"

    def start(self) -> Prometheus:
        self.config.write_text("# backtest: no scraping, no rules; queries only\nglobal: {}\n")
        self.port = free_port()
        cmd = [
            binary("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.data_dir}",
            # Retention counts back from the newest block, so old history is kept as it is.
            "--storage.tsdb.retention.time=36500d",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--query.lookback-delta={max(1, round(self.lookback_s))}s",
            "--query.max-samples=200000000",
            "--query.timeout=10m",
        ]
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        api = Prometheus(f"http://127.0.0.1:{self.port}", timeout=600)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LeakwatchError(f"prometheus exited ({self.proc.returncode}); see {self.log}:\n" + self._tail())
            try:
                if (
                    requests.get(
                        f"{api.base_url}{load_settings().service('prometheus').ready_path}", timeout=2
                    ).status_code
                    == 200
                ):
                    return api
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise LeakwatchError(f"prometheus did not become ready on {self.data_dir}; see {self.log}:\n" + self._tail())

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> Prometheus:
        self.stop()
        return self.start()

    def _tail(self) -> str:
        try:
            return "".join(self.log.read_text(errors="replace").splitlines(True)[-15:])
        except OSError:
            return ""

    def __enter__(self) -> TSDBServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
