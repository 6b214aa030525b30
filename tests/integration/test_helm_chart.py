"""The Helm chart (deploy/helm/leakwatch/) rendered by the real Helm engine (helm-python-sdk) for
every values file, linted, and every object validated: core kinds strictly for the oldest and newest
Kubernetes the chart supports (kubernetes-validate), prometheus-operator objects against the
operator's CRD schemas (npm's @kubernetes-models/prometheus-operator). No cluster runs here;
scripts/k8s/check.sh installs the same chart into a real one."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
import yaml

from leakwatch.core import profiles as model_profiles
from leakwatch.core.errors import LeakwatchError
from leakwatch.heal import healer_settings
from leakwatch.helm import engine, identity
from leakwatch.helm.chart_files import CHART_DIR, facts, rule_groups, startup_budget_s
from tests.support.helm_support import CRD_KINDS, validate_crd_objects

# Runs the Helm engine's renders, promtool, Prometheus or node (the CRD schemas).
KUBE_VERSIONS = ("1.25.0", "1.37.0")
VALUES_FILES = engine.values_files()
HEALER_ON = {
    "healer": {"enabled": True, "tokenSecret": {"name": "leakwatch-healer"}},
    "alertmanagerConfig": {"enabled": True, "additionalLabels": {"alertmanagerConfig": "leakwatch"}},
}


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    """Values file name -> objects, with the healer and its AlertmanagerConfig switched on so every
    template renders; plus every profile together and the ServiceMonitor variant."""
    out = {f.name: engine.render(engine.load_values(f, overrides=HEALER_ON)) for f in VALUES_FILES}
    out["all-profiles"] = engine.render(
        engine.load_values(
            *VALUES_FILES,
            overrides={
                "monitoring": {"kind": "ServiceMonitor", "additionalLabels": {"release": "kube-prometheus-stack"}},
                "models": {"demo": {"replicas": 2}},
            },
        )
    )
    return out


def test_a_values_file_per_profile():
    assert sorted(f.name for f in VALUES_FILES) == sorted(f"values-{p}.yaml" for p in model_profiles.available())


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_file", VALUES_FILES, ids=lambda p: p.name)
def test_lint_is_clean(values_file, kube_version):
    assert engine.lint(engine.load_values(values_file, overrides=HEALER_ON), f"v{kube_version}") == []


def test_lint_reports_a_broken_chart(tmp_path):
    broken = tmp_path / "leakwatch"
    import shutil

    shutil.copytree(CHART_DIR, broken)
    (broken / "templates" / "service.yaml").write_text("{{ if }}\n")
    assert engine.lint(engine.load_values(VALUES_FILES[0]), "v1.37.0", chart_dir=broken)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_core_objects_validate_strictly(rendered, kube_version):
    checked = 0
    for name, objects in rendered.items():
        for obj in objects:
            if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
                continue
            try:
                kubernetes_validate.validate(obj, kube_version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(
                    f"{name}: {obj['kind']}/{obj['metadata']['name']} invalid for {kube_version}: {exc.message}"
                )
            checked += 1
    assert checked >= 20


def test_crd_objects_validate_against_the_operator_schemas(rendered):
    crds = [o for objects in rendered.values() for o in objects if (o["apiVersion"], o["kind"]) in CRD_KINDS]
    assert {o["kind"] for o in crds} == {kind for _, kind in CRD_KINDS}
    assert validate_crd_objects(crds) == []


def test_the_crd_validator_rejects_a_bad_rule():
    bad = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "bad"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "for": "ten minutes"}]}]},
    }
    errors = validate_crd_objects([bad])
    assert len(errors) == 1 and "for" in errors[0]


def test_bad_values_get_a_clear_error():
    values = engine.load_values(VALUES_FILES[0], overrides={"monitoring": {"kindd": "PodMonitor"}})
    with pytest.raises(LeakwatchError, match="kindd"):
        engine.render(values)
    with pytest.raises(LeakwatchError, match="tokenSecret"):
        engine.render(engine.load_values(VALUES_FILES[0], overrides={"healer": {"enabled": True}}))
    with pytest.raises(LeakwatchError, match="replicas"):
        engine.render(engine.load_values(VALUES_FILES[0], overrides={"models": {"demo": {"replicas": 0}}}))


@pytest.mark.parametrize(
    "overrides, where",
    [
        # Rendering divided by zero (the start-up probe's failureThreshold is budget / period).
        ({"probes": {"periodSeconds": 0}}, "periodSeconds"),
        # A budget that allows no disruption blocks every eviction: node drains and the healer's.
        ({"podDisruptionBudget": {"maxUnavailable": 0}}, "maxUnavailable"),
        # The CRD would reject it at install time, after the chart rendered.
        ({"monitoring": {"interval": "abc"}}, "interval"),
    ],
    ids=["probe-period-0", "pdb-0", "interval-abc"],
)
def test_the_schema_refuses_values_that_break_the_release(overrides, where):
    """Issue 33: each of these rendered, then failed later or blocked every eviction."""
    with pytest.raises(LeakwatchError, match=where):
        engine.render(engine.load_values(VALUES_FILES[0], overrides=overrides))


def test_a_model_entry_without_enabled_is_refused():
    """Without `enabled` no Deployment rendered, yet NOTES counted the model and printed a port-forward."""
    values = engine.load_values(VALUES_FILES[0])
    del values["models"]["demo"]["enabled"]
    with pytest.raises(LeakwatchError, match="enabled"):
        engine.render(values)


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=lambda p: p.name)
def test_deployment_drains_and_probes_as_the_profile_needs(rendered, values_file):
    profile = model_profiles.load(values_file.stem.removeprefix("values-"))
    stack = facts()
    (deployment,) = [
        d
        for d in by_kind(rendered[values_file.name], "Deployment")
        if d["spec"]["template"]["metadata"]["labels"].get(identity.MODEL_LABEL) == profile.name
    ]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    vllm, exporter = pod["containers"]
    assert exporter["name"] == "exporter"
    args = vllm["args"]
    shutdown = int(args[args.index("--shutdown-timeout") + 1])
    assert shutdown == stack["shutdownTimeoutSeconds"]
    assert args[args.index("--port") + 1] == str(stack["ports"]["vllm"])
    assert args[:-6] == model_profiles.vllm_engine_args(profile, model_profiles.model_path(profile, stack["modelsDir"]))
    pre_stop = int(vllm["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > pre_stop + shutdown
    startup = vllm["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= startup_budget_s(profile)
    assert vllm["readinessProbe"]["httpGet"]["path"] == "/v1/models"
    assert vllm["livenessProbe"]["httpGet"]["path"] == "/health"
    # Issue 33: the monitoring sidecar never takes the serving pod out of its Service.
    assert "readinessProbe" not in exporter and "livenessProbe" not in exporter
    limits = vllm["resources"]["limits"]
    if profile.needs_gpu:
        # DCGM attributes a card's memory to the pod that the device plugin gave it to.
        assert limits["nvidia.com/gpu"] == profile.gpu_count
        # NVML shows the sidecar every card of the node; it reports only those vLLM runs on.
        gpu_devices = exporter["args"][exporter["args"].index("--gpu-devices") + 1]
        assert gpu_devices == "vllm"
        assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in exporter["env"]
        assert args[args.index("--tensor-parallel-size") + 1] == str(profile.vllm["tensor_parallel_size"])
    else:
        assert "nvidia.com/gpu" not in limits
    assert "memory" in limits  # the cgroup bound the host-exhaustion rules forecast against


def test_a_hub_profiles_start_up_budget_covers_the_download(rendered):
    """Issue 33: IQuest's cache defaults to an emptyDir, so every start downloads ~80 GB from the
    Hub; its start-up probe must wait for that (at a conservative rate) on top of loading."""
    from leakwatch.helm.chart_files import DOWNLOAD_GIB_PER_S, WEIGHT_LOAD_GIB_PER_S, checkpoint_gib

    profile = model_profiles.load("iquest-coder-40b-4xa100")
    assert profile.source == "huggingface" and checkpoint_gib(profile) > 70
    (deployment,) = by_kind(rendered["values-iquest-coder-40b-4xa100.yaml"], "Deployment")[:1]
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "hf-cache"]
    assert "emptyDir" in volume  # the default the budget must allow for
    startup = deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    download_s = checkpoint_gib(profile) / DOWNLOAD_GIB_PER_S
    assert (
        startup["periodSeconds"] * startup["failureThreshold"]
        >= download_s + checkpoint_gib(profile) / WEIGHT_LOAD_GIB_PER_S
    )
    # A profile that reads a converted model from its volume downloads nothing.
    janeway = model_profiles.load("janeway-13b-4090d")
    assert janeway.source == "converted"
    assert startup_budget_s(janeway) < checkpoint_gib(janeway) / DOWNLOAD_GIB_PER_S


def test_iquest_gets_four_gpus_and_tensor_parallel_four(rendered):
    (deployment,) = by_kind(rendered["values-iquest-coder-40b-4xa100.yaml"], "Deployment")[:1]
    vllm = deployment["spec"]["template"]["spec"]["containers"][0]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert vllm["args"][vllm["args"].index("--tensor-parallel-size") + 1] == "4"


def test_pdb_only_above_one_replica(rendered):
    assert by_kind(rendered["values-demo.yaml"], "PodDisruptionBudget") == []
    (pdb,) = by_kind(rendered["all-profiles"], "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"][identity.MODEL_LABEL] == "demo"


def test_one_deployment_per_profile_when_combined(rendered):
    names = {
        d["spec"]["template"]["metadata"]["labels"][identity.MODEL_LABEL]
        for d in by_kind(rendered["all-profiles"], "Deployment")
    }
    assert names == set(model_profiles.available())


def test_monitors_carry_the_release_label_and_the_rules_job_names(rendered):
    pod_monitor, healer_monitor = sorted(
        by_kind(rendered["values-demo.yaml"], "PodMonitor"), key=lambda m: m["metadata"]["name"]
    )
    assert healer_monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["replacement"] == identity.JOBS["healer"]
    # Every target the chart scrapes carries this release (the rules select it) and the vLLM and
    # exporter targets the node exporter's instance on their node (the rules find its series by it).
    for endpoint in pod_monitor["spec"]["podMetricsEndpoints"] + healer_monitor["spec"]["podMetricsEndpoints"]:
        release = [r for r in endpoint["relabelings"] if r["targetLabel"] == identity.RELEASE_LABEL]
        assert [r["replacement"] for r in release] == ["leakwatch/leakwatch"]
    for endpoint in pod_monitor["spec"]["podMetricsEndpoints"]:
        node = {
            "sourceLabels": ["__meta_kubernetes_pod_host_ip"],
            "targetLabel": identity.NODE_LABEL,
            "replacement": f"$1:{identity.NODE_EXPORTER_PORT}",
        }
        assert node in endpoint["relabelings"]
    (service_monitor,) = by_kind(rendered["all-profiles"], "ServiceMonitor")
    assert service_monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    jobs = {e["port"]: e["relabelings"][0]["replacement"] for e in pod_monitor["spec"]["podMetricsEndpoints"]}
    assert jobs == {"http": identity.JOBS["vllm"], "exporter": identity.JOBS["leakwatch"]}
    # The rules select exactly these jobs.
    exprs = "\n".join(r["expr"] for g in rule_groups() for r in g["rules"])
    assert f'job="{identity.JOBS["vllm"]}"' in exprs
    assert 'job="vllm"' not in exprs


def _for_release(groups: list[dict], release: str = "leakwatch/leakwatch") -> list[dict]:
    """Generated groups with this release (<namespace>/<release>) where they name it."""
    return yaml.safe_load(yaml.safe_dump(groups).replace(identity.RELEASE_PLACEHOLDER, release))


def test_prometheus_rule_is_the_generated_groups_with_runbooks(rendered):
    (rule,) = by_kind(rendered["values-demo.yaml"], "PrometheusRule")
    assert rule["spec"]["groups"] == _for_release(rule_groups())
    assert identity.RELEASE_PLACEHOLDER not in yaml.safe_dump(rule)
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts
    for alert in alerts:
        assert alert["labels"]["severity"] and alert["annotations"]["summary"] and alert["annotations"]["description"]
        assert alert["annotations"]["runbook_url"].endswith("#" + alert["alert"].lower())
    # Issue 33: kube-prometheus-stack ships these; ours would duplicate them (and our TargetDown
    # would page for every target in the cluster).
    names = {a["alert"] for a in alerts}
    assert not names & set(identity.LEFT_TO_KUBE_PROMETHEUS_STACK), names
    assert {"VLLMDown", "HostMemoryLeak", "HostMemoryRunningOut"} <= names


def test_prometheus_rule_groups_from_values_replace_the_generated_ones():
    groups = [{"name": "mine", "rules": [{"alert": "Mine", "expr": "vector(1)"}]}]
    objects = engine.render(engine.load_values(VALUES_FILES[0], overrides={"prometheusRule": {"groups": groups}}))
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["spec"]["groups"] == groups


def test_dashboards_are_sidecar_configmaps_with_namespace_and_pod_variables(rendered):
    import json

    maps = by_kind(rendered["values-demo.yaml"], "ConfigMap")
    assert len(maps) == 3
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((name, text),) = cm["data"].items()
        board = json.loads(text)
        variables = {v["name"] for v in board["templating"]["list"]}
        assert {"namespace", "pod"} <= variables and "instance" not in variables, name
        assert "$instance" not in text


def test_healer_role_allows_only_reading_pods_and_evicting(rendered):
    objects = rendered["values-demo.yaml"]
    (role,) = by_kind(objects, "Role")
    assert sorted((tuple(r["resources"]), tuple(r["verbs"])) for r in role["rules"]) == [
        (("pods",), ("get", "list")),
        (("pods/eviction",), ("create",)),
    ]
    (healer,) = [d for d in by_kind(objects, "Deployment") if d["metadata"]["name"].endswith("-healer")]
    args = healer["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--restarter") + 1] == "kubernetes"
    assert args[args.index("--model-label") + 1] == identity.MODEL_LABEL
    # Issue 32 N4: this release's vLLM pods only, by the labels its Deployments give them.
    pod_labels = [args[i + 1] for i, arg in enumerate(args) if arg == "--pod-label"]
    (model,) = [d for d in by_kind(objects, "Deployment") if not d["metadata"]["name"].endswith("-healer")]
    template_labels = model["spec"]["template"]["metadata"]["labels"]
    assert pod_labels == ["app.kubernetes.io/instance=leakwatch", "app.kubernetes.io/component=vllm"]
    assert all(template_labels[k] == v for k, v in (p.split("=", 1) for p in pod_labels)), template_labels
    # Issue 32 N7: the state file outlives the healer's pod.
    (claim,) = by_kind(objects, "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in healer["spec"]["template"]["spec"]["volumes"]}
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert args[args.index("--state-file") + 1].startswith("/var/lib/leakwatch-healer/")
    # The allowlist's jobs under the chart's scrape-job names, or every remediable alert is refused.
    jobs = [args[i + 1] for i, arg in enumerate(args) if arg == "--remediable-job"]
    assert sorted(jobs) == sorted(identity.JOBS[job] for job in healer_settings.load().jobs)
    assert identity.JOBS["leakwatch"] in jobs


def test_healer_state_on_an_empty_dir_only_when_persistence_is_off():
    overrides = {"healer": {"enabled": True, "tokenSecret": {"name": "t"}, "persistence": {"enabled": False}}}
    objects = engine.render(engine.load_values(VALUES_FILES[0], overrides=overrides))
    assert not by_kind(objects, "PersistentVolumeClaim")
    (healer,) = [d for d in by_kind(objects, "Deployment") if d["metadata"]["name"].endswith("-healer")]
    volumes = {v["name"]: v for v in healer["spec"]["template"]["spec"]["volumes"]}
    assert volumes["state"] == {"name": "state", "emptyDir": {}}


def test_alertmanager_config_routes_remediable_alerts_to_the_healer(rendered):
    (amc,) = by_kind(rendered["values-demo.yaml"], "AlertmanagerConfig")
    stack = facts()
    route = amc["spec"]["route"]
    assert route["matchers"] == [
        {"name": stack["remediationLabel"]["name"], "value": stack["remediationLabel"]["value"], "matchType": "="},
        {"name": "alertname", "value": "|".join(stack["remediableAlerts"]), "matchType": "=~"},
        {"name": "job", "value": "|".join(stack["remediableJobs"]), "matchType": "=~"},
        {"name": "pod", "value": "(leakwatch-demo)-[a-z0-9]+-[a-z0-9]+", "matchType": "=~"},
    ]
    # Alertmanager anchors the regex: this release's pods match, another release's do not.
    pod = re.compile(route["matchers"][-1]["value"])
    assert pod.fullmatch("leakwatch-demo-5d8c7b9f4-x7k2p")
    assert not pod.fullmatch("other-demo-5d8c7b9f4-x7k2p") and not pod.fullmatch("leakwatch-demo-x-5d8c7b9f4-x7k2p")
    assert route["groupBy"][:2] == identity.HOST_LABELS
    (hook,) = amc["spec"]["receivers"][0]["webhookConfigs"]
    assert re.fullmatch(rf"http://leakwatch-healer\.leakwatch\.svc:{stack['ports']['healer']}/alerts", hook["url"])
    assert hook["httpConfig"]["authorization"]["credentials"]["name"] == "leakwatch-healer"


def test_values_yaml_documents_every_line():
    """values.yaml is read by users: every key has a comment on its line or just above it."""
    lines = (CHART_DIR / "values.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key = line.split(":")[0].strip()
        documented = (
            "#" in line
            or any(lines[j].lstrip().startswith("#") for j in range(max(0, i - 1), i))
            or line.startswith("    ")
        )  # members of a documented block
        assert documented, f"values.yaml line {i + 1} ({key}) has no comment"
    yaml.safe_load("\n".join(lines))


def test_thresholds_in_values_through_the_generator(tmp_path):
    """A user's thresholds file becomes a values file whose groups the chart renders."""
    from leakwatch.core.alert_config import ALERTS_FILE
    from leakwatch.helm import rules as helm_rules

    raw = yaml.safe_load(ALERTS_FILE.read_text())
    raw["host"]["usage_warning_share"] = 0.8
    mine = tmp_path / "alerts.yaml"
    mine.write_text(yaml.safe_dump(raw))
    out = tmp_path / "thresholds-values.yaml"
    assert helm_rules.main(["--config", str(mine), "--output", str(out)]) == 0
    objects = engine.render(engine.load_values(VALUES_FILES[0], out))
    (rule,) = by_kind(objects, "PrometheusRule")
    # The generator's groups name no release; the chart puts this one's in.
    assert rule["spec"]["groups"] == _for_release(rule_groups(mine)) != _for_release(rule_groups())
    assert helm_rules.main(["--config", str(tmp_path / "missing.yaml")]) == 2


