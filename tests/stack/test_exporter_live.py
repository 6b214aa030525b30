"""`leakwatch exporter` on the shared real stack (vLLM CPU server under supervisord): the processes it
finds, their memory against /proc, Prometheus scraping it, and a plain server's growth per request."""

from __future__ import annotations

import concurrent.futures
import time

import pytest
import requests
from prometheus_client import CollectorRegistry

from leakwatch.core.metric_catalogue import exporter_metrics
from leakwatch.drill import warmup_sweep
from leakwatch.exporter.collector import ExporterConfig, VllmMemoryCollector
from tests.support import vllm_tree
from tests.support.exporter_scrape import Scraped

MIB = 1 << 20
# Growth per request counts as "near zero" below 100 kB (5 % of the 2 MiB/request leak this threshold
# was first sized against; tests/stack/test_exporter_leak.py now injects 8 MiB).
NEAR_ZERO_BYTES = 0.05 * 2 * MIB


def vm_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def vllm_processes_by_role(stack) -> dict[str, list[int]]:
    """vLLM's processes, found independently of the exporter: by the stack's environment marker,
    the API server's command line and setproctitle's names."""
    procs = stack.stack.processes()
    api = [p for p in procs if vllm_tree.is_api_server(p)]
    assert len(api) == 1, [p.cmdline() for p in procs]
    return {role: [p.pid for p in found] for role, found in vllm_tree.by_role(api[0]).items()}


def complete(stack, n: int, concurrency: int = 8, max_tokens: int = 16) -> None:
    def one(i):
        resp = requests.post(
            f"{stack.vllm_url}/v1/completions",
            timeout=120,
            json={"model": stack.model, "prompt": f"exporter test {i}", "max_tokens": max_tokens},
        )
        assert resp.status_code == 200, resp.text

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(n)))


def collector_for(stack, **config) -> tuple[VllmMemoryCollector, CollectorRegistry]:
    collector = VllmMemoryCollector(ExporterConfig(stack.vllm_url, **config))
    registry = CollectorRegistry()
    registry.register(collector)
    return collector, registry


def test_roles_counts_and_rss_match_proc(native_stack):
    expected = vllm_processes_by_role(native_stack)
    _, registry = collector_for(native_stack)
    families = list(registry.collect())
    # Read /proc ourselves right after the exporter did: the same moment, to within milliseconds.
    truth = {role: sum(vm_rss(pid) for pid in pids) for role, pids in expected.items()}

    def value(name, **labels):
        return next((s.value for f in families for s in f.samples if s.name == name and s.labels == labels), None)

    assert {role: value("leakwatch_processes", role=role) for role in expected} == {
        "api_server": 1,
        "engine_core": 1,
        "worker": 1,
        "other": len(expected["other"]),
    }
    for role, pids in expected.items():
        if not pids:
            continue
        rank = "0" if role == "worker" else ""
        measured = value("leakwatch_process_resident_memory_bytes", role=role, rank=rank)
        assert measured == pytest.approx(truth[role], rel=0.01), role
        assert 0 < value("leakwatch_process_proportional_memory_bytes", role=role, rank=rank) <= measured
        assert 0 < value("leakwatch_process_unique_memory_bytes", role=role, rank=rank) <= measured
        assert 0 < value("leakwatch_process_anonymous_memory_bytes", role=role, rank=rank) <= measured
        assert value("leakwatch_process_swap_bytes", role=role, rank=rank) >= 0
    assert value("leakwatch_vllm_up") == 1
    # The exporter's count of vLLM's series is the real /metrics: within what traffic adds meanwhile.
    live = Scraped.get(f"{native_stack.vllm_url}/metrics")
    assert value("leakwatch_vllm_metrics_series") == pytest.approx(
        sum(len(f.samples) for f in live.families.values()), rel=0.05
    )


def test_prometheus_scrapes_the_stacks_exporter(native_stack):
    prom = native_stack.prometheus
    prom.wait_for('up{job="leakwatch"} == 1', timeout=90)
    prom.wait_for('leakwatch_processes{job="leakwatch", role="worker"} == 1', timeout=90)
    prom.wait_for('leakwatch_vllm_up{job="leakwatch"} == 1', timeout=90)


def test_the_stacks_exporter_emits_only_contract_families(native_stack):
    url = f"{native_stack.url('leakwatch_exporter')}/metrics"
    contract = exporter_metrics()
    scraped = Scraped.get(url)
    for family in scraped.families.values():
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in contract, name
        assert family.type == contract[name]["type"] and family.documentation == contract[name]["help"]
        for sample in family.samples:
            assert sorted(sample.labels) == sorted(contract[name]["labels"]), sample


def test_a_plain_server_grows_near_zero_per_request(native_stack):
    collector, _ = collector_for(native_stack, warmup_requests=0, smaps_interval_s=3600)
    # vLLM's per-batch-size caches filled first (on a loaded host the bursts below met new batch
    # sizes: the worker grew 164 kB/request over 200 requests when this test ran first), then the
    # pools warmed by a burst of the same shape.
    warmup_sweep.sweep_batch_sizes(native_stack.vllm_url, native_stack.model)
    complete(native_stack, 40, concurrency=16)
    deadline = time.monotonic() + 60
    while collector.derived.baseline is None:
        collector.snapshot()
        assert time.monotonic() < deadline, "no baseline on an idle, healthy server"
        time.sleep(0.5)
    complete(native_stack, 200, concurrency=16)
    snap = collector.snapshot()
    served = collector.derived.requests_since_baseline(snap.sample)
    assert served >= 200
    growth = {role: (snap.sample.host[role] - base) / served for role, base in collector.derived.baseline.host.items()}
    assert all(abs(per_request) < NEAR_ZERO_BYTES for per_request in growth.values()), growth
