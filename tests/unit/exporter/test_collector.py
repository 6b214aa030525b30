"""The whole collector on a fixture /proc tree, a vLLM stand-in and a fresh registry per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from leakwatch.core.errors import LeakwatchError
from leakwatch.core.metric_catalogue import exporter_metrics
from leakwatch.core.profiles import load as load_profile
from leakwatch.exporter.collector import COLLECTORS, FAMILIES, ExporterConfig, VllmMemoryCollector, scrape_timeout
from leakwatch.exporter.nvml import import_pynvml
from leakwatch.exporter.procfs import ProcFS
from leakwatch.exporter.schema import Schema
from tests.support.exporter_scrape import (
    KIB,
    VLLM_PORT,
    FakeClock,
    FakeNvml,
    VllmEndpoint,
    cgroup_tree,
    proc_tree,
    vllm_metrics,
)

MIB = 1 << 20


def no_nvml():
    raise ImportError("No module named 'pynvml'")


@pytest.fixture
def vllm():
    endpoint = VllmEndpoint()
    yield endpoint
    endpoint.close()


@pytest.fixture
def make(tmp_path, vllm):
    def build(nvml_loader=no_nvml, clock=None, **config):
        collector = VllmMemoryCollector(
            ExporterConfig(vllm.url, vllm_listen_port=VLLM_PORT, **config),
            procfs=ProcFS(proc_tree(tmp_path) if not (tmp_path / "proc").exists() else tmp_path / "proc"),
            cgroup_root=cgroup_tree(tmp_path) if not (tmp_path / "cgroup").exists() else tmp_path / "cgroup",
            nvml_loader=nvml_loader,
            clock=clock or FakeClock(),
        )
        registry = CollectorRegistry()
        registry.register(collector)
        return collector, registry

    return build


class Scrape:
    """One scrape of the registry, frozen: every collect() is a new scrape (and a new sample)."""

    def __init__(self, registry: CollectorRegistry):
        families = list(registry.collect())
        self.registry = CollectorRegistry()
        self.registry.register(type("Frozen", (), {"collect": lambda _self: families})())
        self.text = generate_latest(self.registry).decode()

    def __call__(self, name, **labels):
        return self.registry.get_sample_value(name, labels)


def test_one_scrape_of_the_fixture_host(make, vllm):
    _, registry = make()
    value = Scrape(registry)
    text = value.text
    assert value("leakwatch_processes", role="api_server") == 1
    assert value("leakwatch_processes", role="engine_core") == 1
    assert value("leakwatch_processes", role="worker") == 2
    assert value("leakwatch_processes", role="other") == 1
    assert value("leakwatch_process_resident_memory_bytes", role="worker", rank="1") == 1710000 * KIB
    assert value("leakwatch_process_swap_bytes", role="api_server", rank="") == 2048 * KIB
    assert value("leakwatch_process_proportional_memory_bytes", role="engine_core", rank="") == 480000 * KIB
    assert value("leakwatch_process_unique_memory_bytes", role="worker", rank="0") == 1502000 * KIB
    assert value("leakwatch_cgroup_memory_usage_bytes") == 4 << 30
    assert value("leakwatch_cgroup_memory_limit_bytes") == 16 << 30
    assert value("leakwatch_gpu_available") == 0
    assert "leakwatch_gpu_memory_used_bytes" not in text
    assert value("leakwatch_vllm_up") == 1
    assert value("leakwatch_vllm_metrics_series") == 430
    assert value("leakwatch_vllm_restarts_total") == 0
    for name in COLLECTORS:
        assert value("leakwatch_collector_errors_total", collector=name) == 0
    assert value("leakwatch_collector_duration_seconds", collector="host_memory") > 0
    # Help texts and types come from the CSV contract.
    rows = exporter_metrics()
    assert f"# HELP leakwatch_processes {rows['leakwatch_processes']['help']}" in text
    assert "# TYPE leakwatch_vllm_restarts_total counter" in text


def test_registering_reads_nothing(make, vllm):
    make()
    assert vllm.requests == []


def grow(status: Path, part: str, kib: int) -> None:
    """Adds `kib` to one part of a fixture process's RSS (RssAnon, RssFile or RssShmem) and to VmRSS."""
    lines = []
    for line in status.read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", part):
            line = f"{key}:\t {int(rest.split()[0]) + kib} kB"
        lines.append(line)
    status.write_text("\n".join(lines) + "\n")


