"""The chart's PrometheusRule: the same rules as compose and the native runner, from the same
generator, with only the selectors and host labels changed; checked by promtool, the compose stack's
promtool unit tests rerun on it with the chart's job names and pod labels, and backtested."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from leakwatch.core import alert_config
from leakwatch.core.alert_config import ALERTS_FILE
from leakwatch.core.durations import parse_duration
from leakwatch.core.paths import PROMETHEUS_DIR
from leakwatch.helm import engine, identity
from leakwatch.helm.chart_files import kubernetes_thresholds, rule_groups
from leakwatch.rules.render import render_rules

# Runs the Helm engine's renders, promtool, Prometheus or node (the CRD schemas).

POD = {"namespace": "serving", "pod": "leakwatch-demo-5c7f9d-x2x9q"}
# Groups whose alerts keep the labels of the series they watch (cards, process roles, the node).
PER_SERIES_GROUPS = {"leakwatch.gpu", "leakwatch.host", "leakwatch.metrics"}


def chart_rules(release: str = "leakwatch", namespace: str = "serving") -> list[dict]:
    values = engine.load_values(engine.values_files()[0])
    (rule,) = [o for o in engine.render(values, release, namespace) if o["kind"] == "PrometheusRule"]
    return rule["spec"]["groups"]


def compose_groups() -> list[dict]:
    """The compose stack's groups less the alerts the chart leaves to kube-prometheus-stack."""
    return identity.without_kube_prometheus_stack_alerts([g for doc in render_rules().values() for g in doc["groups"]])


RELEASE = "serving/leakwatch"  # chart_rules()'s <namespace>/<release>


def _unscoped(rule: dict, release: str = RELEASE) -> dict:
    """The chart's rule less what keeps it to one release: the release matcher on its series and the
    release label on what it records or raises, and DCGM's and the node's series joined to its pods
    (identity.scoped_series)."""
    matcher = re.escape(f'{identity.RELEASE_LABEL}="{release}"')
    scoped_foreign = (
        r"\(([A-Za-z_:]+(?:\{[^}]*\})?) and on \((?:namespace, pod|instance)\) "
        rf'(?:label_replace\()?up\{{job="{identity.JOBS["vllm"]}", {matcher}\}}'
        rf'(?:, "instance", "\$1", "{identity.NODE_LABEL}", "\(\.\*\)"\))?\)'
    )
    assert rule["labels"][identity.RELEASE_LABEL] == release
    labels = {k: v for k, v in rule["labels"].items() if k != identity.RELEASE_LABEL}
    expr = re.sub(scoped_foreign, r"\1", rule["expr"])
    expr = re.sub(rf"\{{{matcher}\}}", "", re.sub(rf", {matcher}", "", expr))
    out = {**rule, "expr": expr}
    if labels:
        out["labels"] = labels
    else:
        del out["labels"]
    return out


def _to_compose_vocabulary(expr: str) -> str:
    """The chart's expression with its selectors and host labels turned back into compose's."""
    compose = alert_config.load()
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
            mine = _unscoped(mine)
            assert {k: v for k, v in mine.items() if k != "expr"} == {k: v for k, v in theirs.items() if k != "expr"}
            assert _to_compose_vocabulary(mine["expr"]) == theirs["expr"], mine.get("alert") or mine.get("record")


def test_the_diff_sees_a_changed_threshold(tmp_path):
    """The diff compares real expressions: a threshold changed on one side only is caught."""
    raw = yaml.safe_load(ALERTS_FILE.read_text())
    raw["gpu"]["fast_min_growth_per_request"] = "3MiB"
    other = tmp_path / "alerts.yaml"
    other.write_text(yaml.safe_dump(raw))
    mine = [
        _to_compose_vocabulary(_unscoped(r, identity.RELEASE_PLACEHOLDER)["expr"])
        for g in rule_groups(other)
        for r in g["rules"]
    ]
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
# The node exporter's instance in the compose tests; on Kubernetes <node IP>:9100, which the
# chart's monitors put in identity.NODE_LABEL of the serving pod's targets.
NODE_INSTANCE = "node-exporter:9100"
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
        labels = dict(pod)
        if pod is POD and not series.startswith("DCGM_"):  # scraped by the chart's monitors
            labels[identity.RELEASE_LABEL] = RELEASE
        extra = ",".join(f'{k}="{v}"' for k, v in labels.items())
        if series.endswith("{}"):
            series = series[:-1] + extra + "}"
        elif series.endswith("}"):
            series = series[:-1] + "," + extra + "}"
        else:
            series = series + "{" + extra + "}"
    return series, instance[1] if instance else None, pod