def _targets(panels: list[dict]):
    for panel in panels:
        yield from (t["expr"] for t in panel.get("targets", []) if t.get("expr"))
        yield from _targets(panel.get("panels", []))


def _selectors(expr: str) -> list[tuple[str, str]]:
    """(metric, matchers) of every series selector in a query."""
    from leakwatch.core.metric_catalogue import rewrite_selectors

    found: list[tuple[str, str]] = []
    rewrite_selectors(expr, lambda name, body, ranged: found.append((name, body)) or name)
    return found


POD_MATCHERS = ('namespace=~"$namespace"', 'pod=~"$pod"')


def _pod_scoping_problems(expr: str, matchers: tuple[str, ...] = POD_MATCHERS) -> list[str]:
    """Selectors of a dashboard query that are not kept to the selected pods: every series carries
    the matchers, except the node exporter's, which must be joined to the nodes of those pods."""
    problems = []
    pods = ", ".join(matchers)
    node_join = re.escape(
        f' and on (instance) label_replace(up{{job="{identity.JOBS["vllm"]}", {pods}}}, "instance", "$1", '
        f'"{identity.NODE_LABEL}", "(.*)"))'
    )
    for name, body in _selectors(expr):
        if name.startswith("node_"):
            if not re.search(rf"\({re.escape(name)}\{{{re.escape(body)}\}}{node_join}", expr):
                problems.append(f"{name}{{{body}}} is not joined to the selected pods' nodes")
        elif not all(m in body for m in matchers):
            problems.append(f"{name}{{{body}}} lacks {matchers}")
    return problems