def test_baseline_growth_per_request_and_restart(make, vllm, tmp_path):
    clock = FakeClock()
    _, registry = make(clock=clock, warmup_requests=5)
    vllm.set(served=3)
    value = Scrape(registry)
    assert value("leakwatch_baseline_ready") == 0
    assert value("leakwatch_host_memory_baseline_bytes", role="api_server") is None

    vllm.set(served=5)
    clock.advance(5)
    value = Scrape(registry)
    assert value("leakwatch_baseline_ready") == 1
    assert value("leakwatch_baseline_timestamp_seconds") == clock.now
    assert value("leakwatch_requests_since_baseline") == 0
    # The leak measure: anonymous memory (RssAnon + RssShmem) + swap, not the file pages in RSS.
    assert value("leakwatch_host_memory_baseline_bytes", role="api_server") == (449900 + 100 + 2048) * KIB
    assert value("leakwatch_process_anonymous_memory_bytes", role="api_server", rank="") == (449900 + 100) * KIB
    assert value("leakwatch_host_memory_growth_bytes", role="api_server") == 0
    assert value("leakwatch_host_memory_growth_per_request_bytes", role="api_server") is None

    # 100 requests later the API server holds 200 MiB more: 2 MiB per request.
    grow(tmp_path / "proc" / "100" / "status", "RssAnon", 200 * 1024)
    vllm.set(served=105)
    clock.advance(5)
    value = Scrape(registry)
    assert value("leakwatch_requests_since_baseline") == 100
    assert value("leakwatch_host_memory_growth_bytes", role="api_server") == 200 * MIB
    assert value("leakwatch_host_memory_growth_per_request_bytes", role="api_server") == 2 * MIB
    assert value("leakwatch_host_memory_growth_per_request_bytes", role="worker") == 0

    # The worker's file pages, dropped under memory pressure, fault back in over the next 100
    # requests: its RSS climbs 150 MiB, which is no growth (the CI failure this guards against).
    grow(tmp_path / "proc" / "103" / "status", "RssFile", 150 * 1024)
    vllm.set(served=205)
    clock.advance(5)
    value = Scrape(registry)
    assert value("leakwatch_process_resident_memory_bytes", role="worker", rank="0") == (1700000 + 150 * 1024) * KIB
    assert value("leakwatch_host_memory_growth_per_request_bytes", role="worker") == 0

    # vLLM restarts: a new API server process (same pid, new start time) and a fresh counter.
    stat = tmp_path / "proc" / "100" / "stat"
    fields = stat.read_text().split(" ")
    fields[21] = "424242"
    stat.write_text(" ".join(fields))
    vllm.set(served=0)
    clock.advance(5)
    value = Scrape(registry)
    assert value("leakwatch_vllm_restarts_total") == 1
    assert value("leakwatch_baseline_ready") == 0
    assert value("leakwatch_host_memory_growth_bytes", role="api_server") is None


def test_vllm_unreachable_is_counted_not_fatal(make, vllm):
    _, registry = make()
    vllm.close()
    value = Scrape(registry)
    assert value("leakwatch_vllm_up") == 0
    assert value("leakwatch_vllm_metrics_series") is None
    assert value("leakwatch_collector_errors_total", collector="vllm") == 1
    assert value("leakwatch_processes", role="worker") == 2  # /proc still read
    assert Scrape(registry)("leakwatch_collector_errors_total", collector="vllm") == 2


def test_a_stalled_vllm_is_not_waited_for_past_the_scrape_timeout_and_its_late_answer_is_used(make, vllm):
    """Prometheus says how long it waits (X-Prometheus-Scrape-Timeout-Seconds): vLLM's answer is
    skipped when it is not in by then, /proc is still reported, and the same request's answer goes
    into the next sample instead of a second request queued behind the stalled one."""
    _, registry = make(vllm_timeout_s=30)
    vllm.release.clear()
    with scrape_timeout(1.0):
        value = Scrape(registry)
    assert value("leakwatch_vllm_up") == 0
    assert value("leakwatch_collector_errors_total", collector="vllm") == 1
    assert value("leakwatch_processes", role="api_server") == 1
    assert 0.5 <= value("leakwatch_collector_duration_seconds", collector="vllm") < 30
    vllm.set(served=7)
    vllm.release.set()
    with scrape_timeout(10.0):
        value = Scrape(registry)
    assert value("leakwatch_vllm_up") == 1
    assert value("leakwatch_collector_errors_total", collector="vllm") == 1
    assert vllm.requests.count("/metrics") == 1  # the stalled request's answer, none queued behind it


