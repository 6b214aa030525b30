"""Both load shapes against the real vLLM CPU server of the shared stack: 256 streams held, Poisson
arrivals that pass a goodness-of-fit test, prompt lengths as configured, and client numbers that agree
with the server's own metrics (TTFT histogram, token counters). Prometheus scrapes the run's metrics
through its file_sd target while Locust runs, and the target is gone once it quits."""

from __future__ import annotations

import re
import statistics
import time

import numpy as np
import pytest
import requests
from scipy import stats

from benchmarks.loadgen import server_metrics
from leakwatch.core.ports import free_port
from tests.support.locust_run import finish, run_locust


def gauge(text: str, name: str) -> float | None:
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def settle(url: str) -> server_metrics.Snapshot:
    """vLLM's counters once no request is running any more."""
    for _ in range(60):
        snap = server_metrics.scrape(url)
        if not snap.values.get(server_metrics.RUNNING) and not snap.values.get(server_metrics.WAITING):
            return snap
        time.sleep(1)
    return snap


@pytest.mark.slow
@pytest.mark.storm
def test_high_concurrency_reaches_and_holds_256_streams(native_stack, tmp_path):
    url = native_stack.vllm_url
    exporter = free_port()
    # Short prompts and outputs so a wave of 256 streams fits the 2-core CPU server; --stop-timeout
    # lets the ramp-down finish streams instead of cutting them.
    proc = run_locust(
        tmp_path,
        url,
        "--load-shape",
        "high-concurrency",
        "--streams",
        "256",
        "--ramp-step",
        "64",
        "--step-duration",
        "5s",
        "--hold",
        "30s",
        "--stop-timeout",
        "120",
        "--prompt-scale",
        "0.25",
        "--max-output-tokens",
        "256",
        "--corpus-size",
        "64",
        "CreativeWritingUser",
        env={"LOCUST_EXPORTER_PORT": str(exporter)},
        background=True,
    )
    server_running, client = [], []
    deadline = time.monotonic() + 420
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            server_running.append(gauge(requests.get(f"{url}/metrics", timeout=10).text, server_metrics.RUNNING))
            text = requests.get(f"http://127.0.0.1:{exporter}/metrics", timeout=5).text
            client.append((gauge(text, "leakwatch_loadgen_users"), gauge(text, "leakwatch_loadgen_streams_in_flight")))
        except requests.RequestException:
            pass
        time.sleep(0.25)
    run = finish(proc, tmp_path, timeout=60)
    assert run.returncode == 0, run.output[-3000:]
    assert run.csv("exceptions") == []
    outcomes = run.outcomes()
    assert set(outcomes) == {"ok"}, outcomes  # no client-side errors, no stream cut on ramp-down
    assert run.summary["max_in_flight"] == 256
    at_top = [streams for users, streams in client if users == 256]
    assert at_top and statistics.median(at_top) >= 250, client  # the client holds 256 streams open
    # The server runs them too: between a stream's end and the next one's admission a few slots are
    # empty, so a sample rarely catches all 256 on a busy machine; never more than the client sends.
    assert 250 <= max(v for v in server_running if v is not None) <= 256, server_running
    top = [v for v in server_running if v is not None and v > 0]
    print(
        f"\nhigh concurrency: {outcomes['ok']} requests; server vllm:num_requests_running max "
        f"{max(top):.0f}, median while busy {statistics.median(top):.0f}; client streams at 256 users: "
        f"median {statistics.median(at_top):.0f} over {len(at_top)} samples"
    )


