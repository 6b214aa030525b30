"""A hung vLLM (its socket accepts, nothing answers: a stopped API server, a wedged event loop) must
not make the exporter miss Prometheus's scrape timeout. The exporter then answers without vLLM's
reading (leakwatch_vllm_up 0) and keeps reporting /proc, so VLLMEngineDown and the leak rules are not
blind while vLLM hangs. Found by the fault drill of EngineCore killed under a SIGSTOPped API server:
with the drill's 5 s scrape timeout the exporter's 5 s wait for vLLM made every one of its scrapes
fail, and VLLMEngineDown never fired. Real Prometheus, our exporter as its own process."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from leakwatch.core.ports import free_port
from leakwatch.core.promapi import Prometheus
from tests.support.prom_backfill import running_prometheus

SCRAPE_INTERVAL_S = 2
# Far beyond Prometheus's timeout: only the scrape's own deadline can keep the scrape in time.
VLLM_TIMEOUT_S = 30


@pytest.fixture
def hung_vllm_url():
    """A listening socket nobody accepts on: connections complete (the kernel's backlog), requests
    are never answered."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def exporter(tmp_path, hung_vllm_url):
    port = free_port()
    with open(tmp_path / "exporter.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "leakwatch", "exporter", "--vllm-url", hung_vllm_url, "--port", str(port)]
            + ["--listen-address", "127.0.0.1", "--vllm-timeout", str(VLLM_TIMEOUT_S)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_hung_vllm_does_not_make_the_exporters_scrapes_time_out(tmp_path, exporter):
    config = (
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL_S}s\n  scrape_timeout: {SCRAPE_INTERVAL_S}s\n"
        f"scrape_configs:\n  - job_name: exporter\n    static_configs:\n      - targets: ['{exporter}']\n"
    )
    with running_prometheus(config, tmp_path / "prometheus") as url:
        prom = Prometheus(url)
        # Six scrapes past the first one (which may wait behind the exporter's first background
        # sample, taken before it has seen a scrape timeout).
        prom.wait_for('count_over_time(up{job="exporter"}[1m]) >= 7', timeout=120)
        window = f"[{5 * SCRAPE_INTERVAL_S}s]"
        ups = prom.query(f'min_over_time(up{{job="exporter"}}{window})')
        assert ups and float(ups[0]["value"][1]) == 1, (ups, (tmp_path / "exporter.log").read_text()[-2000:])
        assert prom.query('leakwatch_vllm_up{job="exporter"} == 0'), "the exporter claims to have read vLLM"
        assert prom.query('leakwatch_processes{job="exporter"}'), "the /proc part of the scrape is missing"
        durations = prom.query(f'max_over_time(scrape_duration_seconds{{job="exporter"}}{window})')
        assert float(durations[0]["value"][1]) < SCRAPE_INTERVAL_S, durations
