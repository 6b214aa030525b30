"""The chart's PrometheusRule: the same rules as compose and the native runner, from the same
generator, with only the selectors and host labels changed; checked by promtool, the compose stack's
promtool unit tests rerun on it with the chart's job names and pod labels, and backtested."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from leakwatch.helm import engine, identity
from leakwatch.helm.chart_files import kubernetes_thresholds, rule_groups
from leakwatch.paths import PROMETHEUS_DIR
from leakwatch.rules.config import ALERTS_FILE, load as load_thresholds
from leakwatch.rules.render import render_rules

# Runs the Helm engine's renders, promtool, Prometheus or node (the CRD schemas).

POD = {"namespace": "serving", "pod": "leakwatch-demo-5c7f9d-x2x9q"}
# Groups whose alerts keep the labels of the series they watch (cards, process roles, the node).
PER_SERIES_GROUPS = {"leakwatch.gpu", "leakwatch.host", "leakwatch.metrics"}


def chart_rules() -> list[dict]:
    (rule,) = [o for o in engine.render(engine.load_values(engine.values_files()[0])) if o["kind"] == "PrometheusRule"]
    return rule["spec"]["groups"]


def compose_groups() -> list[dict]:
    """The compose stack's groups less the alerts the chart leaves to kube-prometheus-stack."""
    return identity.without_kube_prometheus_stack_alerts([g for doc in render_rules().values() for g in doc["groups"]])


def _to_compose_vocabulary(expr: str) -> str:
    """The chart's expression with its selectors and host labels turned back into compose's."""
    compose = load_thresholds()
    for exporter, selector in identity.rule_selectors(compose.raw["selectors"]).items():
        if selector != compose.selector(exporter):
            expr = expr.replace(selector, compose.selector(exporter))
    host = ", ".join(identity.HOST_LABELS)
    base = ", ".join(compose.host_labels)

    def back(m: re.Match) -> str:
        if m[2] == ")":
            return f"{m[1]} ({base})"
        return f"{m[1]} ({base}, " if base else f"{m[1]} ("

    return re.sub(rf"\b(by|on) \({re.escape(host)}(, |\))", back, expr)


def test_chart_rules_are_compose_rules_apart_from_selectors_and_host_labels():
    chart, compose = chart_rules(), compose_groups()
    assert [g["name"] for g in chart] == [g["name"] for g in compose]
    for cg, pg in zip(chart, compose):
        assert len(cg["rules"]) == len(pg["rules"]), cg["name"]
        for mine, theirs in zip(cg["rules"], pg["rules"]):
            assert {k: v for k, v in mine.items() if k != "expr"} == {k: v for k, v in theirs.items() if k != "expr"}
            assert _to_compose_vocabulary(mine["expr"]) == theirs["expr"], mine.get("alert") or mine.get("record")


def test_the_diff_sees_a_changed_threshold(tmp_path):
    """The diff compares real expressions: a threshold changed on one side only is caught."""
    raw = yaml.safe_load(ALERTS_FILE.read_text())
    raw["gpu"]["fast_min_mib_per_request"] = 3
    other = tmp_path / "alerts.yaml"
    other.write_text(yaml.safe_dump(raw))
    mine = [_to_compose_vocabulary(r["expr"]) for g in rule_groups(other) for r in g["rules"]]
    theirs = [r["expr"] for g in compose_groups() for r in g["rules"]]
    differing = [a for a, b in zip(mine, theirs) if a != b]
    assert len(mine) == len(theirs) and differing
    assert all("3145728" in text for text in differing)  # 3 MiB per request, in bytes


def test_every_join_is_per_replica():
    """Every aggregation and join in the chart's rules that names host labels names (namespace, pod)."""
    host = ", ".join(identity.HOST_LABELS)
    exprs = [r["expr"] for g in chart_rules() for r in g["rules"]]
    assert kubernetes_thresholds()["host_labels"] == identity.HOST_LABELS
    assert sum(f"on ({host})" in e for e in exprs) >= 5
    assert not any(re.search(r"\b(on|by) \(\)", e) for e in exprs)


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chart-rules") / "leakwatch-chart.yml"
    path.write_text(yaml.safe_dump({"groups": chart_rules()}, sort_keys=False))
    return path