@pytest.mark.slow
def test_production_day_is_poisson_and_agrees_with_the_server(native_stack, tmp_path):
    url = native_stack.vllm_url
    prom = native_stack.prometheus
    before = settle(url)
    # 1000 requests/day compressed 180x: 6 simulated hours in 2 minutes, ~250 requests at 2.1/s.
    rate = 1000 / 86400 * 180
    proc = run_locust(
        tmp_path,
        url,
        "--load-shape",
        "production-day",
        "--requests-per-day",
        "1000",
        "--day-length",
        "6h",
        "--time-compression",
        "180",
        "--seed",
        "3",
        "--max-in-flight",
        "64",
        "--max-output-tokens",
        "64",
        "--corpus-size",
        "100",
        "CreativeWritingUser",
        background=True,
    )
    scraped = discovered = False
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        discovered = discovered or bool(prom.query('up{job="loadgen"} == 1'))
        scraped = scraped or bool(prom.query('sum(leakwatch_loadgen_requests_total{outcome="ok"}) > 0'))
        time.sleep(2)
    run = finish(proc, tmp_path, timeout=120)
    assert run.returncode == 0, run.output[-3000:]
    after = settle(url)
    rows = run.requests
    assert {r["outcome"] for r in rows} == {"ok"}

    # Open-loop Poisson: the schedule the requests were sent on has exponential gaps at the configured
    # rate, and the sends kept to it. (A KS test of the send times themselves measures the machine:
    # with both cores busy a few sends slip by 100-300 ms and clump, p < 0.001 on a correct schedule.)
    scheduled = np.sort(np.array([float(r["scheduled_s"]) for r in rows]))
    gaps = np.diff(scheduled)
    ks = stats.kstest(gaps, "expon", args=(0, 1 / rate))
    lateness = np.array([float(r["queue_delay_s"]) for r in rows])
    sent_gaps = np.diff(np.sort(np.array([float(r["sent_unix"]) for r in rows])))
    print(
        f"\nproduction day: {len(rows)} requests, KS p-value {ks.pvalue:.3f} (D={ks.statistic:.4f}) for "
        f"exponential gaps at {rate:.3f}/s (as sent: {stats.kstest(sent_gaps, 'expon', args=(0, 1 / rate)).pvalue:.3f}); "
        f"client queue delay p50 {np.median(lateness) * 1000:.2f} ms, p90 {np.percentile(lateness, 90) * 1000:.1f} ms, "
        f"max {lateness.max() * 1000:.1f} ms"
    )
    assert ks.pvalue > 0.01
    assert stats.kstest(gaps, "expon", args=(0, 1 / (1.5 * rate))).pvalue < 0.01  # the test can tell rates apart
    assert np.median(lateness) < 0.02 and np.percentile(lateness, 90) < 0.5, lateness  # sent on schedule
    expected = run.summary["schedule"]["expected_arrivals"]
    assert abs(len(rows) - expected) < 4 * expected**0.5

    # Prompt lengths: the server counts exactly what the corpus measured, uniform over 200-800.
    assert all(int(r["prompt_tokens"]) == int(r["corpus_prompt_tokens"]) for r in rows)
    corpus = {(r["target_prompt_tokens"], r["prompt_tokens"]) for r in rows}
    assert all(abs(int(p) - int(t)) <= max(4, 0.01 * int(t)) for t, p in corpus)  # 1 % or a word
    distinct = np.array([int(p) for _, p in corpus])
    assert stats.kstest(distinct, "uniform", args=(200, 600)).pvalue > 0.01

    # Output tokens: the client's usage counts equal the server's counters, request for request.
    assert all(int(r["output_tokens"]) == int(r["max_tokens"]) for r in rows)
    generated = after.values[server_metrics.GENERATION_TOKENS] - before.values[server_metrics.GENERATION_TOKENS]
    prompted = after.values[server_metrics.PROMPT_TOKENS] - before.values[server_metrics.PROMPT_TOKENS]
    assert sum(int(r["output_tokens"]) for r in rows) == generated
    assert sum(int(r["prompt_tokens"]) for r in rows) == prompted

    # TTFT: the client (which also sees HTTP and the API server) is not faster than the engine.
    server = server_metrics.quantile(
        server_metrics.delta(before.histogram(server_metrics.TTFT), after.histogram(server_metrics.TTFT)), 0.5
    )
    client_median = float(np.median([float(r["ttft_s"]) for r in rows]))
    print(
        f"TTFT median: client {client_median * 1000:.2f} ms, server histogram bucket "
        f"{server.lower * 1000:g}-{server.upper * 1000:g} ms (interpolated {server.estimate * 1000:.2f} ms): "
        f"gap {(client_median - server.estimate) * 1000:+.2f} ms"
    )
    assert client_median >= server.lower

    # Prometheus scraped the run through its file_sd target, which is gone now that Locust quit.
    assert discovered and scraped
    assert not list(native_stack.layout.targets.glob("loadgen-*.json"))
    prom.wait_for('absent(up{job="loadgen"})', timeout=90)