def test_no_vllm_process_reports_zero_processes(make, vllm, tmp_path):
    proc = proc_tree(tmp_path)
    for pid in (100, 101, 102, 103, 104):
        shutil.rmtree(proc / str(pid))
    _, registry = make()
    value = Scrape(registry)
    for role in ("api_server", "engine_core", "worker", "other"):
        assert value("leakwatch_processes", role=role) == 0
    assert "leakwatch_process_resident_memory_bytes" not in value.text
    assert "leakwatch_cgroup_memory_usage_bytes" not in value.text
    assert value("leakwatch_collector_errors_total", collector="discovery") == 0


def test_a_failed_read_skips_the_metric_and_counts(make, tmp_path):
    proc = proc_tree(tmp_path)
    (proc / "102" / "smaps_rollup").write_text("not a rollup\n")
    (proc / "100" / "cgroup").write_text("garbage without colons\n")
    _, registry = make(smaps_interval_s=0)
    value = Scrape(registry)
    assert value("leakwatch_process_proportional_memory_bytes", role="engine_core", rank="") is None
    assert value("leakwatch_process_resident_memory_bytes", role="engine_core", rank="") == 620000 * KIB
    assert value("leakwatch_process_proportional_memory_bytes", role="worker", rank="0") is not None
    assert value("leakwatch_cgroup_memory_usage_bytes") is None
    assert value("leakwatch_collector_errors_total", collector="host_memory") == 1
    assert value("leakwatch_collector_errors_total", collector="cgroup") == 1


def test_a_broken_proc_root_is_a_discovery_error(make, tmp_path):
    proc = proc_tree(tmp_path)
    _, registry = make()
    shutil.rmtree(proc)
    value = Scrape(registry)
    assert value("leakwatch_processes", role="api_server") is None
    assert value("leakwatch_collector_errors_total", collector="discovery") == 1
    assert value("leakwatch_vllm_up") == 1


def test_gpu_per_device_and_per_vllm_process(make):
    # Two GPUs: workers TP0/TP1 on one each, the API server holds a CUDA context on GPU 0; pid 999 is
    # someone else's process; usedGpuMemory None is a driver that cannot tell (MIG).
    nvml = FakeNvml(
        devices=[(70 << 30, 80 << 30), (69 << 30, 80 << 30)],
        processes={0: [(103, 68 << 30), (100, 500 * MIB), (999, 1 << 30)], 1: [(104, 68 << 30), (102, None)]},
    )
    _, registry = make(nvml_loader=lambda: nvml, warmup_requests=0)
    value = Scrape(registry)
    assert value("leakwatch_gpu_available") == 1
    assert value("leakwatch_gpu_memory_used_bytes", gpu="0") == 70 << 30
    assert value("leakwatch_gpu_memory_total_bytes", gpu="1") == 80 << 30
    assert value("leakwatch_gpu_process_memory_bytes", gpu="0", role="worker", rank="0") == 68 << 30
    assert value("leakwatch_gpu_process_memory_bytes", gpu="1", role="worker", rank="1") == 68 << 30
    assert value("leakwatch_gpu_process_memory_bytes", gpu="0", role="api_server", rank="") == 500 * MIB
    assert value("leakwatch_gpu_process_memory_bytes", gpu="1", role="engine_core", rank="") is None
    assert value("leakwatch_gpu_memory_baseline_bytes", gpu="0") == 70 << 30

    nvml.devices[0] = (71 << 30, 80 << 30)
    assert Scrape(registry)("leakwatch_gpu_memory_growth_bytes", gpu="0") == 1 << 30

    nvml.fail = True
    value = Scrape(registry)
    assert value("leakwatch_gpu_available") == 1
    assert value("leakwatch_gpu_memory_used_bytes", gpu="0") is None
    assert value("leakwatch_gpu_memory_growth_bytes", gpu="0") is None
    assert value("leakwatch_gpu_memory_baseline_bytes", gpu="0") == 70 << 30
    assert value("leakwatch_collector_errors_total", collector="gpu") == 1


