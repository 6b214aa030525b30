"""The Prometheus target of a running load test: a file_sd file that exists only while Locust runs.

Prometheus' `loadgen` job reads `loadgen-*.json` from a targets folder (file_sd_configs). The Locust
master writes its file when its exporter starts and deletes it when it quits, so a load test that is
not running leaves no target behind: no permanently down `up` series for alerts to page on. A file
left by a killed run names its pid and is removed by the next run's start-up (or `prune`).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import psutil

FILE_PREFIX = "loadgen-"


def target_file(directory: Path, pid: int | None = None) -> Path:
    return Path(directory) / f"{FILE_PREFIX}{socket.gethostname()}-{pid or os.getpid()}.json"


def write_target(directory: Path, address: str, labels: dict[str, str] | None = None) -> Path:
    """Atomically writes this process's target file (Prometheus never sees a half-written one)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    prune(directory)
    path = target_file(directory)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps([{"targets": [address], "labels": labels or {}}], indent=1) + "\n")
    os.replace(tmp, path)
    return path


def remove_target(path: Path) -> None:
    Path(path).unlink(missing_ok=True)


def prune(directory: Path) -> list[Path]:
    """Deletes target files of this host's load tests whose process is gone."""
    removed = []
    host = socket.gethostname()
    for path in Path(directory).glob(f"{FILE_PREFIX}{host}-*.json"):
        try:
            pid = int(path.stem.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        if not psutil.pid_exists(pid):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
