"""The generated rules on the real native stack: every metric they read is one a real exporter
emits (the contract), Prometheus loads and evaluates them without errors, and the idle stack raises
no alert but the Watchdog, which reaches Alertmanager."""

from __future__ import annotations

import re
import time

import pytest
import requests

from leakwatch.backtest.command import REFERENCE_RULES
from leakwatch.backtest.rule_evaluator import load_rules
from leakwatch.core import webauth
from leakwatch.core.metric_catalogue import exporter_metrics, metric_names
from leakwatch.core.paths import RULES_DIR

RULE_FILES = sorted(RULES_DIR.glob("*.yml"))
# Alerts that fire on a healthy idle stack by design.
EXPECTED_FIRING = {"Watchdog"}


def test_every_metric_a_rule_reads_is_emitted_by_a_real_exporter(native_stack, metric_catalogue):
    recording, alerting = load_rules(RULE_FILES + [REFERENCE_RULES])
    recorded = {r.name for r in recording}
    # Series Prometheus itself stores (up, scrape_*), besides what the targets expose.
    stored = native_stack.prometheus.series_names()
    # The exporter is built to config/metrics/leakwatch-exporter.csv; until it runs in the stack,
    # its contract stands in for the live scrape.
    known = metric_catalogue | stored | set(exporter_metrics()) | recorded
    unknown = {}
    for rule in (*recording, *alerting):
        missing = metric_names(rule.expr) - known
        if missing:
            unknown[rule.name] = sorted(missing)
    assert not unknown, f"rules read metrics no exporter emits: {unknown}"


def test_histogram_buckets_and_label_values_the_rules_match_exist(native_stack):
    """`le` boundaries and label values in the rules are the ones vLLM writes (e.g. le="15.0")."""
    native_stack.prometheus.wait_for('vllm:e2e_request_latency_seconds_count{job="vllm"}')
    text = requests.get(f"{native_stack.vllm_url}/metrics", timeout=10).text
    _, alerting = load_rules(RULE_FILES)
    checked = 0
    for rule in alerting:
        for metric, body in re.findall(r"(vllm:[a-z0-9_:]+_bucket)\{([^}]*)\}", rule.expr):
            le = re.search(r'le="([^"]+)"', body).group(1)
            assert f"{metric}{{" in text and f'le="{le}"' in text.split(metric, 1)[1].split("# HELP", 1)[0], (
                rule.name,
                metric,
                le,
            )
            checked += 1
    assert checked >= 3
    assert 'status="2xx"' in text, "the instrumentator labels HTTP status classes as 2xx/5xx"
    assert 'python_gc_collections_total{generation="2"}' in text


def test_prometheus_loads_and_evaluates_every_rule_without_errors(native_stack):
    prom = native_stack.prometheus
    recording, alerting = load_rules(RULE_FILES)
    want = {r.name for r in recording} | {r.name for r in alerting}
    # Wait for two evaluations of every group after we first see it: expressions that only fail
    # once data flows (e.g. many-to-many matching) show up then.
    seen: dict[str, set[str]] = {}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        groups = prom.rules()
        for group in groups:
            seen.setdefault(group["name"], set()).add(group.get("lastEvaluation", ""))
        if groups and all(len(stamps) >= 3 for stamps in seen.values()):
            break
        time.sleep(3)
    groups = prom.rules()
    assert all(len(stamps) >= 3 for stamps in seen.values()), seen
    state = [dict(rule, group=group["name"]) for group in groups for rule in group["rules"]]
    loaded = {r["name"] for r in state}
    assert want <= loaded, f"rules missing in Prometheus: {sorted(want - loaded)}"
    assert {g["name"] for g in groups} >= {
        "leakwatch.recording",
        "leakwatch.gpu",
        "leakwatch.host",
        "leakwatch.serving",
        "leakwatch.metrics",
        "leakwatch.meta",
    }
    bad = [
        (r["group"], r["name"], r["health"], r.get("lastError"))
        for r in state
        if r["health"] != "ok" or r.get("lastError")
    ]
    assert not bad, bad
    failures = prom.query("sum(prometheus_rule_evaluation_failures_total)")
    assert failures and float(failures[0]["value"][1]) == 0
    # The recording rules produce data from the real exporters: the joins match their labels
    # (request counts need two scrapes of vLLM first).
    has_roles = lambda result: {"api_server", "engine_core"} <= {r["metric"].get("role") for r in result}
    prom.wait_for("leakwatch:process_memory_bytes", predicate=has_roles, timeout=120)
    prom.wait_for("leakwatch:host_memory_available_bytes", timeout=120)
    prom.wait_for("leakwatch:vllm_requests:increase30m", timeout=120)


@pytest.mark.quiet_stack
def test_idle_stack_fires_only_the_watchdog_and_alertmanager_receives_it(native_stack):
    prom = native_stack.prometheus
    # The Watchdog fires after its `for: 1m`; by then every other rule has been evaluated too.
    prom.wait_for('ALERTS{alertname="Watchdog", alertstate="firing"}', timeout=180)
    # Start-up leaves VLLMDown pending until Prometheus has scraped the fresh vLLM once and evaluated
    # its rules again; that must clear by itself, and nothing else may be pending or firing.
    deadline = time.monotonic() + 90
    while True:
        active = {(a["labels"]["alertname"], a["state"]) for a in prom.alerts()}
        if {name for name, _ in active} <= EXPECTED_FIRING or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert {name for name, _ in active} <= EXPECTED_FIRING, active
    am = native_stack.url("alertmanager")
    deadline = time.monotonic() + 60
    names: set[str] = set()
    while time.monotonic() < deadline:
        names = {
            a["labels"]["alertname"]
            for a in requests.get(f"{am}/api/v2/alerts", timeout=10, auth=webauth.auth_for(am)).json()
        }
        if "Watchdog" in names:
            break
        time.sleep(2)
    assert names == {"Watchdog"}, names
    # The native Alertmanager runs the rendered config: the healer webhook on loopback with a token file.
    config = requests.get(f"{am}/api/v2/status", timeout=10, auth=webauth.auth_for(am)).json()["config"]["original"]
    assert "remediation" in config and "credentials_file" in config and "127.0.0.1" in config
