"""The canary in compose (`make up CANARY=1 STACK=compose`), as the committed files write it down:
compose.canary.yaml beside an unchanged compose.yaml, the router's haproxy.cfg, prometheus-canary.yml,
the healer's pin, and the compose runner's files and wait. tests/integration/test_compose_canary.py
resolves the same files with the real Compose binary; tests/soak/test_canary_compose_live.py runs them."""

from __future__ import annotations

import argparse
import io
import re

import pytest
import yaml

from leakwatch.canary.router import Split, default_split
from leakwatch.core import profiles
from leakwatch.core.errors import LeakwatchError
from leakwatch.core.paths import PROMETHEUS_DIR, REPO_ROOT
from leakwatch.core.settings import load as load_settings
from leakwatch.core.topology import (
    COMPOSE_HOSTS,
    DEPLOYMENT_LABEL,
    compose_container,
    exporter_canary_service,
    exporter_service,
    vllm_canary_service,
    vllm_service,
)
from leakwatch.generate import compose_canary
from leakwatch.generate.compose_healer import PROJECT
from leakwatch.generate.socket_proxy import vllm_container_names
from leakwatch.heal import healer_settings
from leakwatch.stack import command as stack_command, compose_runner

CANARY_SERVICES = {vllm_canary_service("demo"), exporter_canary_service("demo"), compose_canary.ROUTER_SERVICE}


def load(path: str) -> dict:
    return yaml.safe_load((REPO_ROOT / path).read_text())


def _option(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, word in enumerate(command) if word == flag]


def test_plain_compose_has_no_canary_and_the_override_adds_only_the_canary_side_and_router():
    plain, canary = load("compose.yaml")["services"], load("compose.canary.yaml")["services"]
    assert not [name for name in plain if "canary" in name]
    assert DEPLOYMENT_LABEL not in (PROMETHEUS_DIR / "prometheus.yml").read_text()
    # The override adds the canary's services and changes only Prometheus's config file and the healer's pin.
    assert set(canary) - set(plain) == CANARY_SERVICES
    assert set(canary) & set(plain) == {"prometheus", "healer"}
    assert {key for name in ("prometheus", "healer") for key in canary[name]} == {"command"}


def test_the_canary_is_the_stable_vllm_of_the_profile_on_its_own_port_alias_and_image_variable():
    stable = load("compose.yaml")["services"][vllm_service("demo")]
    canary = load("compose.canary.yaml")["services"][vllm_canary_service("demo")]
    assert canary["profiles"] == stable["profiles"] == ["demo"]
    cut = stable["command"].index("--port")
    assert canary["command"][:cut] == stable["command"][:cut]  # the same engine and model
    settings = load_settings()
    assert _option(canary["command"], "--port") == [str(settings.service("vllm_canary").default_port)]
    assert canary["image"] == f"${{VLLM_CANARY_IMAGE:-{stable['image']}}}"
    assert canary["networks"]["default"]["aliases"] == [COMPOSE_HOSTS["vllm_canary"]]
    assert canary["depends_on"] == stable["depends_on"]  # the demo model, prepared once
    same = {k: v for k, v in stable.items() if k not in ("image", "command", "ports", "networks", "healthcheck")}
    assert {k: v for k, v in canary.items() if k in same} == {k: v for k, v in same.items() if k != "labels"}


def test_the_canary_exporter_has_the_stable_exporters_shape_beside_the_canary_vllm():
    stable = load("compose.yaml")["services"][exporter_service("demo")]
    canary = load("compose.canary.yaml")["services"][exporter_canary_service("demo")]
    settings = load_settings()
    port = settings.service("leakwatch_exporter_canary").default_port
    assert canary["pid"] == f"service:{vllm_canary_service('demo')}"
    assert _option(canary["command"], "--vllm-url") == [
        f"http://{COMPOSE_HOSTS['vllm_canary']}:{settings.service('vllm_canary').default_port}"
    ]
    assert _option(canary["command"], "--port") == [str(port)]
    # Its own restart count and baseline.
    assert _option(canary["command"], "--state-file") != _option(stable["command"], "--state-file")
    assert canary["networks"]["default"]["aliases"] == [COMPOSE_HOSTS["leakwatch_exporter_canary"]]
    differs = {"command", "pid", "networks", "ports", "healthcheck"}
    assert {k: v for k, v in canary.items() if k not in differs} == {
        k: v for k, v in stable.items() if k not in differs
    }


@pytest.mark.parametrize("service", ["vllm_canary", "leakwatch_exporter_canary", "canary_router"])
def test_ports_come_from_config_and_bind_to_loopback_unless_bind_address_says_otherwise(service):
    settings = load_settings()
    svc = settings.service(service)
    name = {
        "vllm_canary": vllm_canary_service("demo"),
        "leakwatch_exporter_canary": exporter_canary_service("demo"),
        "canary_router": compose_canary.ROUTER_SERVICE,
    }[service]
    published = load("compose.canary.yaml")["services"][name]["ports"]
    assert published == [f"${{BIND_ADDRESS:-127.0.0.1}}:${{{svc.port_env}:-{svc.default_port}}}:{svc.default_port}"]
    assert settings.default_bind_address == "127.0.0.1"


