"""Issue 19's acceptance on the real native stack: a 1 MiB/request leak injected into one vLLM process
role, bursty traffic (150 requests every ~30 s) for a 12-minute window, then `leakwatch check` over
exactly that window (with a growth threshold sized for 12 minutes, below): LEAK for the leaking role,
NO-LEAK for every other series.

Every host process role leaks for real: the API server through vLLM's --middleware
(leakwatch/drill/leak_middleware.py), EngineCore and the worker through a vLLM general plugin
(leakwatch/drill/engine_leak.py). One stack serves the phases one after the other: /v1/completions
leaks in the API server, chat requests marked with vllm_xargs leak in the role they name, and each
phase's window holds only its own traffic. There is no GPU here: the GPU series are covered by
tests/unit/test_leak_verdicts.py on synthetic series of the same shape.

Bounded: three phases of LEAKWATCH_VERDICT_WINDOW_S (default 720 s) plus one vLLM start and its
warm-up; on a loaded 2-core machine about 45 minutes in all."""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import time

import pytest
import requests

from leakwatch.drill import engine_leak, leak_middleware, warmup_sweep
from leakwatch.leakcheck.command import add_arguments, run_check
from tests.support.native_stack import running_native_stack

MIB = 1 << 20
LEAK_BYTES = MIB
WINDOW_S = float(os.environ.get("LEAKWATCH_VERDICT_WINDOW_S", "720"))
# A phase is the window plus its check; the first also starts vLLM (7 minutes on a loaded machine).
# Its own vLLM (with the engine-side leak plugin) for ~40 min: the soak tier (`make test-soak`).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(WINDOW_S + 1200),
]
BURST, PERIOD_S, CONCURRENCY = 150, 30.0, 16
WARMUP_BURSTS = 6
MIDDLEWARE = "leakwatch.drill.leak_middleware.leak_memory"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    plugin_parent = tmp_path_factory.mktemp("engine-leak")
    with running_native_stack(
        "lw-verdict-",
        vllm_extra_args=["--middleware", MIDDLEWARE],
        vllm_extra_env={
            leak_middleware.BYTES_ENV: str(LEAK_BYTES),
            leak_middleware.PREFIX_ENV: "/v1/completions",
            leak_middleware.DEVICE_ENV: "cpu",
            engine_leak.BYTES_ENV: str(LEAK_BYTES),
            "PYTHONPATH": engine_leak.pythonpath(plugin_parent),
        },
    ) as running:
        # The phases leak ~18 GB/h on purpose: on this 23 GB host HostMemoryRunningOut rightly turns
        # critical about 13 minutes into the first one, and the healer's restart of vLLM cut the
        # second phase short (connection refused). The verdict is what is measured here, not healing.
        supervisor = running.stack.rpc()
        supervisor.stopProcess("healer", True)
        assert supervisor.getProcessInfo("healer")["statename"] == "STOPPED"
        # vLLM's per-batch-size caches filled before any window: otherwise the bursts' new batch sizes
        # grow the worker, and CI got LEAK for host/worker/0, where nothing was injected.
        warmup_sweep.sweep_batch_sizes(running.vllm_url, running.model)
        # Then bursts of the phases' own shape, on the path nothing leaks on: on a loaded CI host the
        # worker still grew ~600 B/request through the first window after the sweep alone (INCONCLUSIVE
        # where nothing was injected); here, under 2 CPU hogs, it grew 270 kB over the first 3 bursts
        # and stayed flat after them.
        with concurrent.futures.ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            # Prompts the phases never send, so none of theirs is a prefix-cache hit.
            warmup_prompts = range(10**6, 10**6 + WARMUP_BURSTS * BURST)
            for burst in range(WARMUP_BURSTS):
                list(
                    pool.map(
                        lambda i: chat(running, i, leak_in=None), warmup_prompts[burst * BURST : (burst + 1) * BURST]
                    )
                )
        running.prometheus.wait_for("max(leakwatch_baseline_ready) == 1", timeout=300)
        yield running


def chat(stack, i: int, leak_in: str | None) -> None:
    body = {"model": stack.model, "max_tokens": 4, "messages": [{"role": "user", "content": f"verdict {i}"}]}
    if leak_in:
        body["vllm_xargs"] = {engine_leak.MARKER: leak_in}
    requests.post(f"{stack.vllm_url}/v1/chat/completions", json=body, timeout=300).raise_for_status()


def completion(stack, i: int) -> None:
    requests.post(
        f"{stack.vllm_url}/v1/completions",
        timeout=300,
        json={"model": stack.model, "prompt": f"verdict {i}", "max_tokens": 4},
    ).raise_for_status()


def bursty_phase(stack, send) -> tuple[float, float, int]:
    """Bursts of BURST concurrent requests every PERIOD_S for WINDOW_S (a burst the machine serves
    late delays the next one); returns the window and how many requests were sent."""
    start = time.time()
    sent = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        while time.time() - start < WINDOW_S:
            tick = time.time()
            list(pool.map(send, range(sent, sent + BURST)))
            sent += BURST
            time.sleep(max(0.0, PERIOD_S - (time.time() - tick)))
    time.sleep(20)  # the last burst's samples reach Prometheus (15 s scrapes)
    return start, time.time(), sent


# The growth a 12-minute window is asked to rule out. Production's 10 MiB/h (config/leak_check.yaml)
# is meant for windows of hours: on a loaded 2-core CI host the worker, where nothing was injected,
# drifted 613 and 832 B/request (10-14 MB/h) through the first window in two clean-clone runs, and
# the check rightly answered INCONCLUSIVE ("about 3300 more requests would decide"), not NO-LEAK.
# Unloaded, and here beside a compose run, the same phase kept the worker flat to 16 kB. 64 MiB/h
# is still ~250x below the injected leak's 16 GiB/h at this traffic.
WINDOW_MIN_GROWTH_PER_HOUR = 64 << 20


def check(stack, start: float, end: float):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--prometheus",
            stack.url("prometheus"),
            "--start",
            str(start),
            "--end",
            str(end),
            "--min-growth-per-hour",
            str(WINDOW_MIN_GROWTH_PER_HOUR),
        ]
    )
    return run_check(args, start, end)


def verdicts(result) -> dict[str, str]:
    return {r.series.key: r.verdict for r in result.series}


def assert_leak_only_in(result, role: str, sent: int) -> None:
    explained = {r.series.key: (r.verdict, r.reason, r.bytes_per_request.estimate) for r in result.series}
    leaking = [r for r in result.series if r.series.key == f"host/{role}"]
    assert leaking, explained
    assert leaking[0].verdict == "LEAK", explained
    assert leaking[0].bytes_per_request.estimate == pytest.approx(LEAK_BYTES, rel=0.1), explained
    others = {k: v for k, v in verdicts(result).items() if k != f"host/{role}"}
    assert others and all(v == "NO-LEAK" for v in others.values()), (sent, explained)


def test_an_api_server_leak_under_bursts_is_leak_there_and_no_leak_elsewhere(stack):
    start, end, sent = bursty_phase(stack, lambda i: completion(stack, i))
    assert_leak_only_in(check(stack, start, end), "api_server", sent)


@pytest.mark.parametrize("role", engine_leak.ROLES)
def test_an_engine_side_leak_under_bursts_is_leak_there_and_no_leak_elsewhere(stack, role):
    start, end, sent = bursty_phase(stack, lambda i: chat(stack, i, leak_in=role))
    key = "worker/0" if role == "worker" else role
    assert_leak_only_in(check(stack, start, end), key, sent)
