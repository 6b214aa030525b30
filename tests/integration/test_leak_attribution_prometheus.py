"""`leakwatch check` names the endpoint whose requests a leak grows with, through a real Prometheus
serving a backfilled history (vLLM's http_requests_total per handler beside the memory series)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from leakwatch.cli import main
from tests.support.leak_scenarios import Scenario, to_openmetrics
from tests.support.prom_backfill import backfilled_prometheus

STEP = 15.0
HOURS = 4.0
NOW = float(int(time.time() // 3600 * 3600))
T0 = NOW - 8 * 3600
PER_RESPONSE = 32_000  # bytes each POST /v1/responses keeps (the Responses API's store)


def history() -> Scenario:
    """POST /v1/responses in 20-minute bursts, chat completions on a slower wave of their own."""
    rng = np.random.default_rng(34)
    t = T0 + np.arange(0.0, HOURS * 3600 + STEP / 2, STEP)
    minutes = (t - T0) / 60.0
    responses = np.cumsum(rng.poisson(np.where((minutes // 20) % 2 == 0, 0.6, 0.05) * STEP)).astype(float)
    chat = np.cumsum(rng.poisson((0.5 + 0.4 * np.sin(minutes / 37.0)) * STEP)).astype(float)
    noise = np.convolve(rng.normal(0.0, 300_000, len(t)), np.ones(3) / 3, mode="same")
    memory = 1.5e9 + PER_RESPONSE * responses + noise
    return Scenario(
        t,
        responses + chat,
        np.full(len(t), T0 - 3600.0),
        {"api_server": memory},
        endpoints={"/v1/responses": responses, "/v1/chat/completions": chat},
    )


@pytest.fixture(scope="module")
def prometheus_url():
    with backfilled_prometheus(to_openmetrics(history())) as url:
        yield url


def test_check_attributes_the_leak_to_post_v1_responses(prometheus_url, capsys):
    window = ["--start", str(T0), "--end", str(T0 + HOURS * 3600), "--step", "15s"]
    code = main(["check", "--prometheus", prometheus_url, *window, "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["verdict"] == "LEAK"
    (host,) = [s for s in result["series"] if s["key"] == "host/api_server"]
    attribution = host["attribution"]
    assert attribution["endpoint"] == "POST /v1/responses", attribution["reason"]
    bpr = attribution["bytes_per_request"]
    assert bpr["low"] < PER_RESPONSE < bpr["high"]
    assert bpr["estimate"] == pytest.approx(PER_RESPONSE, rel=0.05)
    assert {e["endpoint"]: e["verdict"] for e in attribution["endpoints"]} == {
        "POST /v1/responses": "explains",
        "POST /v1/chat/completions": "does not explain",
    }
    assert host["bounded_caches"] is None  # no declared bound in this history

    code = main(["check", "--prometheus", prometheus_url, *window])
    text = capsys.readouterr().out
    assert "api_server: grows with POST /v1/responses: " in text
    assert "other endpoints' requests do not explain it" in text