def _router_cfg() -> str:
    return compose_canary.ROUTER_CONFIG_FILE.read_text()


def test_the_routers_weights_are_the_configured_canary_percent():
    percent = load_settings().service("canary_router").extra["canary_percent"]
    weights = dict(re.findall(r"^\s+server (\w+) \S+ weight (\d+) ", _router_cfg(), re.M))
    assert {side: int(w) for side, w in weights.items()} == {"stable": 100 - percent, "canary": percent}
    assert Split(percent) == default_split(load_settings())


def test_the_router_sends_to_each_sides_network_alias_and_listens_on_its_port():
    settings = load_settings()
    servers = dict(re.findall(r"^\s+server (\w+) (\S+) ", _router_cfg(), re.M))
    assert servers == {
        "stable": f"{COMPOSE_HOSTS['vllm']}:{settings.service('vllm').default_port}",
        "canary": f"{COMPOSE_HOSTS['vllm_canary']}:{settings.service('vllm_canary').default_port}",
    }
    assert f"  bind 0.0.0.0:{settings.service('canary_router').default_port}\n" in _router_cfg()
    # Re-resolved while it runs: a restarted vLLM's new address is followed.
    assert all("resolvers" in line for line in _router_cfg().splitlines() if line.strip().startswith("server "))


def test_the_routers_admin_socket_is_in_the_mounted_folder_the_runner_reads():
    router = load("compose.canary.yaml")["services"][compose_canary.ROUTER_SERVICE]
    assert router["image"] == load_settings().service("canary_router").image
    assert router["image"] == load("compose.yaml")["services"]["docker-socket-proxy"]["image"]
    assert compose_canary.ADMIN_DIR_HOST == "${LEAKWATCH_STATE_DIR:-./.stack}/canary-router"
    assert f"{compose_canary.ADMIN_DIR_HOST}:{compose_canary.ADMIN_DIR}" in router["volumes"]
    socket = f"{compose_canary.ADMIN_DIR}/{compose_canary.ADMIN_SOCKET_NAME}"
    assert f"  stats socket {socket} mode 600 level admin\n" in _router_cfg()
    assert compose_runner.router_admin_socket().parent.name == "canary-router"
    assert compose_runner.router_admin_socket().name == compose_canary.ADMIN_SOCKET_NAME


def test_prometheus_canary_config_labels_each_side_and_nothing_else():
    plain = {job["job_name"]: job for job in load("prometheus/prometheus.yml")["scrape_configs"]}
    canary = {job["job_name"]: job for job in load("prometheus/prometheus-canary.yml")["scrape_configs"]}
    assert canary["vllm"]["static_configs"] == [
        {"targets": ["vllm:8000"], "labels": {DEPLOYMENT_LABEL: "stable"}},
        {"targets": ["vllm-canary:8001"], "labels": {DEPLOYMENT_LABEL: "canary"}},
    ]
    assert canary["leakwatch"]["static_configs"] == [
        {"targets": ["leakwatch-exporter:9405"], "labels": {DEPLOYMENT_LABEL: "stable"}},
        {"targets": ["leakwatch-exporter-canary:9407"], "labels": {DEPLOYMENT_LABEL: "canary"}},
    ]
    assert {name: job for name, job in canary.items() if name not in ("vllm", "leakwatch")} == {
        name: job for name, job in plain.items() if name not in ("vllm", "leakwatch")
    }
    # The override points Prometheus at it and changes nothing else on its command line.
    command = load("compose.canary.yaml")["services"]["prometheus"]["command"]
    stable_command = load("compose.yaml")["services"]["prometheus"]["command"]
    assert f"--config.file=/etc/prometheus/{compose_canary.PROMETHEUS_CONFIG}" in command
    assert [a for a in command if not a.startswith("--config.file")] == [
        a for a in stable_command if not a.startswith("--config.file")
    ]


@pytest.mark.parametrize("side", ["stable", "canary"])
def test_the_healer_acts_on_the_stable_sides_alert_only(side):
    command = load("compose.canary.yaml")["services"]["healer"]["command"]
    assert command[:-2] == load("compose.yaml")["services"]["healer"]["command"]
    policy = healer_settings.with_targets(healer_settings.load(), _option(command, "--target"))
    instance = {"stable": "leakwatch-exporter:9405", "canary": "leakwatch-exporter-canary:9407"}[side]
    alert = {"alertname": "HostMemoryLeak", "remediate": "true", "job": "leakwatch", "instance": instance}
    refusal = policy.refusal({**alert, DEPLOYMENT_LABEL: side})
    assert (refusal is None) == (side == "stable"), refusal


