"""A real Prometheus serving a history we wrote: OpenMetrics -> `promtool tsdb create-blocks-from
openmetrics` -> Debian's `prometheus` binary on a free port, stopped afterwards."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from leakwatch.native.ports import free_port
from leakwatch.native.programs import binary


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
        config = tmp / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 15s\n")
        port = free_port()
        log = open(tmp / "prometheus.log", "w")
        proc = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=30d",
                f"--web.listen-address=127.0.0.1:{port}",
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
                    raise RuntimeError(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}")
                time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