def test_the_pod_scoping_check_sees_an_unscoped_query():
    """The check below fails on what issue 33 found: a cluster-wide node figure, a bare exporter series."""
    assert _pod_scoping_problems("sum(node_memory_MemAvailable_bytes)")
    assert _pod_scoping_problems("max(leakwatch_host_memory_growth_per_request_bytes)")
    assert _pod_scoping_problems('DCGM_FI_DEV_FB_USED{namespace=~"$namespace"}')
    assert not _pod_scoping_problems('rate(vllm:x{namespace=~"$namespace", pod=~"$pod"}[5m])')


def test_chart_dashboards_validate_and_every_query_parses(tmp_path):
    """The rewritten dashboards still load under Grafana 11.6's types; every panel query and every
    variable's query (with the variables expanded as Grafana sends them) parses with promtool, and
    every series they select is kept to the selected namespace and pods (a variable to the
    variables before it)."""
    import json
    import subprocess

    from leakwatch.dashboards.queries import expand
    from leakwatch.dashboards.validate import file_problems
    from leakwatch.helm.chart_files import GENERATED_DIR

    rules, problems, variables_seen = [], [], 0
    files = sorted((GENERATED_DIR / "dashboards").glob("*.json"))
    assert len(files) == 3
    for path in files:
        assert file_problems(path) == []
        board = json.loads(path.read_text())
        values = {var["name"]: ".*" for var in board["templating"]["list"]}
        queries = [(expr, POD_MATCHERS) for expr in _targets(board["panels"])]
        for var in board["templating"]["list"]:
            if var.get("type") != "query":
                continue
            match = re.fullmatch(r"label_values\((.*), *(\w+)\)", var["query"], re.S)
            assert match, f"{path.name}: variable {var['name']}: {var['query']}"
            variables_seen += 1
            source, label = match.groups()
            if label not in ("model_name", "namespace"):
                queries.append((source, POD_MATCHERS[:1] if label == "pod" else POD_MATCHERS))
        for expr, matchers in queries:
            problems += [f"{path.name}: {p}" for p in _pod_scoping_problems(expr, matchers)]
            rules.append({"record": f"chart_dashboard_query_{len(rules)}", "expr": expand(expr, values, 86400, 60, 15)})
    assert problems == []
    assert variables_seen >= 8
    rules_path = tmp_path / "chart-dashboards.rules.yml"
    rules_path.write_text(yaml.safe_dump({"groups": [{"name": "chart-dashboards", "rules": rules}]}))
    done = subprocess.run(["promtool", "check", "rules", str(rules_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(rules) > 50
