"""The generated rules: valid for promtool, unit-tested alert by alert, documented in the runbook,
scaled consistently for drills, and free of the articles' mistakes (rate() on gauges)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from leakwatch.backtest.command import REFERENCE_RULES
from leakwatch.backtest.rule_evaluator import load_rules
from leakwatch.core.durations import parse_duration
from leakwatch.core.errors import LeakwatchError
from leakwatch.core.metric_catalogue import dcgm_metrics, exporter_metrics
from leakwatch.core.paths import PROMETHEUS_DIR, REPO_ROOT, RULES_DIR
from leakwatch.rules.render import render_rules

RULE_FILES = sorted(RULES_DIR.glob("*.yml"))
TEST_FILES = sorted((PROMETHEUS_DIR / "tests").glob("*.test.yml"))
RUNBOOK = REPO_ROOT / "docs" / "runbook.md"
ALERTS = load_rules(RULE_FILES)[1]


def run(*cmd: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)


def test_rule_files_pass_promtool_check():
    result = run("promtool", "check", "rules", *map(str, RULE_FILES), str(REFERENCE_RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass():
    assert TEST_FILES, "no promtool unit tests found"
    result = run("promtool", "test", "rules", *map(str, TEST_FILES))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_promtool_unit_tests_can_fail(tmp_path):
    # The test above must be able to fail: a wrong expectation makes promtool exit non-zero.
    doc = yaml.safe_load((PROMETHEUS_DIR / "tests" / "serving.test.yml").read_text())
    doc["rule_files"] = [str(RULES_DIR / Path(f).name) for f in doc["rule_files"]]
    case = next(t for t in doc["tests"] if t["name"] == "targets down")
    case["alert_rule_test"][1]["exp_alerts"][0]["exp_annotations"]["summary"] = "something else"
    doc["tests"] = [case]
    broken = tmp_path / "broken.test.yml"
    broken.write_text(yaml.safe_dump(doc))
    result = run("promtool", "test", "rules", str(broken))
    assert result.returncode != 0 and "something else" in result.stdout + result.stderr


def _unit_cases() -> list[dict]:
    """Every alert_rule_test entry with its test group and evaluation time in seconds."""
    cases = []
    for path in TEST_FILES:
        for group_index, group in enumerate(yaml.safe_load(path.read_text())["tests"]):
            for case in group.get("alert_rule_test", []):
                cases.append(
                    {
                        "group": (path.name, group_index),
                        "alert": case["alertname"],
                        "t": parse_duration(case["eval_time"]),
                        "severities": [a["exp_labels"].get("severity") for a in case.get("exp_alerts") or []],
                        "annotated": all(a.get("exp_annotations") for a in case.get("exp_alerts") or []),
                    }
                )
    return cases


@pytest.mark.parametrize("alert", sorted({(a.name, a.severity) for a in ALERTS}), ids="/".join)
def test_every_alert_is_unit_tested_before_and_after_its_for(alert):
    """One evaluation where it does not fire yet and a later one, in the same test, where it does
    with exact labels and annotations."""
    name, severity = alert
    cases = [c for c in _unit_cases() if c["alert"] == name]
    fired = [c for c in cases if severity in c["severities"]]
    assert fired, f"no promtool test expects {name} ({severity}) to fire"
    assert all(c["annotated"] for c in fired), f"{name}: expected alerts without exact annotations"
    quiet_before = [
        c
        for c in cases
        for f in fired
        if c["group"] == f["group"] and c["t"] < f["t"] and severity not in c["severities"]
    ]
    assert quiet_before, f"no promtool test checks that {name} ({severity}) does not fire before its `for:` ends"


def _runbook_anchors() -> set[str]:
    anchors = set()
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return anchors


def test_every_alert_links_to_a_runbook_section_that_says_what_to_check_and_do():
    anchors = _runbook_anchors()
    text = RUNBOOK.read_text()
    for alert in ALERTS:
        rule = next(
            r
            for g in yaml.safe_load(_rule_file_of(alert).read_text())["groups"]
            for r in g["rules"]
            if r.get("alert") == alert.name and r["labels"]["severity"] == alert.severity
        )
        url = rule["annotations"]["runbook_url"]
        path, anchor = url.split("#")
        assert REPO_ROOT / path == RUNBOOK, url
        assert anchor in anchors, f"{alert.name}: no heading for #{anchor} in {RUNBOOK.name}"
        section = text.split(f"## {alert.name}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**Meaning.**", "**Check.**", "**Act.**"):
            assert part in section, f"runbook section {alert.name} lacks {part}"


def _rule_file_of(alert) -> Path:
    return RULES_DIR / alert.source


def _all_alert_rules() -> list[dict]:
    return [
        r for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"] if "alert" in r
    ]


def test_every_alert_has_severity_fixed_summary_templated_description():
    by_name: dict[str, set[str]] = {}
    for rule in _all_alert_rules():
        labels, notes = rule["labels"], rule["annotations"]
        assert labels["severity"] in {"warning", "critical", "none"}, rule["alert"]
        assert "{{" not in notes["summary"] and notes["summary"].endswith("."), rule["alert"]
        assert "$labels" in notes["description"] or "$value" in notes["description"] or rule["alert"] == "Watchdog", (
            rule["alert"]
        )
        assert parse_duration(rule["for"]) > 0, f"{rule['alert']}: needs a `for:` so a blip does not page"
        by_name.setdefault(rule["alert"], set()).add(notes["summary"])
    # Warning and critical twins share the name and the summary.
    assert all(len(summaries) == 1 for summaries in by_name.values()), by_name


def test_only_critical_leak_forecasts_are_remediated():
    remediated = {
        (r["alert"], r["labels"]["severity"]) for r in _all_alert_rules() if r["labels"].get("remediate") == "true"
    }
    assert remediated == {
        ("GPUMemoryLeakSuspected", "critical"),
        ("HostMemoryLeak", "critical"),
        ("GPUMemoryRunningOut", "critical"),
        ("HostMemoryRunningOut", "critical"),
    }


GAUGES = (
    {name for name, row in dcgm_metrics().items() if row["type"] == "gauge"}
    | {name for name, row in exporter_metrics().items() if row["type"] == "gauge"}
    | {
        "process_resident_memory_bytes",
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "node_memory_MemAvailable_bytes",
        "node_memory_SwapFree_bytes",
    }
)


def test_no_rate_or_increase_on_gauges():
    """Article B's mistake: rate() on a gauge reads every drop as a counter reset."""
    recording, alerting = load_rules(RULE_FILES)
    recorded_gauges = {r.name for r in recording}  # our recorded series are all gauges
    for rule in (*recording, *alerting):
        for func, metric in re.findall(r"\b(rate|irate|increase)\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", rule.expr):
            assert metric not in GAUGES | recorded_gauges, f"{rule.name}: {func}() on the gauge {metric}"


