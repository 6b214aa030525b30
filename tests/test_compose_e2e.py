"""compose.yaml end to end on real containers: `make up STACK=compose MODEL=demo IMAGES=local` on a
private Docker engine, one stack shared by the tests of this module (they run in file order), the
socket proxy attacked from the healer's own network position, one restart through Alertmanager,
the healer and the proxy, then `make down` and a second `make up` that keeps Prometheus's history."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from leakwatch.generate.compose_healer import PROJECT, PROXY_HOST
from leakwatch.paths import REPO_ROOT
from leakwatch.settings import load as load_settings

from .compose_stack import ComposeStack, StackHTTP, stack_env
from .conftest import stack_port_env

pytestmark = [pytest.mark.stack, pytest.mark.compose, pytest.mark.slow]

VLLM = "vllm-demo"
SERVICES = ["prometheus", "alertmanager", "node-exporter", VLLM, "leakwatch-exporter-demo", "healer", PROXY_HOST]
PROXY = f"http://{PROXY_HOST}:{load_settings().service('docker_socket_proxy').default_port}"


@pytest.fixture(scope="module")
def compose_stack(docker_engine):
    ports = stack_port_env()
    stack = ComposeStack(docker_engine, stack_env(docker_engine, ports), StackHTTP(ports))
    stack.make("down", check=False)  # whatever an interrupted earlier run left behind
    began = time.monotonic()
    result = stack.make("up")
    stack.up_output = result.stdout
    print(f"compose e2e: make up took {time.monotonic() - began:.0f}s")
    try:
        yield stack
    finally:
        stack.make("down", check=False)


def test_up_waits_for_every_service_healthy_and_prints_the_url_table(compose_stack):
    out = compose_stack.up_output
    for line in ("vLLM OpenAI API", "Prometheus", "Alertmanager", "node exporter", "memory exporter", "stop"):
        assert line in out, out
    assert compose_stack.http.url("vllm") + "/v1" in out
    assert "Grafana           not started: the local image set has no Grafana" in out
    for service in SERVICES:
        state = compose_stack.inspect(service)["State"]
        assert state["Running"], (service, state)
        if "Health" in state:
            assert state["Health"]["Status"] == "healthy", (service, state["Health"])
    # Grafana has no local image: it is left out, not failing.
    assert f"{PROJECT}-grafana-1" not in compose_stack.project_objects("containers")


def test_status_and_logs(compose_stack):
    status = compose_stack.make("status").stdout
    for service in SERVICES:
        assert compose_stack.container(service) in status, status
    # `make logs` follows; the same command without following:
    result = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "leakwatch"), "stack", "logs", "--no-follow"],
                            cwd=REPO_ROOT, env=compose_stack.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"{VLLM}-1" in result.stdout and "healer-1" in result.stdout, result.stdout[-2000:]


def test_vllm_answers_completions(compose_stack):
    import requests

    resp = requests.post(compose_stack.http.url("vllm") + "/v1/completions", timeout=120,
                         json={"model": "demo", "prompt": "compose says", "max_tokens": 8})
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["text"] is not None


def test_every_prometheus_target_is_up(compose_stack):
    want = {"vllm", "node", "leakwatch_exporter", "healer", "alertmanager", "prometheus"}

    def all_up():
        resp = compose_stack.http.get("prometheus", "/api/v1/targets", state="active")
        targets = resp.json()["data"]["activeTargets"]
        jobs = {t["labels"]["job"]: t["health"] for t in targets if t["labels"]["job"] != "loadgen"}
        assert want <= set(jobs), jobs
        return jobs if all(h == "up" for h in jobs.values()) else None

    jobs = compose_stack.wait_for("every target up", all_up, timeout=240)
    assert set(jobs.values()) == {"up"}


def test_the_exporter_in_vllms_pid_namespace_reports_each_role(compose_stack):
    def roles():
        found = {r["metric"].get("role") for r in
                 compose_stack.http.prom_query("leakwatch_process_resident_memory_bytes")}
        return found if {"api_server", "engine_core"} <= found else None

    found = compose_stack.wait_for("the exporter's per-role memory", roles, timeout=180)
    assert {"api_server", "engine_core"} <= found, found
    # The CPU backend's worker runs inside EngineCore (one process); a worker role shows when vLLM
    # spawns one (tensor parallelism): whatever it reports, every process has a known role.
    assert found <= {"api_server", "engine_core", "worker", "other"}, found


def proxy_call(stack: ComposeStack, method: str, path: str, body: dict | None = None) -> int:
    """HTTP status of a request to the socket proxy, sent from inside the healer's container."""
    code = f"""
import json, urllib.request, urllib.error
req = urllib.request.Request({PROXY + path!r}, method={method!r},
                             data={json.dumps(body).encode() if body is not None else None!r},
                             headers={{"Content-Type": "application/json"}})
try:
    print(urllib.request.urlopen(req, timeout=100).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""
    return int(stack.exec_in("healer", code).strip())


def test_the_socket_proxy_refuses_everything_but_listing_vllm_and_restarting_it(compose_stack):
    from leakwatch.generate.socket_proxy import list_query

    vllm_id = compose_stack.inspect(VLLM)["Id"]
    prom = compose_stack.container("prometheus")
    before = {s: compose_stack.inspect(s)["State"]["StartedAt"] for s in ("prometheus", VLLM)}
    refused = {
        "inspect vLLM": ("GET", f"/containers/{vllm_id}/json"),
        "inspect by name": ("GET", f"/containers/{compose_stack.container(VLLM)}/json"),
        "list everything": ("GET", "/containers/json?all=1"),
        "list with another filter": ("GET", "/containers/json?" + list_query(PROJECT, "io.leakwatch.role=prometheus")),
        "exec create": ("POST", f"/containers/{compose_stack.container(VLLM)}/exec", {"Cmd": ["id"]}),
        "create": ("POST", "/containers/create", {"Image": "leakwatch-local/tools:bookworm"}),
        "kill vLLM": ("POST", f"/containers/{compose_stack.container(VLLM)}/kill"),
        "stop vLLM": ("POST", f"/containers/{compose_stack.container(VLLM)}/stop?t=1"),
        "restart vLLM by ID": ("POST", f"/containers/{vllm_id}/restart?t=1"),
        "restart another container": ("POST", f"/containers/{prom}/restart?t=1"),
        "archive": ("GET", f"/containers/{compose_stack.container(VLLM)}/archive?path=/etc"),
        "export": ("GET", f"/containers/{compose_stack.container(VLLM)}/export"),
        "logs": ("GET", f"/containers/{compose_stack.container(VLLM)}/logs?stdout=1"),
        "images": ("GET", "/images/json"),
        "version": ("GET", "/version"),
        "encoded path": ("POST", f"/containers/{PROJECT}-vllm%2Ddemo-1/restart?t=1"),
    }
    answers = {name: proxy_call(compose_stack, *call) for name, call in refused.items()}
    assert answers == {name: 403 for name in refused}, answers
    # Nothing was restarted by any of them (Docker's own record).
    assert {s: compose_stack.inspect(s)["State"]["StartedAt"] for s in before} == before
    # What the healer needs does pass: the listing finds exactly this project's running vLLM.
    code = f"""
