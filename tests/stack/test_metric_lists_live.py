"""config/metrics/vllm.csv, node-exporter.csv, prometheus.csv and alertmanager.csv are what the real servers emit: `leakwatch
metrics-record --check` against the shared native stack finds no drift. When vLLM or node exporter is
upgraded this fails, naming each metric gone, new or retyped; rerun `leakwatch metrics-record`
against a running stack and review the diff (rules and dashboards are then checked against it)."""

from __future__ import annotations

from leakwatch.metrics_record.command import SOURCES, record


def test_recorded_metric_lists_match_the_real_servers(native_stack):
    urls = {key: native_stack.url(key) for key in SOURCES}
    assert record(urls, check=True) == {key: [] for key in SOURCES}
