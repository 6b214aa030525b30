"""The canary rollout in the Helm chart (values canary): rendered by the real Helm engine
(helm-python-sdk) with the canary off and on, validated as the other chart objects are (Helm's strict
lint, kubernetes-validate for core kinds, the prometheus-operator CRD schemas), and the router's
haproxy.cfg run by real HAProxy (Debian's) over two stand-in sides, its split changed over the admin
address the docs tell users to port-forward."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import kubernetes_validate
import pytest
import requests

from leakwatch.canary.router import SERVED_BY_HEADER, SIDES, RouterAdmin, Split, haproxy_config
from leakwatch.core.errors import LeakwatchError
from leakwatch.core.ports import free_port
from leakwatch.core.settings import load as load_settings, ready_path
from leakwatch.core.topology import DEPLOYMENT_LABEL
from leakwatch.helm import engine, identity
from leakwatch.helm.chart_files import CHART_DIR, ROUTER_LISTEN, facts
from tests.support.helm_support import CRD_KINDS, validate_crd_objects

KUBE_VERSIONS = ("1.25.0", "1.37.0")
DEMO = CHART_DIR / "values-demo.yaml"
RELEASE, NAMESPACE = "rel", "serving"
CANARY_ON = {"canary": {"enabled": True}}
HEALER_ON = {
    "healer": {"enabled": True, "tokenSecret": {"name": "leakwatch-healer"}},
    "alertmanagerConfig": {"enabled": True},
}


def render(*files: Path, **overrides) -> list[dict]:
    values = engine.load_values(*(files or (DEMO,)), overrides=engine.merge(HEALER_ON, overrides))
    return engine.render(values, release=RELEASE, namespace=NAMESPACE)


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict], kind: str, name: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def pod_labels(deployment: dict) -> dict[str, str]:
    return deployment["spec"]["template"]["metadata"]["labels"]


def router_config(objects: list[dict], model: str = "demo") -> str:
    return named(objects, "ConfigMap", f"{RELEASE}-{model}-router")["data"]["haproxy.cfg"]


def weights(config: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^  server (\w+) \S+ weight (\d+) ", config, re.M)}


def matches(selector: dict, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions with In) against labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def relabel(rules: list[dict], labels: dict[str, str]) -> dict[str, str]:
    """Prometheus's `replace` relabeling (the only action the chart's monitors use)."""
    labels = dict(labels)
    for rule in rules:
        assert rule.get("action", "replace") == "replace", rule
        value = ";".join(labels.get(name, "") for name in rule.get("sourceLabels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if match:
            result = match.expand(re.sub(r"\$(\d+)", r"\\g<\1>", rule.get("replacement", "$1")))
            if result:
                labels[rule["targetLabel"]] = result
            else:
                labels.pop(rule["targetLabel"], None)
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def discovered(pod: dict[str, str]) -> dict[str, str]:
    """The service-discovery labels of a pod with these labels (the parts the monitors read)."""
    return {identity.pod_label_meta(k): v for k, v in pod.items()} | {"__meta_kubernetes_pod_host_ip": "10.0.0.7"}


@pytest.fixture(scope="module")
def off() -> list[dict]:
    return render()


@pytest.fixture(scope="module")
def on() -> list[dict]:
    return render(**CANARY_ON)


# -- off: what the chart rendered before; on: the stable side untouched --------------------------


@pytest.mark.parametrize("values_file", engine.values_files(), ids=lambda p: p.name)
def test_off_renders_no_trace_of_the_canary(values_file):
    objects = render(values_file)
    text = repr(objects)
    assert identity.SIDE_LABEL not in text and identity.pod_label_meta(identity.SIDE_LABEL) not in text
    assert not [o for o in objects if o["metadata"]["name"].endswith(("-canary", "-router"))]
    monitor = named(objects, "PodMonitor", RELEASE)
    vllm_pods = {"app.kubernetes.io/name": "leakwatch", "app.kubernetes.io/instance": RELEASE}
    assert monitor["spec"]["selector"] == {"matchLabels": vllm_pods | {"app.kubernetes.io/component": "vllm"}}
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        assert DEPLOYMENT_LABEL not in [r["targetLabel"] for r in endpoint["relabelings"]]


def test_on_leaves_every_stable_object_the_rules_and_the_dashboards_as_they_were(off, on):
    """Turning the canary on restarts no stable pod and changes no rule or dashboard: they are
    scoped to the release, which the canary's targets carry like the stable ones (below)."""
    kept = {(o["kind"], o["metadata"]["name"]): o for o in on}
    changed = [key for o in off if (key := (o["kind"], o["metadata"]["name"])) in kept and kept[key] != o]
    assert changed == [("PodMonitor", RELEASE)]
    assert all((o["kind"], o["metadata"]["name"]) in kept for o in off)
    added = sorted((o["kind"], o["metadata"]["name"]) for o in on if o not in off and o["kind"] != "PodMonitor")
    assert added == [
        ("ConfigMap", f"{RELEASE}-demo-router"),
        ("Deployment", f"{RELEASE}-demo-canary"),
        ("Deployment", f"{RELEASE}-demo-router"),
        ("Service", f"{RELEASE}-demo-canary"),
        ("Service", f"{RELEASE}-demo-router"),
    ]