import urllib.request, json
print(json.dumps([c["Names"] for c in json.load(urllib.request.urlopen({PROXY + '/containers/json?' + list_query(PROJECT)!r}))]))
"""
    assert json.loads(compose_stack.exec_in("healer", code)) == [[f"/{compose_stack.container(VLLM)}"]]


def test_a_leftover_vllm_of_another_stack_does_not_confuse_the_healer(compose_stack):
    """A stopped container carrying the vLLM label under another project: the healer's lookup
    (project + running) still finds exactly one."""
    from leakwatch.generate.socket_proxy import list_query

    name = "leftover-vllm-of-another-stack"
    compose_stack.docker("rm", "-f", name, check=False)
    compose_stack.docker("create", "--name", name, "--label", "io.leakwatch.role=vllm",
                         "--label", "com.docker.compose.project=otherstack", "leakwatch-local/tools:bookworm", "true")
    try:
        code = f"""
import urllib.request, json
print(len(json.load(urllib.request.urlopen({PROXY + '/containers/json?' + list_query(PROJECT)!r}))))
"""
        assert compose_stack.exec_in("healer", code).strip() == "1"
    finally:
        compose_stack.docker("rm", "-f", name, check=False)


def restart_events(stack: ComposeStack, since: float) -> list[dict]:
    out = stack.docker("events", "--since", f"{since:.0f}", "--until", f"{time.time():.0f}", "--format", "{{json .}}",
                       "--filter", "type=container", "--filter", "event=restart")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_alertmanager_calls_the_healer_which_restarts_vllm_through_the_proxy_once(compose_stack):
    """A remediation alert posted to Alertmanager's API (the leak alert's labels; the leak itself
    is the drill's job) -> Alertmanager's webhook with the token -> the healer drains and restarts
    vLLM through HAProxy. Proven from Docker: one restart event and a new start time for vLLM only."""
    from leakwatch.heal import config as healer_config

    remediation = healer_config.load()
    before = {s: compose_stack.inspect(s)["State"]["StartedAt"] for s in SERVICES}
    since = time.time() - 1
    alert = {"labels": {"alertname": "HostMemoryLeak", "severity": "critical", "job": "leakwatch_exporter",
                        "instance": "leakwatch-exporter:9405", remediation.label_name: remediation.label_value},
             "annotations": {"summary": "compose e2e: remediation path"}}
    for _ in range(3):  # repeats of the same alert: still one restart
        assert compose_stack.http.post("alertmanager", "/api/v2/alerts", [alert]).status_code == 200

    def restarted():
        return compose_stack.inspect(VLLM)["State"]["StartedAt"] != before[VLLM]

    compose_stack.wait_for("the healer to restart vLLM", restarted, timeout=300)
    compose_stack.wait_for("vLLM healthy again",
                           lambda: compose_stack.inspect(VLLM)["State"].get("Health", {}).get("Status") == "healthy",
                           timeout=600, interval=5)
    time.sleep(20)  # Alertmanager keeps notifying while the alert fires: no second restart may follow
    events = restart_events(compose_stack, since)
    assert [e["Actor"]["Attributes"]["name"] for e in events] == [compose_stack.container(VLLM)], events
    after = {s: compose_stack.inspect(s)["State"]["StartedAt"] for s in SERVICES}
    changed = {s for s in SERVICES if after[s] != before[s]}
    # The exporter lives in vLLM's PID namespace: Docker restarts it with vLLM's new namespace.
    assert changed <= {VLLM, "leakwatch-exporter-demo"} and VLLM in changed, changed
    healer = compose_stack.wait_for("the healer's metrics", lambda: compose_stack.exec_in(
        "healer", "import urllib.request; print(urllib.request.urlopen('http://localhost:9406/metrics').read().decode())"))
    assert 'leakwatch_healer_restarts_total{result="success"} 1.0' in healer, healer[-1500:]


def test_down_removes_containers_and_networks_keeps_volumes_and_up_reuses_them(compose_stack):
    first_sample = compose_stack.http.prom_query('min_over_time(timestamp(up{job="prometheus"})[1h:15s])')
    assert first_sample, "Prometheus has no history yet"
    oldest = float(first_sample[0]["value"][1])
    compose_stack.make("down")
    assert compose_stack.project_objects("containers") == []
    assert compose_stack.project_objects("networks") == []
    volumes = compose_stack.project_objects("volumes")
    assert f"{PROJECT}_prometheus-data" in volumes, volumes
    second_up = time.time()
    compose_stack.make("up")
    assert oldest < second_up - 30

    def history():
        result = compose_stack.http.prom_query('min_over_time(timestamp(up{job="prometheus"})[2h:15s])')
        return result and float(result[0]["value"][1]) <= oldest + 15

    compose_stack.wait_for("Prometheus to serve the history from before `make down`", history, timeout=180)