def test_the_check_above_catches_the_articles_rule():
    _, reference = load_rules([REFERENCE_RULES])
    article = next(r for r in reference if r.name == "ArticleB_GPUMemoryLeakSuspected")
    assert re.search(r"\brate\(\s*DCGM_FI_DEV_FB_USED", article.expr) and "DCGM_FI_DEV_FB_USED" in GAUGES


def test_latency_objectives_are_bucket_boundaries_of_vllm_and_the_simulator():
    from vllm.v1.metrics import buckets

    from leakwatch.scenarios import request_metrics

    assert request_metrics.TTFT_BUCKETS == buckets.TIME_TO_FIRST_TOKEN_BUCKETS
    assert request_metrics.ITL_BUCKETS == buckets.INTER_TOKEN_LATENCY_BUCKETS
    assert request_metrics.E2E_BUCKETS == buckets.REQUEST_LATENCY_BUCKETS
    used = {
        metric: float(le)
        for rule in ALERTS
        for metric, le in re.findall(r'(vllm:[a-z0-9_]+)_bucket\{[^}]*le="([^"]+)"', rule.expr)
    }
    boundaries = {
        "vllm:time_to_first_token_seconds": buckets.TIME_TO_FIRST_TOKEN_BUCKETS,
        "vllm:inter_token_latency_seconds": buckets.INTER_TOKEN_LATENCY_BUCKETS,
        "vllm:e2e_request_latency_seconds": buckets.REQUEST_LATENCY_BUCKETS,
    }
    assert set(used) == set(boundaries)
    for metric, le in used.items():
        assert le in boundaries[metric], f"{metric}: {le} is not a bucket boundary; the share would interpolate"


def _windows(doc: dict) -> list[str]:
    return [w for g in doc["groups"] for r in g["rules"] for w in re.findall(r"\[([0-9a-z]+)\]", r["expr"])]