def test_memory_breakdown_on_the_cpu_backend_per_worker(make):
    """With the profile: weights and the KV pool vLLM reports (the fixture's real cache_config_info,
    16384 blocks of 128 tokens = 1 GiB for the demo model) per worker, and what the measure leaves."""
    _, registry = make(profile=load_profile("demo"))
    value = Scrape(registry)
    for rank in ("0", "1"):
        assert value("leakwatch_memory_expected_bytes", role="worker", rank=rank, part="weights") == 623232 * 2
        assert value("leakwatch_memory_expected_bytes", role="worker", rank=rank, part="kv_cache") == 1 << 30
        measured = value("leakwatch_process_anonymous_memory_bytes", role="worker", rank=rank) + value(
            "leakwatch_process_swap_bytes", role="worker", rank=rank
        )
        unexplained = value("leakwatch_memory_unexplained_bytes", role="worker", rank=rank, gpu="")
        assert unexplained == measured - 623232 * 2 - (1 << 30)
    # Only the processes that hold the model: not the API server, nor EngineCore beside workers.
    assert value("leakwatch_memory_expected_bytes", role="engine_core", rank="", part="weights") is None


def test_memory_breakdown_on_a_gpu_and_none_without_a_profile(make, vllm):
    nvml = FakeNvml(
        devices=[(70 << 30, 80 << 30), (69 << 30, 80 << 30)],
        processes={0: [(103, 68 << 30), (100, 500 * MIB)], 1: [(104, 67 << 30)]},
    )
    vllm.metrics = (
        vllm_metrics(0)
        .replace('num_gpu_blocks="16384"', 'num_gpu_blocks="40000"')
        .replace('block_size="128"', 'block_size="16"')
    )
    profile = load_profile("iquest-coder-40b-4xa100", ["vllm.tensor_parallel_size=2", "hardware.gpu_count=2"])
    _, registry = make(nvml_loader=lambda: nvml, profile=profile)
    value = Scrape(registry)
    weights = value("leakwatch_memory_expected_bytes", role="worker", rank="1", part="weights")
    kv = value("leakwatch_memory_expected_bytes", role="worker", rank="1", part="kv_cache")
    assert kv == 40000 * 16 * 80 * 4 * 128 * 2 * 2  # 80 layers x (8 KV heads / TP 2) x 128 x K,V x bf16
    assert value("leakwatch_memory_unexplained_bytes", role="worker", rank="1", gpu="1") == (67 << 30) - weights - kv
    assert value("leakwatch_memory_unexplained_bytes", role="worker", rank="0", gpu="0") == (68 << 30) - weights - kv

    _, plain = make(nvml_loader=lambda: nvml)
    assert "leakwatch_memory_" not in Scrape(plain).text


def test_a_sidecar_reports_only_the_gpus_vllm_runs_on(make):
    """Issue 33: on a shared node NVML shows the sidecar every card; with --gpu-devices vllm the
    cards only other pods' processes use (pid 999 on GPU 1, nobody on GPU 2) are not reported as
    this pod's, and the default still reports every card (a host of its own)."""
    devices = [(70 << 30, 80 << 30), (79 << 30, 80 << 30), (1 << 30, 80 << 30)]
    processes = {0: [(103, 68 << 30), (100, 500 * MIB)], 1: [(999, 78 << 30)]}
    _, registry = make(nvml_loader=lambda: FakeNvml(devices, processes), warmup_requests=0, gpu_devices="vllm")
    value = Scrape(registry)
    assert value("leakwatch_gpu_memory_used_bytes", gpu="0") == 70 << 30
    assert value("leakwatch_gpu_memory_used_bytes", gpu="1") is None
    assert value("leakwatch_gpu_memory_total_bytes", gpu="2") is None
    assert value("leakwatch_gpu_memory_baseline_bytes", gpu="1") is None
    assert value("leakwatch_gpu_process_memory_bytes", gpu="0", role="worker", rank="0") == 68 << 30
    _, everything = make(nvml_loader=lambda: FakeNvml(devices, processes), warmup_requests=0)
    assert Scrape(everything)("leakwatch_gpu_memory_used_bytes", gpu="1") == 79 << 30