def _add_the_serving_pods_target(test: dict) -> None:
    """The vLLM target's `up` as the chart's monitor labels it (the release, the node it runs on):
    the chart keeps DCGM's cards and the node exporter's figures to the release's serving pods
    by it. The compose tests feed it only where they test it."""
    if any(s["series"].startswith("up{") and identity.JOBS["vllm"] in s["series"] for s in test["input_series"]):
        return
    interval = parse_duration(test.get("interval", "1m"))
    last = max(parse_duration(c["eval_time"]) for c in test.get("alert_rule_test", []) + [{"eval_time": "0s"}])
    node = NODE_INSTANCE
    labels = {"instance": "10.0.3.11:8000", "job": identity.JOBS["vllm"], **POD, identity.RELEASE_LABEL: RELEASE}
    labels[identity.NODE_LABEL] = node
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    test["input_series"].append({"series": f"up{{{text}}}", "values": f"1x{int(last / interval) + 2}"})


# Where Kubernetes differs from one host on purpose: the node exporter's series carry its own pod,
# so the node's MemAvailable + SwapFree does not join a serving pod; the pod's memory limit (the
# exporter's cgroup series; the chart always sets one) is the bound instead. The compose tests
# below feed only the node's figures, so on Kubernetes these cases have nothing to compare with.
KUBERNETES_DIFFERENCES = {  # test_host_leak_exhaustion_on_kubernetes_uses_the_pods_memory_limit covers the first
    ("worker host-memory leak", "HostMemoryLeak", "critical"): "exhaustion forecast needs the pod's cgroup limit",
    ("host-memory leak on the canary only", "HostMemoryLeak", "critical"): "the same, on the canary's side",
    # bounded.test.yml's remediated cases: the same forecast (the spared case expects no critical).
    ("the same growth without a bound series is remediated as before", "HostMemoryLeak", "critical"): "the same",
    ("growth beyond its declared bound is remediated", "HostMemoryLeak", "critical"): "the same",
    ("a declared bound that does not fit the headroom is remediated", "HostMemoryLeak", "critical"): "the same",
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


def _rewrite_for_the_chart(test: dict, kept: dict[tuple[str, str], str]) -> None:
    """A compose promtool test rewritten in place for the serving pod POD of release RELEASE."""
    pods_of_instance: dict[str, dict[str, str]] = {}
    for series in test.get("input_series", []):
        series["series"], instance, pod = _relabel_series(series["series"])
        if instance:
            pods_of_instance[instance] = pod
    _add_the_serving_pods_target(test)
    for case in test.get("alert_rule_test", []):
        if (test["name"], case["alertname"], None) in KUBERNETES_DIFFERENCES or (
            case["alertname"] in identity.LEFT_TO_KUBE_PROMETHEUS_STACK
        ):
            case["exp_alerts"] = None  # marked below and removed
            continue
        case["exp_alerts"] = [
            a
            for a in case.get("exp_alerts", [])
            if (test["name"], case["alertname"], a.get("exp_labels", {}).get("severity")) not in KUBERNETES_DIFFERENCES
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
            labels[identity.RELEASE_LABEL] = RELEASE
            how = kept[case["alertname"], labels["severity"]]
            if how == "host":
                labels.update(POD)
            elif how == "series" and "instance" in labels:
                labels.update(pods_of_instance.get(labels["instance"], {}))
    test["alert_rule_test"] = [c for c in test.get("alert_rule_test", []) if c["exp_alerts"] is not None]


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
        _rewrite_for_the_chart(test, kept)
        for _case in test.get("promql_expr_test", []) or []:
            pytest.fail(f"{test_file.name}: promql_expr_test is not rewritten yet")
    rewritten = tmp_path / test_file.name
    rewritten.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = subprocess.run(["promtool", "test", "rules", str(rewritten)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


# -- a shared cluster ------------------------------------------------------------------------------

# Two more releases of the chart beside RELEASE (one in the same namespace, one elsewhere under the
# same name), each with a healthy serving pod on its own node: (namespace, release, pod, pod IP, node).
NEIGHBOURS = [
    ("serving", "leakwatch-b", "leakwatch-b-demo-7d9f4-k2m8p", "10.0.3.21", "192.168.0.2:9100"),
    ("research", "leakwatch", "leakwatch-demo-6b8c5-q4w7z", "10.0.7.31", "192.168.0.3:9100"),
]
# Workloads of other teams: a training job's and an embedding service's GPUs (DCGM attributes their
# cards to them), failing targets of other jobs, and a node none of the releases runs on.
STRANGER_GPU_PODS = [("research", "trainer-0"), ("search", "embedder-5f6d7-abcde")]
STRANGER_NODE = "192.168.0.9:9100"
# Compose cases, and what the neighbouring releases' pods do: stay where the case starts (a leak in
# one release only), or the same (each release alerts for its own full cards).
CASES = [
    ("gpu.test.yml", "fast GPU leak", "healthy"),
    ("gpu.test.yml", "GPU memory level", "the same"),
    ("host.test.yml", "swap growth", "healthy"),
]


def _flat(values: str) -> str:
    """A promtool series that stays where it starts (a healthy pod beside a leaking one)."""
    return re.sub(r"(?<=\d)([+-])\d+(?:\.\d+)?(?:e\d+)?x", r"\g<1>0x", values)


def _moved(series: str, namespace: str, release: str, pod: str, ip: str, node: str) -> str:
    """One of the serving pod's series as another release's pod (or a stranger's) would have it."""
    series = series.replace(f'pod="{POD["pod"]}"', f'pod="{pod}"')
    series = series.replace(f'namespace="{POD["namespace"]}"', f'namespace="{namespace}"')
    series = series.replace(
        f'{identity.RELEASE_LABEL}="{RELEASE}"', f'{identity.RELEASE_LABEL}="{namespace}/{release}"'
    )
    series = series.replace(f'"{NODE_INSTANCE}"', f'"{node}"')
    return re.sub(r'instance="10\.0\.3\.11:', f'instance="{ip}:', series)


@pytest.mark.parametrize("test_file,name,neighbours", CASES, ids=[n for _, n, _ in CASES])
def test_a_release_alerts_for_its_own_pods_only_in_a_shared_cluster(test_file, name, neighbours, tmp_path):
    """Three releases of the chart side by side (two in one namespace), rules of all three loaded,
    next to other teams' GPU workloads with the same leaking or full cards, a node none of them runs
    on whose swap grows, and failing targets of other jobs. The compose test's alerts fire for the
    leaking release's pod exactly as on one host (so this test can fail), and for nothing else:
    every alert of every release is checked at each of the case's evaluation times."""
    kept = _pod_labels_kept(chart_rules())
    doc = yaml.safe_load((PROMETHEUS_DIR / "tests" / test_file).read_text())
    (test,) = [t for t in doc["tests"] if t["name"] == name]
    _rewrite_for_the_chart(test, kept)
    # The serving pod's vLLM target says which node it runs on (the case's own `up`, if any, too).
    own = test["input_series"]
    for item in own:
        vllm_up = item["series"].startswith("up{") and identity.JOBS["vllm"] in item["series"]
        if vllm_up and identity.NODE_LABEL not in item["series"]:
            item["series"] = item["series"][:-1] + f',{identity.NODE_LABEL}="{NODE_INSTANCE}"}}'
    cluster = list(own)
    for namespace, release, pod, ip, node in NEIGHBOURS:
        for item in own:
            values = _flat(item["values"]) if neighbours == "healthy" else item["values"]
            cluster.append({"series": _moved(item["series"], namespace, release, pod, ip, node), "values": values})
    for namespace, pod in STRANGER_GPU_PODS:
        for item in own:
            if item["series"].startswith("DCGM_"):  # the leaking or full card, held by someone else
                cluster.append(
                    {
                        "series": _moved(item["series"], namespace, "none", pod, "10.9.9.9", STRANGER_NODE),
                        "values": item["values"],
                    }
                )
    for item in own:
        if f'job="{identity.JOBS["node"]}"' in item["series"]:
            cluster.append(
                {"series": item["series"].replace(f'"{NODE_INSTANCE}"', f'"{STRANGER_NODE}"'), "values": item["values"]}
            )
    last = max(parse_duration(c["eval_time"]) for c in test["alert_rule_test"])
    samples = int(last / parse_duration(test.get("interval", "1m"))) + 2
    for target in (
        'job="kube-scheduler",instance="10.0.0.2:10259"',
        'job="team-exporter",namespace="research",pod="x-0",instance="10.0.7.9:9100"',
    ):
        cluster.append({"series": f"up{{{target}}}", "values": f"0x{samples}"})
    test["input_series"] = cluster

    # Every alert of the chart, at every time the case evaluates: what the case expects, or nothing.
    alerts = sorted({r["alert"] for g in chart_rules() for r in g["rules"] if "alert" in r})
    expected = {(c["eval_time"], c["alertname"]): c["exp_alerts"] for c in test["alert_rule_test"]}
    assert any(expected.values()), "the case must expect an alert, or a scoping that hides everything would pass"
    if neighbours == "the same":  # each release raises its own pod's alerts, and only those
        for alerts_then in expected.values():
            mine = [a for a in alerts_then if a["exp_labels"].get("pod") == POD["pod"]]
            assert mine == alerts_then
            for namespace, release, pod, _, _ in NEIGHBOURS:
                for alert in mine:
                    moved = {"namespace": namespace, "pod": pod, identity.RELEASE_LABEL: f"{namespace}/{release}"}
                    alerts_then.append({**alert, "exp_labels": {**alert["exp_labels"], **moved}})
    times = sorted({c["eval_time"] for c in test["alert_rule_test"]}, key=parse_duration)
    test["alert_rule_test"] = [
        {"eval_time": t, "alertname": a, "exp_alerts": expected.get((t, a), [])} for t in times for a in alerts
    ]
    # Each release's PrometheusRule; promtool wants group names unique across files, and the
    # case's evaluation order (recording before alerting) for every release.
    files, order = [], []
    for namespace, release in [(POD["namespace"], "leakwatch")] + [(n[0], n[1]) for n in NEIGHBOURS]:
        groups = [{**g, "name": f"{namespace}/{release} {g['name']}"} for g in chart_rules(release, namespace)]
        path = tmp_path / f"{namespace}-{release}.yml"
        path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        files.append(str(path))
        order.append([g["name"] for g in groups])
    doc["rule_files"] = files
    doc["tests"] = [test]
    if "group_eval_order" in doc:
        doc["group_eval_order"] = [
            name for group in doc["group_eval_order"] for names in order for name in names if name.endswith(f" {group}")
        ]
    path = tmp_path / "shared-cluster.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]


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

    from leakwatch.backtest.openmetrics import BlockFiles
    from leakwatch.backtest.rule_evaluator import Backtest
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
        labels = (
            f'instance="{ip}:9405",job="leakwatch",namespace="{pod["namespace"]}",pod="{pod["pod"]}",'
            f'{identity.RELEASE_LABEL}="{RELEASE}"'
        )
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
            alert["exp_labels"] = {
                **alert["exp_labels"],
                **POD,
                "instance": "10.0.3.11:9405",
                identity.RELEASE_LABEL: RELEASE,
            }
            notes = alert["exp_annotations"]
            notes["description"] = notes["description"].replace("leakwatch-exporter:9405", "10.0.3.11:9405")
    doc["tests"] = [case]
    doc["rule_files"] = [str(rules_file)]
    path = tmp_path / "kubernetes-host.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