def test_promtool_checks_the_chart_rules(rules_file):
    done = subprocess.run(["promtool", "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# Who carries which pod on Kubernetes: vLLM and the exporter sidecar are scraped from the serving
# pod, dcgm-exporter attributes a card to the pod holding it (pod labels on, honorLabels), the node
# exporter's series carry its own pod; Prometheus's and Alertmanager's own series are left alone.
NODE_POD = {"namespace": "monitoring", "pod": "kube-prometheus-stack-prometheus-node-exporter-7x2bq"}
JOB_RENAMES = {"vllm": identity.JOBS["vllm"], "node": identity.JOBS["node"]}


def _series_pod(series: str) -> dict[str, str]:
    job = re.search(r'job="([^"]*)"', series)
    job = job[1] if job else ""
    if job == "node":
        return NODE_POD
    if job in ("prometheus", "alertmanager"):
        return {}
    return POD


def _relabel_series(series: str) -> tuple[str, str | None, dict[str, str]]:
    """(rewritten series, its instance, the pod labels it got)."""
    pod = _series_pod(series)
    instance = re.search(r'instance="([^"]*)"', series)
    for old, new in JOB_RENAMES.items():
        series = series.replace(f'job="{old}"', f'job="{new}"')
    if pod:
        extra = ",".join(f'{k}="{v}"' for k, v in pod.items())
        if series.endswith("{}"):
            series = series[:-1] + extra + "}"
        elif series.endswith("}"):
            series = series[:-1] + "," + extra + "}"
        else:
            series = series + "{" + extra + "}"
    return series, instance[1] if instance else None, pod


# Where Kubernetes differs from one host on purpose: the node exporter's series carry its own pod,
# so the node's MemAvailable + SwapFree does not join a serving pod; the pod's memory limit (the
# exporter's cgroup series; the chart always sets one) is the bound instead. The compose tests
# below feed only the node's figures, so on Kubernetes these cases have nothing to compare with.
KUBERNETES_DIFFERENCES = {  # test_host_leak_exhaustion_on_kubernetes_uses_the_pods_memory_limit covers the first
    ("worker host-memory leak", "HostMemoryLeak", "critical"): "exhaustion forecast needs the pod's cgroup limit",
    (
        "memory usage against what the host can give",
        "HighMemoryUsage",
        None,
    ): "no container limit: the host's is the bound",
    # The fast leak's host forecast reads the same node figures (the first is covered with the pod's
    # limit by test_host_leak_exhaustion_on_kubernetes_uses_the_pods_memory_limit).
    ("fast leak from the first minutes", "HostMemoryRunningOut", "warning"): "forecast needs the pod's cgroup limit",
    ("fast leak from the first minutes", "HostMemoryRunningOut", "critical"): "forecast needs the pod's cgroup limit",
    ("a fast leak comes back after the healer's restart", "HostMemoryRunningOut", "warning"): "the same",
    ("a fast leak comes back after the healer's restart", "HostMemoryRunningOut", "critical"): "the same",
}


def _pod_labels_kept(groups: list[dict]) -> dict[tuple[str, str], str]:
    """(alert, severity) -> how it treats the pod labels: "dropped" when one of its aggregations leaves the host
    labels out (per instance, per model), "host" when it aggregates per host (namespace, pod),
    "series" when it keeps the labels of the series it watches."""
    host = ", ".join(identity.HOST_LABELS)
    kept = {}
    dropping_records = set()
    for group in groups:
        for rule in group["rules"]:
            clauses = re.findall(r"\bby \(([^)]*)\)", rule["expr"])
            drops = any(not c.startswith(host) for c in clauses) or any(
                re.search(rf"{re.escape(record)}\b", rule["expr"]) for record in dropping_records
            )
            if "record" in rule:
                if drops:
                    dropping_records.add(rule["record"])
                continue
            if drops:
                kept[rule["alert"], rule["labels"]["severity"]] = "dropped"
            elif clauses:
                kept[rule["alert"], rule["labels"]["severity"]] = "host"
            else:
                kept[rule["alert"], rule["labels"]["severity"]] = "series"
    return kept


@pytest.mark.parametrize("test_file", sorted((PROMETHEUS_DIR / "tests").glob("*.test.yml")), ids=lambda p: p.name)
def test_compose_promtool_unit_tests_pass_on_the_chart_rules(test_file, rules_file, tmp_path):
    """The compose stack's promtool unit tests, rewritten for one serving pod scraped by the chart
    next to kube-prometheus-stack (pod labels as _series_pod says, the chart's job names): every
    alert must come out as before, plus the pod labels of the series it watches, or the serving
    pod's where the rule aggregates per host."""
    kept = _pod_labels_kept(chart_rules())
    doc = yaml.safe_load(test_file.read_text())
    doc["rule_files"] = [str(rules_file)]
    if "group_eval_order" in doc:  # the chart has no leakwatch.meta group (kube-prometheus-stack's alerts)
        names = {g["name"] for g in chart_rules()}
        doc["group_eval_order"] = [g for g in doc["group_eval_order"] if g in names]
    for test in doc["tests"]:
        pods_of_instance: dict[str, dict[str, str]] = {}
        for series in test.get("input_series", []):
            series["series"], instance, pod = _relabel_series(series["series"])
            if instance:
                pods_of_instance[instance] = pod
        for case in test.get("alert_rule_test", []):
            if (test["name"], case["alertname"], None) in KUBERNETES_DIFFERENCES or (
                case["alertname"] in identity.LEFT_TO_KUBE_PROMETHEUS_STACK
            ):
                case["exp_alerts"] = None  # marked below and removed
                continue
            case["exp_alerts"] = [
                a
                for a in case.get("exp_alerts", [])
                if (test["name"], case["alertname"], a.get("exp_labels", {}).get("severity"))
                not in KUBERNETES_DIFFERENCES
            ]
            for alert in case["exp_alerts"]:
                labels = alert.setdefault("exp_labels", {})
                if labels.get("job") in JOB_RENAMES:
                    old = labels["job"]
                    labels["job"] = JOB_RENAMES[old]
                    # Descriptions that name the job ("node at node-exporter:9100 ...").
                    notes = alert.get("exp_annotations", {})
                    if "description" in notes:
                        notes["description"] = re.sub(rf"^{old} at ", f"{labels['job']} at ", notes["description"])
                how = kept[case["alertname"], labels["severity"]]
                if how == "host":
                    labels.update(POD)
                elif how == "series" and "instance" in labels:
                    labels.update(pods_of_instance.get(labels["instance"], {}))
        test["alert_rule_test"] = [c for c in test.get("alert_rule_test", []) if c["exp_alerts"] is not None]
        for _case in test.get("promql_expr_test", []) or []:
            pytest.fail(f"{test_file.name}: promql_expr_test is not rewritten yet")
    rewritten = tmp_path / test_file.name
    rewritten.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = subprocess.run(["promtool", "test", "rules", str(rewritten)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


# -- backtest: two replicas, one leaks -------------------------------------------------------------


class _ReplicaSink:
    """Writes a simulated host's series as one pod of the chart would have them scraped: the
    chart's job names and the pod's namespace/pod labels; the node exporter's series (one node
    under both pods here) carry its own pod and come from the first replica only."""

    def __init__(self, sink, pod: dict[str, str], pod_ip: str, with_node: bool):
        self.sink, self.pod, self.pod_ip, self.with_node = sink, pod, pod_ip, with_node

    def tick(self, ts: float, samples: list[tuple[str, float]]) -> None:
        out = []
        for series, value in samples:
            node = 'job="node"' in series
            if node and not self.with_node:
                continue
            rewritten, _, _ = _relabel_series(series)
            if not node:
                # Scraped from the pod: its IP is the instance.
                rewritten = re.sub(r'instance="[^":]*:', f'instance="{self.pod_ip}:', rewritten)
                rewritten = rewritten.replace(f'pod="{POD["pod"]}"', f'pod="{self.pod["pod"]}"')
            out.append((rewritten, value))
        self.sink.tick(ts, out)


def test_backtest_two_replicas_only_the_leaking_pod_alerts(tmp_path, rules_file):
    """Article A's GPU leak in one replica, the same day without the leak in the other, backtested
    on the chart's rules with the real Prometheus: the leak alerts fire for the leaking pod only."""
    from dataclasses import replace

    from leakwatch.backtest.engine import Backtest
    from leakwatch.backtest.openmetrics import BlockFiles
    from leakwatch.scenarios import library
    from leakwatch.scenarios.simulate import simulate

    leaky_pod = POD
    healthy_pod = {**POD, "pod": "leakwatch-demo-5c7f9d-h3alt"}
    leaky = library.get("article_a_vllm", days=0.12)
    healthy = replace(leaky, name="article_a_vllm_no_leak", leaks=())
    sink = BlockFiles(tmp_path / "raw")
    first = simulate(leaky, _ReplicaSink(sink, leaky_pod, "10.0.3.11", with_node=True))
    simulate(healthy, _ReplicaSink(sink, healthy_pod, "10.0.3.12", with_node=False))
    files = sink.close()

    backtest = Backtest(tmp_path, step_s=60, lookback_s=90)
    backtest.load(files)
    result = backtest.run([rules_file], first.start, first.end)
    fired = {(r.rule.key, e.labels.get("pod")) for r in result.alerts for e in r.fired}
    assert ("GPUMemoryLeakSuspected/warning", leaky_pod["pod"]) in fired, fired
    # Nothing at all for the healthy replica; every per-pod alert names the leaking one.
    assert {pod for _, pod in fired if pod} == {leaky_pod["pod"]}, fired
    for r in result.alerts:
        for e in r.fired:
            if r.rule.key.startswith("GPU"):
                assert e.labels["namespace"] == leaky_pod["namespace"]


@pytest.mark.parametrize("name", ["worker host-memory leak", "fast leak from the first minutes"])
def test_host_leak_exhaustion_on_kubernetes_uses_the_pods_memory_limit(rules_file, tmp_path, name):
    """A compose host-leak test, as Kubernetes sees it: two pods, the node's memory out of the
    picture (its series carry the node exporter's pod), the leaking pod's container limit read by
    its exporter sidecar. Warning and remediated critical fire for the leaking pod only."""
    doc = yaml.safe_load((PROMETHEUS_DIR / "tests" / "host.test.yml").read_text())
    (case,) = [t for t in doc["tests"] if t["name"] == name]
    (available,) = [i["values"] for i in case["input_series"] if "node_memory_MemAvailable_bytes" in i["series"]]
    start, fall, count = re.fullmatch(r"(\d+)-(\d+)x(\d+)", available).groups()
    limit = 6 << 30
    pods = {"10.0.3.11": POD, "10.0.3.12": {**POD, "pod": "leakwatch-demo-5c7f9d-h3alt"}}
    series = []
    for ip, pod in pods.items():
        for item in case["input_series"]:
            if 'job="node"' in item["series"]:
                continue
            text, _, _ = _relabel_series(item["series"])
            text = re.sub(r'instance="[^":]*:', f'instance="{ip}:', text).replace(POD["pod"], pod["pod"])
            leaking = pod is POD
            values = item["values"] if leaking else re.sub(r"\+\d+x", "+0x", item["values"])
            series.append({"series": text, "values": values})
        labels = f'instance="{ip}:9405",job="leakwatch",namespace="{pod["namespace"]}",pod="{pod["pod"]}"'
        # What is left under the limit falls as the compose test's MemAvailable does.
        pss = f"{limit - int(start)}+{fall}x{count}" if pod is POD else f"{limit // 2}x{count}"
        series += [
            {"series": f"leakwatch_cgroup_memory_limit_bytes{{{labels}}}", "values": f"{limit}x{count}"},
            {
                "series": f'leakwatch_process_proportional_memory_bytes{{role="worker",rank="0",{labels}}}',
                "values": pss,
            },
        ]
    case["input_series"] = series
    for check in case["alert_rule_test"]:
        for alert in check["exp_alerts"]:
            alert["exp_labels"] = {**alert["exp_labels"], **POD, "instance": "10.0.3.11:9405"}
            notes = alert["exp_annotations"]
            notes["description"] = notes["description"].replace("leakwatch-exporter:9405", "10.0.3.11:9405")
    doc["tests"] = [case]
    doc["rule_files"] = [str(rules_file)]
    path = tmp_path / "kubernetes-host.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