@pytest.mark.parametrize(
    ("visible", "reported"),
    [
        ("GPU-00000002-fake", {"2"}),  # the device plugin's default: the cards' UUIDs
        ("0,2", {"0", "2"}),  # its deviceIDStrategy=index
        ("all", set()),  # names no card: only the pids could tell, and they do not match here
        (None, set()),
    ],
)
def test_a_sidecar_finds_vllms_gpus_from_its_containers_environment(make, tmp_path, visible, reported):
    """A driver that reports host pids inside containers matches none of vLLM's: the cards the
    device plugin gave vLLM's container (NVIDIA_VISIBLE_DEVICES in its API server's environment)
    are still reported as this pod's, and no other."""
    devices = [(70 << 30, 80 << 30), (79 << 30, 80 << 30), (60 << 30, 80 << 30)]
    host_pids = {0: [(40100, 1 << 30)], 1: [(40999, 78 << 30)], 2: [(40103, 59 << 30)]}
    proc = proc_tree(tmp_path)
    if visible is not None:
        (proc / "100" / "environ").write_bytes(f"PATH=/usr/bin\0NVIDIA_VISIBLE_DEVICES={visible}\0".encode())
    _, registry = make(nvml_loader=lambda: FakeNvml(devices, host_pids), warmup_requests=0, gpu_devices="vllm")
    value = Scrape(registry)
    assert {gpu for gpu in "012" if value("leakwatch_gpu_memory_used_bytes", gpu=gpu) is not None} == reported
    assert value("leakwatch_gpu_process_memory_bytes", gpu="2", role="worker", rank="0") is None  # pids unknown


def test_real_pynvml_without_a_driver_is_the_no_gpu_state(make):
    pynvml = import_pynvml()  # nvidia-ml-py is a dev dependency; this machine has no NVIDIA driver
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()
    collector, registry = make(nvml_loader=import_pynvml)
    value = Scrape(registry)
    assert value("leakwatch_gpu_available") == 0
    assert "leakwatch_gpu_memory" not in value.text and "leakwatch_vram_retention_ratio" not in value.text
    assert value("leakwatch_collector_errors_total", collector="gpu") == 0
    assert "NVML" in collector.gpu.unavailable_reason


def test_nvml_without_devices_is_the_no_gpu_state(make):
    _, registry = make(nvml_loader=lambda: FakeNvml(devices=[], processes={}))
    assert Scrape(registry)("leakwatch_gpu_available") == 0


def test_state_file_keeps_restarts_and_baseline_across_exporter_restarts(make, vllm, tmp_path):
    state = tmp_path / "state.json"
    clock = FakeClock()
    _, registry = make(clock=clock, warmup_requests=1, state_file=state)
    vllm.set(served=5)
    first = Scrape(registry)
    assert first("leakwatch_baseline_ready") == 1

    # The exporter restarts while the same vLLM runs on: the baseline and the count carry over.
    clock.advance(60)
    _, registry = make(clock=clock, warmup_requests=1, state_file=state)
    again = Scrape(registry)
    assert again("leakwatch_baseline_timestamp_seconds") == first("leakwatch_baseline_timestamp_seconds")
    assert again("leakwatch_requests_since_baseline") == 0
    assert again("leakwatch_vllm_restarts_total") == 0

    # Exporter and vLLM both restarted (compose: one PID namespace): the restart still counts.
    stat = tmp_path / "proc" / "100" / "stat"
    fields = stat.read_text().split(" ")
    fields[21] = "777777"
    stat.write_text(" ".join(fields))
    _, registry = make(clock=clock, warmup_requests=1, state_file=state)
    vllm.set(served=0)
    after = Scrape(registry)
    assert after("leakwatch_vllm_restarts_total") == 1 and after("leakwatch_baseline_ready") == 0
    _, registry = make(clock=clock, warmup_requests=1, state_file=state)
    assert Scrape(registry)("leakwatch_vllm_restarts_total") == 1


def test_an_unreadable_state_file_is_ignored(make, tmp_path, caplog):
    state = tmp_path / "state.json"
    state.write_text("{not json")
    _, registry = make(state_file=state)
    assert Scrape(registry)("leakwatch_vllm_restarts_total") == 0
    assert "ignoring unreadable state file" in caplog.text
    assert '"restarts": 0' in state.read_text()  # rewritten with the current state


def test_every_family_is_in_the_csv_contract():
    assert set(FAMILIES) == set(exporter_metrics())


def test_a_family_missing_from_the_csv_fails_at_build_time(vllm, tmp_path):
    rows = {name: row for name, row in exporter_metrics().items() if name != "leakwatch_vllm_up"}
    with pytest.raises(LeakwatchError, match="leakwatch_vllm_up"):
        VllmMemoryCollector(ExporterConfig(vllm.url), procfs=ProcFS(proc_tree(tmp_path)), schema=Schema(rows))