def test_the_healer_cannot_find_or_restart_the_canary_container():
    canary = load("compose.canary.yaml")["services"][vllm_canary_service("demo")]
    assert "labels" not in canary  # the healer lists vLLM containers by io.leakwatch.role=vllm
    name = compose_container(PROJECT, vllm_canary_service("demo"))
    assert name not in vllm_container_names(PROJECT)  # the socket proxy's restart rule
    assert f"({re.escape(name)}" not in (REPO_ROOT / "docker" / "socket-proxy" / "haproxy.cfg").read_text()


def test_gpu_profiles_have_no_canary_in_compose_yet():
    gpu = [p for p in map(profiles.load, profiles.available()) if p.needs_gpu]
    assert gpu, "the profiles list lost its GPU profiles; this test needs one"
    services = load("compose.canary.yaml")["services"]
    assert not {vllm_canary_service(p.name) for p in gpu} & set(services)
    assert services[compose_canary.ROUTER_SERVICE]["profiles"] == compose_canary.canary_profiles()


def test_the_local_canary_override_swaps_images_only():
    local = load("compose.canary.local.yaml")["services"]
    assert set(local) == CANARY_SERVICES
    assert all(set(service) == {"image", "pull_policy"} for service in local.values())
    assert local[vllm_canary_service("demo")]["image"].startswith("${VLLM_CANARY_IMAGE:-leakwatch-local/")


# -- the compose runner ------------------------------------------------------------------------------


@pytest.fixture
def runner(monkeypatch, tmp_path):
    """compose_runner.up/down with the engine, Docker Compose and the router faked: the commands it runs."""
    monkeypatch.setenv("LEAKWATCH_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GRAFANA_ADMIN_PASSWORD", "test-only")
    monkeypatch.delenv("IMAGES", raising=False)
    ran: list[list[str]] = []
    waited: list[bool] = []
    monkeypatch.setattr(compose_runner, "compose_command", lambda: ["docker", "compose"])
    monkeypatch.setattr(compose_runner, "engine_problem", lambda env=None: None)
    monkeypatch.setattr(compose_runner, "require_mount_propagation", lambda local, env: None)
    monkeypatch.setattr(compose_runner, "ensure_healer_token", lambda: None)
    monkeypatch.setattr(compose_runner, "_run", lambda cmd, env: ran.append(cmd) or 0)
    monkeypatch.setattr(compose_runner, "_wait_router_sides", lambda: waited.append(True))
    return argparse.Namespace(ran=ran, waited=waited)


def _files(command: list[str]) -> list[str]:
    return [command[i + 1].rsplit("/", 1)[-1] for i, word in enumerate(command) if word == "-f"]


def test_make_up_canary_with_compose_adds_the_override_waits_for_the_router_and_down_stops_it_all(runner):
    args = argparse.Namespace(action="up", model="demo", runner="compose", canary=True, no_follow=False)
    assert stack_command.run(args) == 0
    up = runner.ran[-1]
    assert _files(up) == ["compose.yaml", "compose.canary.yaml"] and up[-3:] == ["up", "-d", "--wait"]
    assert runner.waited == [True]
    assert compose_runner.recorded()["canary"] is True
    out = io.StringIO()
    compose_runner.up("demo", out=out, canary=True)  # again: compose brings what is missing up
    out = out.getvalue()
    assert "canary router     http://127.0.0.1:" in out and str(compose_runner.router_admin_socket()) in out
    compose_runner.down()
    assert _files(runner.ran[-1]) == ["compose.yaml", "compose.canary.yaml"] and runner.ran[-1][-1] == "down"


def test_plain_make_up_with_compose_is_unchanged(runner):
    compose_runner.up("demo")
    assert _files(runner.ran[-1]) == ["compose.yaml"] and runner.waited == []
    assert compose_runner.recorded()["canary"] is False


def test_the_local_image_set_swaps_the_canarys_images_too(runner, monkeypatch):
    monkeypatch.setenv("IMAGES", "local")
    monkeypatch.setattr("leakwatch.stack.local_images.ensure", lambda out=None: None)
    compose_runner.up("demo", canary=True)
    assert _files(runner.ran[-1]) == [
        "compose.yaml",
        "compose.local.yaml",
        "compose.canary.yaml",
        "compose.canary.local.yaml",
    ]


def test_compose_refuses_the_canary_for_a_gpu_profile_and_a_stack_of_the_other_shape(runner):
    gpu = next(p.name for p in map(profiles.load, profiles.available()) if p.needs_gpu)
    with pytest.raises(LeakwatchError, match="profiles without a GPU so far"):
        compose_runner.up(gpu, canary=True)
    compose_runner.up("demo")
    with pytest.raises(LeakwatchError, match="already up without the canary; run `make down` first"):
        compose_runner.up("demo", canary=True)
    assert len(runner.ran) == 1


def test_the_compose_environment_gives_the_router_this_user_and_the_state_folder(runner, tmp_path):
    import os

    env = compose_runner.compose_environment()
    assert env[compose_canary.ROUTER_USER_ENV] == f"{os.getuid()}:{os.getgid()}"
    assert env["LEAKWATCH_STATE_DIR"] == str(tmp_path)
