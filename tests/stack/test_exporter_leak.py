"""The shared stack's real vLLM with a known leak injected through its own --middleware option (inert
until a request asks with the X-Leakwatch-Leak-Mode header; tests/support/native_stack.py): the
exporter's growth per request against the truth, a non-leaking control run, a vLLM restart after
kill -9 of its worker, and the live exporter's metric families against
config/metrics/leakwatch-exporter.csv.

It leaks into the shared stack and restarts its vLLM, so it runs after every other test of that stack
(the `leaks_into_stack` mark)."""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests

from leakwatch.core.metric_catalogue import exporter_metrics
from leakwatch.core.ports import free_port
from leakwatch.drill import leak_middleware, warmup_sweep
from tests.support import vllm_tree
from tests.support.exporter_scrape import Scraped
from tests.support.native_stack import SHARED_LEAK_BYTES

pytestmark = [pytest.mark.slow, pytest.mark.leaks_into_stack]

MIB = 1 << 20
LEAK_BYTES = SHARED_LEAK_BYTES  # what the middleware keeps per /v1/completions request: the truth
NEAR_ZERO_BYTES = 0.05 * LEAK_BYTES
# Two requests' allocations held make a burst worth rating: well above the drift, yet a quick burst
# on an idle machine reaches it.
MIN_GAIN_BYTES = 2 * LEAK_BYTES
SAMPLE_INTERVAL_S = 0.5
RETENTION_IDLE_S = 3  # the exporter under test closes a burst after this long without traffic
# A burst is rated against the idle memory before it, so the warm-up's own burst must be closed
# first: otherwise the two merge and what the warm-up grew reads as retained by the measured burst.
# Closing takes RETENTION_IDLE_S of idle samples, which a loaded host takes late; twice that plus a
# margin.
IDLE_BEFORE_BURST_S = 2 * RETENTION_IDLE_S + 2
BURST_CONCURRENCY = 16
# Families that may be absent, and the fact that decides it here (checked both ways below).
GPU_FAMILIES = {
    "leakwatch_gpu_memory_used_bytes",
    "leakwatch_gpu_memory_total_bytes",
    "leakwatch_gpu_process_memory_bytes",
    "leakwatch_gpu_memory_baseline_bytes",
    "leakwatch_gpu_memory_growth_bytes",
    "leakwatch_gpu_memory_growth_per_request_bytes",
    "leakwatch_vram_retention_ratio",
}


@pytest.fixture(scope="module")
def exporter(native_stack, tmp_path_factory):
    """A second `leakwatch exporter` on the same vLLM with test-speed settings (the stack's own one
    keeps the defaults: 5 s samples, 30 s idle before a retention ratio)."""
    port = free_port()
    log = tmp_path_factory.mktemp("exporter") / "exporter.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "leakwatch",
                "exporter",
                "--vllm-url",
                native_stack.vllm_url,
                "--listen-address",
                "127.0.0.1",
                "--port",
                str(port),
                "--warmup-requests",
                str(warmup_sweep.SWEEP_REQUESTS),
                "--sample-interval",
                str(SAMPLE_INTERVAL_S),
                "--retention-idle",
                str(RETENTION_IDLE_S),
                "--retention-min-gain",
                str(MIN_GAIN_BYTES / MIB),
                "--smaps-interval",
                "0",
                # The profile the stack serves: the memory breakdown's expected parts.
                "--profile",
                "demo",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for(lambda: _reachable(url), 60, f"exporter did not start: {log}")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, Path(log).read_text()[-3000:]


def _reachable(url: str) -> bool:
    try:
        return requests.get(url, timeout=10).status_code == 200
    except requests.RequestException:
        return False


