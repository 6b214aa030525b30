"""`leakwatch check` against a real Prometheus serving backfilled histories with a known leak."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from leakwatch.cli import main
from leakwatch.core.metric_catalogue import exporter_metrics, metric_names
from leakwatch.leakcheck import verdict_thresholds
from leakwatch.leakcheck.analysis import analyse
from leakwatch.leakcheck.collect import all_queries
from tests.support.leak_scenarios import MB, Scenario, make, to_openmetrics
from tests.support.prom_backfill import backfilled_prometheus

STEP = 15.0
HOURS = 6.0
# Two histories side by side in one TSDB: a leaking server, then (after a gap) a healthy one.
NOW = float(int(time.time() // 3600 * 3600))
LEAK_T0 = NOW - 20 * 3600
HEALTHY_T0 = NOW - 12 * 3600
INJECTED = 2 * MB


def _concat(a: Scenario, b: Scenario) -> Scenario:
    return Scenario(
        np.concatenate([a.t, b.t]),
        np.concatenate([a.requests, b.requests]),
        np.concatenate([a.start_time, b.start_time]),
        {k: np.concatenate([a.memory[k], b.memory[k]]) for k in a.memory},
    )


LEAKY = make(
    hours=HOURS,
    step=STEP,
    requests_per_s=0.05,
    bytes_per_request=INJECTED,
    noise=10 * MB,
    ar=0.5,
    restarts_at=(2 * 3600,),
    warmup_s=300,
    warmup_bytes=200 * MB,
    t0=LEAK_T0,
    seed=21,
)
HEALTHY = make(
    hours=HOURS, step=STEP, requests_per_s=0.05, bytes_per_request=0, noise=10 * MB, ar=0.5, t0=HEALTHY_T0, seed=22
)


@pytest.fixture(scope="module")
def prometheus_url():
    with backfilled_prometheus(to_openmetrics(_concat(LEAKY, HEALTHY))) as url:
        yield url


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def window(t0: float) -> list[str]:
    return ["--start", str(t0), "--end", str(t0 + HOURS * 3600), "--step", "15s"]


def test_check_finds_the_backfilled_leak_and_exits_1(prometheus_url, capsys):
    code, out, _ = run_cli(capsys, "check", "--prometheus", prometheus_url, *window(LEAK_T0), "--json")
    result = json.loads(out)
    assert code == 1 and result["verdict"] == "LEAK" and result["exit_code"] == 1
    assert result["restarts"] == 1
    (host,) = [s for s in result["series"] if s["kind"] == "host"]
    assert host["labels"] == {"role": "api_server"}  # an empty rank is no label in Prometheus
    assert host["bytes_per_request"]["estimate"] == pytest.approx(INJECTED, rel=0.05)
    assert host["bytes_per_request"]["low"] < INJECTED < host["bytes_per_request"]["high"]
    assert host["headroom_bytes"] == pytest.approx(8e9)
    assert host["decided_by"] in ("bytes_per_request", "both") and host["exhaustion_basis"] == "request_rate"
    growth = host["bytes_per_request"]["estimate"] * host["recent_requests_per_hour"]
    assert host["hours_to_exhaustion"] == pytest.approx(8e9 / growth)


def test_prometheus_path_gives_the_same_numbers_as_the_samples(prometheus_url, capsys):
    """Nothing is lost between Prometheus and the estimator: the CLI over the real TSDB equals the
    analysis of the samples that went into it."""
    _, out, _ = run_cli(capsys, "check", "--prometheus", prometheus_url, *window(LEAK_T0), "--json")
    via_prometheus = json.loads(out)["series"][0]["bytes_per_request"]
    direct = (
        analyse(
            LEAKY.timeline(),
            LEAKY.series(),
            verdict_thresholds.load(),
            start=LEAK_T0,
            end=LEAK_T0 + HOURS * 3600,
            step=STEP,
        )
        .series[0]
        .bytes_per_request
    )
    assert via_prometheus["estimate"] == pytest.approx(direct.estimate, rel=1e-9)
    assert via_prometheus["low"] == pytest.approx(direct.low, rel=1e-9)
    assert via_prometheus["high"] == pytest.approx(direct.high, rel=1e-9)


def test_check_on_the_healthy_history_is_no_leak_and_exits_0(prometheus_url, capsys):
    code, out, _ = run_cli(capsys, "check", "--prometheus", prometheus_url, *window(HEALTHY_T0))
    assert code == 0, out
    assert out.splitlines()[0] == "leakwatch check: NO-LEAK"
    assert "host/api_server" in out


def test_a_short_window_is_inconclusive_and_exits_3(prometheus_url, capsys):
    t0 = LEAK_T0 + 3 * 3600
    code, out, _ = run_cli(
        capsys, "check", "--prometheus", prometheus_url, "--start", str(t0), "--window", "4m", "--step", "15s", "--json"
    )
    assert code == 3 and json.loads(out)["verdict"] == "INCONCLUSIVE"


def test_an_empty_window_or_unreachable_prometheus_is_a_clear_error(prometheus_url, capsys):
    code, _, err = run_cli(
        capsys, "check", "--prometheus", prometheus_url, "--start", str(NOW - 60 * 86400), "--window", "1h"
    )
    assert code == 2 and "no vllm:request_success_total" in err
    code, _, err = run_cli(capsys, "check", "--prometheus", "http://127.0.0.1:9", "--window", "1h")
    assert code == 2 and "cannot reach Prometheus" in err
    code, _, err = run_cli(capsys, "check", "--prometheus", prometheus_url, "--window", "two hours")
    assert code == 2 and "not a duration" in err


def test_every_metric_the_check_queries_is_emitted_by_a_known_exporter():
    known = set(exporter_metrics()) | {
        "vllm:request_success_total",
        "http_requests_total",  # vLLM's instrumentator (config/metrics/vllm.csv): per-endpoint attribution
        "process_start_time_seconds",
        "process_resident_memory_bytes",
        "node_memory_MemAvailable_bytes",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
    }
    used = set().union(*(metric_names(q) for q in all_queries()))
    assert used <= known, used - known
