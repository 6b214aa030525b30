"""The exporter emits exactly config/metrics/loadgen.csv; the file_sd target exists only while a
load test runs; both runners' Prometheus configs carry the optional loadgen job."""

from __future__ import annotations

import os
import subprocess

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from leakwatch.core.metric_catalogue import exposed_names, loadgen_metrics, sample_names
from leakwatch.core.paths import PROMETHEUS_DIR
from leakwatch.core.state_layout import StateLayout
from leakwatch.loadgen import file_sd, metric_collector
from leakwatch.loadgen.outcomes import StreamResult
from leakwatch.loadgen.stats import RunStats
from leakwatch.native.runner import NativeStack


def scrape(stats: RunStats) -> str:
    state = metric_collector.RunState(
        shape=lambda: "high-concurrency", model=lambda: "demo", users=lambda: 3, target_rate=lambda: 0.5
    )
    return generate_latest(metric_collector.registry(lambda: stats, state)).decode()


def busy_stats() -> RunStats:
    stats = RunStats()
    for i in range(5):
        stats.record(
            "creative",
            StreamResult(
                ttft=0.05 + i / 100, e2e=1 + i, itls=[0.01, 0.02], chunks=3, output_tokens=3, prompt_tokens=100
            ),
            queue_delay=0.001 * i,
        )
    stats.record("code", StreamResult(outcome="http_404", detail="no model"), 0.0)
    stats.stream_opened()
    return stats


def test_the_exporter_emits_exactly_the_contract():
    text = scrape(busy_stats())
    contract = loadgen_metrics()
    assert exposed_names(text) == sample_names(contract)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, row in contract.items():
        family = families[name[: -len("_total")] if row["type"] == "counter" else name]
        assert family.type == row["type"] and family.documentation == row["help"]
        for sample in family.samples:
            labels = set(sample.labels) - {"le"}
            assert labels == set(row["labels"]), (name, sample)


def test_exported_values():
    families = {f.name: f for f in text_string_to_metric_families(scrape(busy_stats()))}
    requests = {
        (s.labels["workload"], s.labels["outcome"]): s.value for s in families["leakwatch_loadgen_requests"].samples
    }
    assert requests == {("creative", "ok"): 5, ("code", "http_404"): 1}
    ttft = {
        s.labels.get("le"): s.value
        for s in families["leakwatch_loadgen_time_to_first_token_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["workload"] == "creative"
    }
    assert ttft["0.04"] == 0 and ttft["0.06"] == 1 and ttft["0.1"] == 5 and ttft["+Inf"] == 5
    assert families["leakwatch_loadgen_streams_in_flight"].samples[0].value == 1
    info = families["leakwatch_loadgen_info"].samples[0]
    assert info.labels == {"shape": "high-concurrency", "model": "demo"} and info.value == 1


def test_the_target_file_exists_only_while_the_run_does(tmp_path):
    path = file_sd.write_target(tmp_path, "127.0.0.1:9646")
    assert path.name.endswith(f"-{os.getpid()}.json")
    assert yaml.safe_load(path.read_text()) == [{"targets": ["127.0.0.1:9646"], "labels": {}}]
    file_sd.remove_target(path)
    assert not list(tmp_path.iterdir())
    # A file left by a killed run (its pid is gone) is pruned by the next run.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = file_sd.target_file(tmp_path, dead.pid)
    stale.write_text("[]")
    live = file_sd.write_target(tmp_path, "127.0.0.1:1")
    assert not stale.exists() and live.exists()


def test_both_prometheus_configs_have_the_optional_loadgen_job(tmp_path):
    compose = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    job = next(j for j in compose["scrape_configs"] if j["job_name"] == "loadgen")
    assert job["file_sd_configs"][0]["files"] == ["/etc/prometheus/targets/loadgen-*.json"]
    stack = NativeStack(StateLayout(tmp_path))
    stack.layout.make_dirs()
    stack._render_configs([])
    native = yaml.safe_load((stack.layout.conf / "prometheus.yml").read_text())
    job = next(j for j in native["scrape_configs"] if j["job_name"] == "loadgen")
    assert job["file_sd_configs"][0]["files"] == [str(stack.layout.targets / "loadgen-*.json")]
    assert "static_configs" not in job  # no target at all until a load test writes one