def wait_for(predicate, timeout: float, message: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(message)
        time.sleep(interval)


def send(stack, n: int, mode: str, concurrency: int = 8, max_tokens: int = 32, until=None) -> None:
    """Sends at least `n` completions, `concurrency` at a time, and with `until` goes on sending until
    it holds (checked every half second; at most 5n requests)."""
    enough = threading.Event()
    sent = itertools.count()
    limit = 5 * n

    def one(i):
        resp = requests.post(
            f"{stack.vllm_url}/v1/completions",
            timeout=120,
            headers={leak_middleware.MODE_HEADER: mode},
            json={"model": stack.model, "prompt": f"leak drill {i}", "max_tokens": max_tokens},
        )
        assert resp.status_code == 200, resp.text

    def worker():
        while (i := next(sent)) < limit and (i < n or not enough.is_set()):
            one(i)

    if until is None:
        enough.set()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        workers = [pool.submit(worker) for _ in range(concurrency)]
        while not enough.is_set() and not all(w.done() for w in workers):
            if until():
                enough.set()
            else:
                time.sleep(0.5)
        for w in workers:
            w.result()


def warm_up(stack) -> None:
    """Exactly the exporter's warm-up: the batch-size sweep, so vLLM's per-size caches are full before
    the baseline (without it the CPU worker grew 321 kB/request in the control run on a loaded 2-core
    host, oneDNN compiling kernels for the burst's new batch sizes; tests/soak/test_onednn_cache_bound.py)."""
    warmup_sweep.sweep_batch_sizes(stack.vllm_url, stack.model)


def baseline_ready(url: str) -> Scraped | None:
    scraped = Scraped.get(url)
    return scraped if scraped.value("leakwatch_baseline_ready") == 1 else None


def api_server_memory(scraped: Scraped) -> float:
    return scraped.value("leakwatch_process_anonymous_memory_bytes", role="api_server", rank="")


def rated_burst(url: str, stack, send_burst) -> Scraped:
    """Runs `send_burst(until)` and returns the first scrape that rates it (the ratio of an earlier
    burst stays exposed until the next one, and two leaking bursts both read 1).

    The burst goes on until a scrape during it (a sample, as Prometheus's are) has seen two requests'
    allocations held: a burst no sample sees in flight is left unrated by design, and on a loaded
    2-core host 200 quick requests could start and end between two slow samples."""
    before = Scraped.get(url)
    previous = before.value("leakwatch_retention_bursts_rated_total")
    idle_memory = api_server_memory(before)
    send_burst(lambda: api_server_memory(Scraped.get(url)) >= idle_memory + MIN_GAIN_BYTES)

    def ready():
        scraped = Scraped.get(url)
        fresh = scraped.value("leakwatch_retention_bursts_rated_total") > previous
        ratio = scraped.value("leakwatch_host_memory_retention_ratio", role="api_server")
        return scraped if fresh and ratio is not None else None

    try:
        return wait_for(ready, 60, "no retention ratio for the burst")
    except pytest.fail.Exception:
        last = Scraped.get(url)
        errors = {s.labels["collector"]: s.value for s in last.samples("leakwatch_collector_errors_total")}
        # A burst ends when vLLM reports nothing in flight: what it reports now, read directly.
        in_flight = [
            line
            for line in requests.get(f"{stack.vllm_url}/metrics", timeout=10).text.splitlines()
            if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))
        ]
        durations = {
            s.labels["collector"]: round(s.value, 3) for s in last.samples("leakwatch_collector_duration_seconds")
        }
        pytest.fail(
            f"no retention ratio for the burst (bursts rated before it {previous}, restarts "
            f"{last.value('leakwatch_vllm_restarts_total')}, baseline ready {last.value('leakwatch_baseline_ready')}, "
            f"requests since baseline {last.value('leakwatch_requests_since_baseline')}, api server memory now "
            f"{last.value('leakwatch_host_memory_growth_bytes', role='api_server')} B above the baseline, "
            f"collector errors {errors}, last sample's durations {durations} s, vLLM: {in_flight})"
        )


def api_server_pids(stack) -> set[int]:
    return {p.pid for p in stack.stack.processes() if vllm_tree.is_api_server(p)}


def the_worker(stack) -> psutil.Process:
    (api,) = [p for p in stack.stack.processes() if vllm_tree.is_api_server(p)]
    (worker,) = vllm_tree.by_role(api)["worker"]
    return worker


def test_control_run_without_a_leak(native_stack, exporter):
    """The same server, traffic and allocations, released after each request: nothing is retained."""
    warm_up(native_stack)
    start = wait_for(lambda: baseline_ready(exporter), 90, "no baseline after warm-up")
    assert start.value("leakwatch_processes", role="worker") == 1
    time.sleep(IDLE_BEFORE_BURST_S)
    scraped = rated_burst(
        exporter,
        native_stack,
        lambda until: send(native_stack, 200, "release", concurrency=BURST_CONCURRENCY, until=until),
    )
    ratio = scraped.value("leakwatch_host_memory_retention_ratio", role="api_server")
    served = scraped.value("leakwatch_requests_since_baseline")
    per_request = scraped.value("leakwatch_host_memory_growth_per_request_bytes", role="api_server")
    print(f"control: retention {ratio:.3f}, growth per request {per_request:.0f} B over {served:.0f} requests")
    assert ratio < 0.30
    assert served >= 200
    for role in ("api_server", "engine_core", "worker"):
        assert abs(scraped.value("leakwatch_host_memory_growth_per_request_bytes", role=role)) < NEAR_ZERO_BYTES, role


