"""Real Prometheus servers for tests: Debian's `prometheus` binary on a free port with a config we
write, stopped afterwards; and one serving a history we wrote (OpenMetrics -> `promtool tsdb
create-blocks-from openmetrics`)."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from leakwatch.core.ports import free_port
from leakwatch.native.programs import binary


@contextlib.contextmanager
def running_prometheus(config_yaml: str, data: Path, *flags: str):
    """Prometheus with `config_yaml`, its TSDB in `data`; yields its URL once it is ready."""
    data.mkdir(parents=True, exist_ok=True)
    config = data.parent / f"{data.name}.prometheus.yml"
    config.write_text(config_yaml)
    log_path = data.parent / f"{data.name}.prometheus.log"
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                *flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if requests.get(f"{url}/-/ready", timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"prometheus did not start: {log_path.read_text()[-2000:]}")
                time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def backfilled_prometheus(openmetrics: str):
    with tempfile.TemporaryDirectory(prefix="lw-backfill-") as tmp:
        tmp = Path(tmp)
        source = tmp / "history.om"
        source.write_text(openmetrics)
        data = tmp / "data"
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        with running_prometheus("global:\n  scrape_interval: 15s\n", data, "--storage.tsdb.retention.time=30d") as url:
            yield url