def test_a_drill_gets_the_same_rules_with_durations_scaled():
    production, drill = render_rules(), render_rules(time_scale=0.01, min_window_s=1)
    prod_alerts = [r for g in production["leakwatch-alerts.yml"]["groups"] for r in g["rules"]]
    drill_alerts = [r for g in drill["leakwatch-alerts.yml"]["groups"] for r in g["rules"]]
    assert [(r["alert"], r["labels"]) for r in prod_alerts] == [(r["alert"], r["labels"]) for r in drill_alerts]
    for doc_name in production:
        prod_w, drill_w = _windows(production[doc_name]), _windows(drill[doc_name])
        assert len(prod_w) == len(drill_w)
        for p, d in zip(prod_w, drill_w):
            assert parse_duration(d) == pytest.approx(parse_duration(p) / 100, abs=0.001), (p, d)
    for p, d in zip(prod_alerts, drill_alerts):
        assert parse_duration(d["for"]) == pytest.approx(parse_duration(p["for"]) / 100, abs=0.001)
    # A per-time rate threshold grows with the compression; a per-request one does not.
    fast = lambda doc: next(
        r
        for g in doc["leakwatch-alerts.yml"]["groups"]
        for r in g["rules"]
        if r["alert"] == "GPUMemoryLeakSuspected" and r["labels"]["severity"] == "warning"
    )["expr"]
    rate = lambda expr: float(re.search(r"deriv\w+ > ([0-9.e+]+)\)", expr).group(1))
    assert rate(fast(drill)) == pytest.approx(100 * rate(fast(production)), rel=1e-4)
    assert re.search(r"\n> 1572864\n", fast(drill)) and re.search(r"\n> 1572864\n", fast(production))  # 1.5 MiB


def test_a_time_scale_that_leaves_windows_too_short_is_refused():
    with pytest.raises(LeakwatchError, match="shorter than"):
        render_rules(time_scale=0.001)


@pytest.mark.parametrize("time_scale, host_labels", [(0.05, []), (1.0, ["cluster", "node"])])
def test_drill_and_multi_host_renderings_pass_promtool(tmp_path, time_scale, host_labels):
    from leakwatch.core.alert_config import ALERTS_FILE

    raw = yaml.safe_load(ALERTS_FILE.read_text())
    raw["host_labels"] = host_labels
    config = tmp_path / "alerts.yaml"
    config.write_text(yaml.safe_dump(raw))
    docs = render_rules(time_scale=time_scale, min_window_s=1, config=config)
    paths = []
    for name, doc in docs.items():
        paths.append(tmp_path / name)
        paths[-1].write_text(yaml.safe_dump(doc))
    result = run("promtool", "check", "rules", *map(str, paths))
    assert result.returncode == 0, result.stdout + result.stderr
    if host_labels:
        assert "on (cluster, node) group_left ()" in paths[1].read_text()


def test_a_drill_scale_leaves_out_what_cannot_work_and_says_so(tmp_path):
    """At x60 with 2-s scrapes the fast-leak rules' 2-minute slices are one scrape: they (and the
    recording rules only they read) leave the drill's copy, named in its header; the drill's own
    alert may never be left out; at x10 nothing is."""
    from leakwatch.drill.drill_settings import write_rules

    omitted: list[str] = []
    docs = render_rules(time_scale=1 / 60, min_window_s=8, omitted=omitted)
    assert sorted(omitted) == ["GPUMemoryRunningOut", "HostMemoryRunningOut"]
    alerts = {r["alert"] for g in docs["leakwatch-alerts.yml"]["groups"] for r in g["rules"]}
    assert "HostMemoryLeak" in alerts and not alerts & set(omitted)
    records = {r["record"] for g in docs["leakwatch-recording.yml"]["groups"] for r in g["rules"]}
    # Their slopes left with them (the plain sum of vLLM's memory, which has no window, stays).
    assert not any(
        name.startswith(("leakwatch:vllm_host_memory_bytes:", "leakwatch:vllm_gpu_memory_bytes:")) for name in records
    )
    assert "leakwatch:vllm_host_memory_bytes" in records
    written = write_rules(tmp_path / "x60", 60, 2)
    assert "Left out, their windows are under four scrapes at this scale: " in written[0].read_text()
    with pytest.raises(LeakwatchError, match="HostMemoryRunningOut: its windows are under four scrapes"):
        write_rules(tmp_path / "fast-at-x60", 60, 2, alert="HostMemoryRunningOut")
    omitted = []
    render_rules(time_scale=1 / 10, min_window_s=8, omitted=omitted)
    assert omitted == []