def test_restart_is_found_and_resets_the_baseline(native_stack, exporter):
    before = Scraped.get(exporter)
    assert before.value("leakwatch_vllm_restarts_total") == 0 and before.value("leakwatch_baseline_ready") == 1
    old_pids = api_server_pids(native_stack)
    worker = the_worker(native_stack)
    killed_at = time.time()
    os.kill(worker.pid, signal.SIGKILL)  # vLLM exits; supervisord starts it again

    def restarted():
        scraped = Scraped.get(exporter)
        new = api_server_pids(native_stack)
        done = (
            scraped.value("leakwatch_vllm_restarts_total") == 1
            and new
            and not new & old_pids
            and scraped.value("leakwatch_processes", role="worker") == 1
        )
        return scraped if done else None

    scraped = wait_for(restarted, 400, "the exporter did not see vLLM's restart", interval=1)
    assert scraped.value("leakwatch_baseline_ready") == 0
    assert scraped.value("leakwatch_host_memory_growth_bytes", role="api_server") is None
    # The new processes are the ones measured.
    worker = the_worker(native_stack)
    measured = scraped.value("leakwatch_process_resident_memory_bytes", role="worker", rank="0")
    assert measured == pytest.approx(psutil.Process(worker.pid).memory_info().rss, rel=0.05)
    wait_for(
        lambda: requests.get(f"{native_stack.vllm_url}/health", timeout=5).status_code == 200,
        300,
        "vLLM not healthy after its restart",
    )
    # And the stack's Prometheus scrapes the new vLLM.
    native_stack.prometheus.wait_for(f'process_start_time_seconds{{job="vllm"}} > {killed_at:.0f}', timeout=180)


def test_leak_growth_per_request_matches_the_truth(native_stack, exporter):
    warm_up(native_stack)
    start = wait_for(lambda: baseline_ready(exporter), 90, "no baseline after the restart's warm-up")
    assert start.value("leakwatch_vllm_restarts_total") == 1
    time.sleep(IDLE_BEFORE_BURST_S)
    scraped = rated_burst(
        exporter, native_stack, lambda until: send(native_stack, 200, "keep", concurrency=8, until=until)
    )
    served = scraped.value("leakwatch_requests_since_baseline")
    per_request = scraped.value("leakwatch_host_memory_growth_per_request_bytes", role="api_server")
    error = per_request / LEAK_BYTES - 1
    print(
        f"leak: growth per request {per_request:.0f} B over {served:.0f} requests, truth {LEAK_BYTES} B, "
        f"error {error:+.2%}, retention {scraped.value('leakwatch_host_memory_retention_ratio', role='api_server'):.3f}"
    )
    assert served >= 200
    assert abs(error) <= 0.10
    assert scraped.value("leakwatch_host_memory_retention_ratio", role="api_server") > 0.9
    # The leak is the API server's alone.
    for role in ("engine_core", "worker"):
        assert abs(scraped.value("leakwatch_host_memory_growth_per_request_bytes", role=role)) < NEAR_ZERO_BYTES


def test_live_families_match_the_contract_both_ways(native_stack, exporter):
    """After warm-up, a burst and idle time every family exists that can exist on this host."""
    scraped = Scraped.get(exporter)
    contract = exporter_metrics()
    exposed = {}
    for family in scraped.families.values():
        name = family.name + ("_total" if family.type == "counter" else "")
        exposed[name] = family
        assert name in contract, f"{name} is not in config/metrics/leakwatch-exporter.csv"
        assert family.type == contract[name]["type"], name
        assert family.documentation == contract[name]["help"], name
        assert family.samples, name
        for sample in family.samples:
            assert sorted(sample.labels) == sorted(contract[name]["labels"]), sample

    conditional = set()
    no_gpu = scraped.value("leakwatch_gpu_available") == 0
    if no_gpu:  # no NVIDIA driver here: then no GPU family at all
        conditional |= GPU_FAMILIES
        assert not GPU_FAMILIES & set(exposed)
    if _cgroup_memory_unlimited(api_server_pids(native_stack).pop()):
        conditional.add("leakwatch_cgroup_memory_limit_bytes")
        assert "leakwatch_cgroup_memory_limit_bytes" not in exposed
    # Only a cache bound set explicitly in vLLM's environment is published; this stack sets none.
    conditional.add("leakwatch_vllm_cache_bound_bytes")
    assert "leakwatch_vllm_cache_bound_bytes" not in exposed
    missing = set(contract) - set(exposed) - conditional
    assert not missing, f"contract metrics not exposed: {sorted(missing)}"


def _cgroup_memory_unlimited(pid: int) -> bool:
    """What this host says, read independently of the exporter (v2 memory.max or v1 limit)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0":
            for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                limit = Path(base + path) / "memory.max"
                if limit.exists():
                    return limit.read_text().strip() == "max"
        if "memory" in controllers.split(","):
            limit = Path("/sys/fs/cgroup/memory" + path) / "memory.limit_in_bytes"
            if limit.exists():
                return int(limit.read_text()) >= 1 << 62
    return True
