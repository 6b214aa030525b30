"""Every query in the rules, the dashboards and `leakwatch check` uses only series that some exporter's
committed metric list (config/metrics/*.csv; vLLM's, node exporter's, Prometheus's and Alertmanager's
recorded from the real servers)
or a recording rule provides: checked without a stack, so a renamed or removed metric fails in seconds.
tests/stack/test_metric_lists_live.py proves the recorded lists still match the real servers."""

from __future__ import annotations

import pytest

from leakwatch.backtest.command import REFERENCE_RULES
from leakwatch.backtest.rule_evaluator import load_rules
from leakwatch.core.metric_catalogue import (
    METRICS_DIR,
    load_csv,
    metric_names,
    node_exporter_metrics,
    sample_names,
    static_catalogue,
    vllm_metrics,
)
from leakwatch.core.paths import RULES_DIR
from leakwatch.dashboards import boards
from leakwatch.leakcheck.breakdown import QUERIES as BREAKDOWN_QUERIES
from leakwatch.leakcheck.collect import all_queries
from leakwatch.metrics_record.command import SOURCES, drift, families, recorded_version, render

CATALOGUE = static_catalogue()


def _queries() -> list[tuple[str, str]]:
    recording, alerting = load_rules(sorted(RULES_DIR.glob("*.yml")) + [REFERENCE_RULES])
    found = [(f"rule {r.name}", r.expr) for r in (*recording, *alerting)]
    found += [(f"dashboard {board.uid}: {where}", expr) for board in boards() for where, expr in board.queries()]
    found += [("leakwatch check", q) for q in all_queries()]
    found += [("leakwatch check", q) for q in BREAKDOWN_QUERIES]
    return found


QUERIES = _queries()


def test_there_are_queries_of_each_kind():
    kinds = {where.split()[0] for where, _ in QUERIES}
    assert kinds == {"rule", "dashboard", "leakwatch"} and len(QUERIES) > 50


def test_every_query_uses_only_catalogued_series():
    unknown = {
        where: sorted(metric_names(expr) - CATALOGUE) for where, expr in QUERIES if metric_names(expr) - CATALOGUE
    }
    assert unknown == {}


@pytest.mark.parametrize("name", ["vllm:gpu_cache_usage_perc", "nvidia_smi_memory_used", "node_memory_Available"])
def test_the_catalogue_rejects_names_no_exporter_emits(name):
    # The articles' and vLLM's removed names: a query on them would go blank in production.
    assert name not in CATALOGUE
    assert metric_names(f"max({name})") - CATALOGUE == {name}


def test_recorded_lists_hold_what_the_memory_rules_read():
    assert {"vllm:kv_cache_usage_perc", "vllm:request_success_total", "process_resident_memory_bytes"} <= set(
        vllm_metrics()
    )
    assert vllm_metrics()["vllm:time_to_first_token_seconds"]["type"] == "histogram"
    assert "vllm:time_to_first_token_seconds_bucket" in sample_names(vllm_metrics())
    node = node_exporter_metrics()
    assert node["node_memory_MemAvailable_bytes"]["type"] == "gauge"
    assert node["node_cpu_seconds_total"]["labels"] == ["cpu", "mode"]


@pytest.mark.parametrize("source", SOURCES.values(), ids=lambda s: s.file)
def test_recorded_files_say_they_are_generated(source):
    header = (METRICS_DIR / source.file).read_text().splitlines()[0]
    assert header.startswith(f"# Metrics of {source.title}, recorded from the real server (")


EXPOSITION = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="demo"} 0.0
# HELP vllm:request_success_total Count of successfully processed requests, by reason.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="demo"} 3.0
# HELP vllm:request_success_created Count of successfully processed requests, by reason.
# TYPE vllm:request_success_created gauge
vllm:request_success_created{engine="0",finished_reason="stop",model_name="demo"} 1.7e9
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="demo"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="demo"} 3.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="demo"} 3.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="demo"} 0.5
"""


def test_families_key_counters_by_sample_name_and_drop_created(tmp_path):
    rows = families(EXPOSITION)
    assert list(rows) == ["vllm:e2e_request_latency_seconds", "vllm:num_requests_running", "vllm:request_success_total"]
    assert rows["vllm:request_success_total"] == {
        "type": "counter",
        "help": "Count of successfully processed requests, by reason.",
        "labels": ["engine", "finished_reason", "model_name"],
    }
    assert rows["vllm:e2e_request_latency_seconds"]["labels"] == ["engine", "model_name"]
    # Round trip through the CSV format, commas in help texts included.
    path = tmp_path / "vllm.csv"
    path.write_text(render(SOURCES["vllm"], rows, "a test"))
    assert load_csv(path) == rows


def test_drift_names_what_is_gone_new_or_retyped():
    recorded = families(EXPOSITION)
    live = {k: dict(v) for k, v in recorded.items() if k != "vllm:num_requests_running"}
    live["vllm:request_success_total"]["type"] = "gauge"
    live["vllm:new_thing"] = {"type": "gauge", "help": "", "labels": []}
    assert drift(recorded, live) == [
        "vllm:num_requests_running: in the file, no longer emitted",
        "vllm:new_thing: emitted (gauge), not in the file",
        "vllm:request_success_total: type counter in the file, gauge emitted",
    ]
    assert drift(recorded, recorded) == []
    # A Go server writes a labelled family only after its first child: new names are not drift there.
    assert drift(recorded, live, complete=False) == [
        "vllm:num_requests_running: in the file, no longer emitted",
        "vllm:request_success_total: type counter in the file, gauge emitted",
    ]


@pytest.mark.parametrize("source", SOURCES.values(), ids=lambda s: s.file)
def test_recorded_files_name_the_release_they_came_from(source):
    version = recorded_version(METRICS_DIR / source.file)
    assert version and version != "version unknown"