# -- validation ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def on_everywhere() -> dict[str, list[dict]]:
    out = {f.name: render(f, **CANARY_ON) for f in engine.values_files()}
    out["all-profiles-servicemonitor"] = render(
        *engine.values_files(),
        canary={"enabled": True, "replicas": 2, "percent": 0, "image": {"tag": "v9"}},
        monitoring={"kind": "ServiceMonitor"},
    )
    return out


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_lint_is_clean_with_the_canary(kube_version):
    for values_file in engine.values_files():
        values = engine.load_values(values_file, overrides=engine.merge(HEALER_ON, CANARY_ON))
        assert engine.lint(values, f"v{kube_version}") == [], values_file.name


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_canary_objects_validate_strictly(on_everywhere, kube_version):
    checked = 0
    for name, objects in on_everywhere.items():
        for obj in objects:
            if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
                continue
            try:
                kubernetes_validate.validate(obj, kube_version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']} invalid: {exc.message}")
            checked += 1
    assert checked >= 30
    crds = [o for objects in on_everywhere.values() for o in objects if (o["apiVersion"], o["kind"]) in CRD_KINDS]
    assert {o["kind"] for o in crds} >= {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    assert validate_crd_objects(crds) == []


@pytest.mark.parametrize("percent", [101, -1, "ten"])
def test_the_schema_refuses_a_percent_outside_0_to_100(percent):
    with pytest.raises(LeakwatchError, match="percent"):
        render(canary={"enabled": True, "percent": percent})


# -- the router --------------------------------------------------------------------------------------


@pytest.mark.parametrize("percent", [None, 0, 25, 100])
def test_the_router_config_is_the_native_runners_with_the_services_and_canary_percent(percent):
    """`leakwatch canary-router config`'s haproxy.cfg with each side's Service DNS name, and the
    weights canary.percent says (null: config/stack.yaml's; 0 is a split, not "unset")."""
    objects = render(canary={"enabled": True, "percent": percent})
    settings = load_settings()
    expected = Split(settings.service("canary_router").extra["canary_percent"] if percent is None else percent)
    config = router_config(objects)
    assert weights(config) == expected.weights
    services = {
        side: named(objects, "Service", f"{RELEASE}-demo{'' if side == 'stable' else '-canary'}") for side in SIDES
    }
    port = settings.service("vllm").default_port
    assert all(s["spec"]["ports"][0]["port"] == port for s in services.values())
    sides = {side: f"http://{s['metadata']['name']}.{NAMESPACE}.svc:{port}" for side, s in services.items()}
    native = haproxy_config(
        ROUTER_LISTEN,
        settings.service("canary_router").default_port,
        sides,
        expected,
        Path(facts()["canary"]["adminAddress"]),
    )
    assert [line for line in config.splitlines() if not line.startswith("#")] == native.splitlines()


def test_a_changed_split_rolls_the_router_out():
    """HAProxy reads its config once: the pod template carries the config's checksum."""

    def checksum(objects):
        router = named(objects, "Deployment", f"{RELEASE}-demo-router")
        return router["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum(render(canary={"enabled": True, "percent": 10})) != checksum(
        render(canary={"enabled": True, "percent": 20})
    )


def test_the_routers_service_selects_its_pods_and_the_sides_selectors_never_cross(on):
    pods = {d["metadata"]["name"]: pod_labels(d) for d in by_kind(on, "Deployment")}
    stable, canary, router = (pods[f"{RELEASE}-demo{suffix}"] for suffix in ("", "-canary", "-router"))
    for name, want in (
        (f"{RELEASE}-demo", stable),
        (f"{RELEASE}-demo-canary", canary),
        (f"{RELEASE}-demo-router", router),
    ):
        service = named(on, "Service", name)
        deployment = named(on, "Deployment", name)
        for labels in (stable, canary, router):
            selected = labels is want
            assert matches({"matchLabels": service["spec"]["selector"]}, labels) is selected, (name, labels)
            assert matches(deployment["spec"]["selector"], labels) is selected, (name, labels)
    router_service = named(on, "Service", f"{RELEASE}-demo-router")
    assert router_service["spec"]["ports"][0]["port"] == facts()["canary"]["routerPort"]
    assert router_service["spec"]["ports"][0]["targetPort"] == "http"


def test_the_router_runs_as_the_other_workloads_do(on):
    """Non-root, read-only, bounded memory (as the healer); drains before it stops."""
    (healer,) = [d for d in by_kind(on, "Deployment") if d["metadata"]["name"].endswith("-healer")]
    healer_security = healer["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    router = named(on, "Deployment", f"{RELEASE}-demo-router")
    pod = router["spec"]["template"]["spec"]
    (haproxy,) = pod["containers"]
    assert haproxy["securityContext"].items() >= healer_security.items()
    assert haproxy["resources"]["limits"]["memory"] and haproxy["resources"]["requests"]["cpu"]
    assert haproxy["image"] == load_settings().service("canary_router").image
    assert haproxy["image"] == load_settings().service("docker_socket_proxy").image  # one HAProxy image
    mount = haproxy["volumeMounts"][0]["mountPath"]
    assert haproxy["args"] == ["haproxy", "-f", f"{mount}/haproxy.cfg"]
    assert haproxy["readinessProbe"]["httpGet"]["path"] == ready_path("canary_router")
    pre_stop = int(haproxy["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > pre_stop + facts()["canary"]["streamTimeoutSeconds"]
    assert router["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


# -- the canary side ---------------------------------------------------------------------------------


def test_the_canary_is_the_stable_sides_shape_with_its_own_image_args_and_env():
    objects = render(
        canary={
            "enabled": True,
            "replicas": 2,
            "image": {"tag": "v0.99.0"},
            "extraArgs": ["--max-num-seqs", "64"],
            "env": {"VLLM_CPU_KVCACHE_SPACE": "2", "NEW": "x"},
        }
    )
    stable, canary = (named(objects, "Deployment", f"{RELEASE}-demo{s}") for s in ("", "-canary"))
    s_pod, c_pod = (d["spec"]["template"]["spec"] for d in (stable, canary))
    assert [c["name"] for c in c_pod["containers"]] == [c["name"] for c in s_pod["containers"]] == ["vllm", "exporter"]
    assert c_pod["containers"][1] == s_pod["containers"][1]  # the same exporter sidecar
    s_vllm, c_vllm = s_pod["containers"][0], c_pod["containers"][0]
    for key in ("resources", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle", "ports", "volumeMounts"):
        assert c_vllm[key] == s_vllm[key], key
    for key in ("shareProcessNamespace", "terminationGracePeriodSeconds", "volumes"):
        assert c_pod[key] == s_pod[key], key
    assert c_vllm["image"] == s_vllm["image"].rpartition(":")[0] + ":v0.99.0"
    profile_args = s_vllm["args"][:-6]
    assert c_vllm["args"] == profile_args + ["--max-num-seqs", "64"] + s_vllm["args"][-6:]
    s_env, c_env = ({e["name"]: e["value"] for e in c["env"]} for c in (s_vllm, c_vllm))
    assert c_env == s_env | {"VLLM_CPU_KVCACHE_SPACE": "2", "NEW": "x"}
    assert canary["spec"]["replicas"] == 2
    (pdb,) = by_kind(objects, "PodDisruptionBudget")  # the canary's two pods; the stable one has one
    assert matches(pdb["spec"]["selector"], pod_labels(canary)) and not matches(
        pdb["spec"]["selector"], pod_labels(stable)
    )


@pytest.mark.parametrize("kind", ["PodMonitor", "ServiceMonitor"])
def test_both_sides_are_scraped_with_their_deployment_label_and_this_release(kind):
    objects = render(canary={"enabled": True}, monitoring={"kind": kind})
    monitor = next(m for m in by_kind(objects, kind) if not m["metadata"]["name"].endswith("-healer"))
    deployments = {d["metadata"]["name"]: d for d in by_kind(objects, "Deployment")}
    sides = {"stable": f"{RELEASE}-demo", "canary": f"{RELEASE}-demo-canary"}
    # What the monitor selects: the pods themselves, or the Services in front of them.
    targets = {n: pod_labels(d) for n, d in deployments.items()}
    selectable = (
        targets
        if kind == "PodMonitor"
        else {s["metadata"]["name"]: s["metadata"]["labels"] for s in by_kind(objects, "Service")}
    )
    selected = {n for n, labels in selectable.items() if matches(monitor["spec"]["selector"], labels)}
    assert selected == set(sides.values())  # not the router, not the healer
    endpoints = monitor["spec"]["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"]
    assert [e["port"] for e in endpoints] == ["http", "exporter"]
    for endpoint in endpoints:
        for side, name in sides.items():
            series = relabel(endpoint["relabelings"], discovered(targets[name]))
            assert series[DEPLOYMENT_LABEL] == side, (endpoint["port"], name)
            assert series[identity.RELEASE_LABEL] == f"{NAMESPACE}/{RELEASE}"
            assert series["job"] in (identity.JOBS["vllm"], identity.JOBS["leakwatch"])


def test_the_healer_never_acts_on_the_canary(on):
    """As natively: the canary is judged (its alerts fire, labelled), not healed."""
    (healer,) = [d for d in by_kind(on, "Deployment") if d["metadata"]["name"].endswith("-healer")]
    args = healer["spec"]["template"]["spec"]["containers"][0]["args"]
    required = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--pod-label")
    labels = {
        side: pod_labels(named(on, "Deployment", f"{RELEASE}-demo{s}"))
        for side, s in (("stable", ""), ("canary", "-canary"))
    }
    assert all(labels["stable"].get(k) == v for k, v in required.items())
    assert not all(labels["canary"].get(k) == v for k, v in required.items())
    (amc,) = by_kind(on, "AlertmanagerConfig")
    pod = re.compile(amc["spec"]["route"]["matchers"][-1]["value"])
    assert pod.fullmatch(f"{RELEASE}-demo-5d8c7b9f4-x7k2p")
    assert not pod.fullmatch(f"{RELEASE}-demo-canary-5d8c7b9f4-x7k2p")


def test_notes_name_the_router_only_with_the_canary():
    import helm_python as helm

    def notes(values):
        with helm.Chart.load(str(CHART_DIR)) as chart:
            out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        return next(v for k, v in out.items() if k.endswith("NOTES.txt"))

    assert "router" not in notes(engine.load_values(DEMO))
    assert f"svc/{RELEASE}-demo-router {facts()['canary']['routerPort']}" in notes(
        engine.load_values(DEMO, overrides=CANARY_ON)
    )


# -- the rendered router run by real HAProxy ----------------------------------------------------------


class Side(BaseHTTPRequestHandler):
    """A stand-in vLLM: /health answers 200; every other request is counted and answered."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path != "/health":
            self.server.served += 1  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_POST = do_GET

    def log_message(self, *args):
        pass


def _wait(predicate, timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return
        except LeakwatchError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(message)
        time.sleep(0.2)


def test_real_haproxy_runs_the_rendered_config_and_its_split_changes_over_the_admin_address(on, tmp_path):
    """The ConfigMap's haproxy.cfg as the pod runs it, with the Services' DNS names and the pod's
    ports pointed at stand-ins here: HAProxy accepts it, splits 90/10, and `canary-router set`
    through the admin address (what `kubectl port-forward` reaches) changes the split to 50/50."""
    config = router_config(on)
    stack = facts()
    servers = {}
    for side in SIDES:
        servers[side] = ThreadingHTTPServer(("127.0.0.1", 0), Side)
        servers[side].served = 0  # type: ignore[attr-defined]
        threading.Thread(target=servers[side].serve_forever, daemon=True).start()
        service = f"{RELEASE}-demo{'' if side == 'stable' else '-canary'}.{NAMESPACE}.svc:{stack['ports']['vllm']}"
        assert service in config
        config = config.replace(service, f"127.0.0.1:{servers[side].server_port}")
    port, admin_port = free_port(), free_port()
    config = config.replace(f"bind {ROUTER_LISTEN}:{stack['canary']['routerPort']}", f"bind 127.0.0.1:{port}")
    admin_address = stack["canary"]["adminAddress"]
    assert admin_address in config
    config = config.replace(admin_address, f"ipv4@127.0.0.1:{admin_port}")
    path = tmp_path / "haproxy.cfg"
    path.write_text(config)
    check = subprocess.run(["haproxy", "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    log = tmp_path / "haproxy.log"
    haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(path)], stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        admin = RouterAdmin(f"ipv4@127.0.0.1:{admin_port}")
        _wait(lambda: admin.sides_up() == dict.fromkeys(SIDES, True), 30, f"sides not up: {log.read_text()}")
        assert admin.split() == {"stable": 90, "canary": 10}
        url = f"http://127.0.0.1:{port}/v1/models"
        with requests.Session() as session:  # one kept-alive connection: the split is per request
            seen = Counter(session.get(url, timeout=10).headers[SERVED_BY_HEADER] for _ in range(100))
            assert seen == {"stable": 90, "canary": 10}
            admin.set_split(Split(50))
            assert admin.split() == {"stable": 50, "canary": 50}
            seen = Counter(session.get(url, timeout=10).headers[SERVED_BY_HEADER] for _ in range(100))
            assert seen == {"stable": 50, "canary": 50}
        assert {s: servers[s].served for s in SIDES} == {"stable": 140, "canary": 60}  # type: ignore[attr-defined]
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=30)
        for server in servers.values():
            server.shutdown()
