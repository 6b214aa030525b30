"""The healer in compose, as the real Compose v2 binary resolves it: the Docker socket reaches only the
HAProxy socket proxy, the proxy only the healer, and the token only Alertmanager and the healer."""

from __future__ import annotations

import json
import re
import urllib.parse

from leakwatch.core.settings import load as load_settings
from leakwatch.core.topology import vllm_container_list_query
from leakwatch.generate.compose_healer import PROJECT, PROXY_CONFIG_FILE, PROXY_HOST, PROXY_NETWORK, SECRET
from leakwatch.generate.socket_proxy import CONFIG_PATH, exporter_container_names, vllm_container_names
from tests.support.compose_support import resolved

DOCKER_SOCKET = "/var/run/docker.sock"


def mounts(service: dict) -> list[dict]:
    return service.get("volumes", [])


def test_only_the_proxy_touches_the_docker_socket():
    services = resolved("demo")["services"]
    holders = [name for name, svc in services.items() if any(m.get("target") == DOCKER_SOCKET for m in mounts(svc))]
    assert holders == [PROXY_HOST]
    (sock,) = [m for m in mounts(services[PROXY_HOST]) if m.get("target") == DOCKER_SOCKET]
    assert sock["source"] == DOCKER_SOCKET
    # A private engine (the compose tests' dockerd) names its own socket.
    sock = [
        m
        for m in mounts(resolved("demo", env={"DOCKER_SOCKET": "/tmp/x/docker.sock"})["services"][PROXY_HOST])
        if m.get("target") == DOCKER_SOCKET
    ]
    assert sock[0]["source"] == "/tmp/x/docker.sock"


def test_the_proxy_is_haproxy_with_the_generated_rules_and_nothing_else():
    proxy = resolved("demo")["services"][PROXY_HOST]
    assert "environment" not in proxy
    (cfg,) = [m for m in mounts(proxy) if m.get("target") == CONFIG_PATH]
    assert cfg["read_only"] is True and cfg["source"] == str(PROXY_CONFIG_FILE)
    assert "ports" not in proxy
    assert set(proxy["networks"]) == {PROXY_NETWORK}
    assert proxy["image"] == load_settings().service("docker_socket_proxy").image
    assert proxy["image"].startswith("haproxy:") and not proxy["image"].endswith(":latest")
    assert proxy["cap_drop"] == ["ALL"] and proxy["read_only"] is True
    text = PROXY_CONFIG_FILE.read_text()
    allows = [line.strip() for line in text.splitlines() if line.strip().startswith("http-request allow")]
    assert allows == [
        "http-request allow if is_get list_path list_query",
        "http-request allow if is_post restart_path restart_query",
        "http-request allow if is_post start_path !has_query",
    ]
    assert "http-request deny deny_status 403" in text
    assert vllm_container_list_query(PROJECT) in text
    for name in vllm_container_names(PROJECT) + exporter_container_names(PROJECT):
        assert re.escape(name) in text


def test_the_healer_looks_up_this_projects_running_vllm():
    healer = resolved("demo")["services"]["healer"]
    cmd = healer["command"]
    assert cmd[cmd.index("--compose-project") + 1] == PROJECT == resolved("demo")["name"]
    filters = json.loads(urllib.parse.unquote(vllm_container_list_query(PROJECT).removeprefix("filters=")))
    assert filters == {
        "label": [f"com.docker.compose.project={PROJECT}", "io.leakwatch.role=vllm"],
        "status": ["running"],
    }


def test_the_proxy_network_is_internal_and_holds_only_healer_and_proxy():
    doc = resolved("demo")
    assert doc["networks"][PROXY_NETWORK]["internal"] is True
    members = {name for name, svc in doc["services"].items() if PROXY_NETWORK in (svc.get("networks") or {})}
    assert members == {"healer", PROXY_HOST}


def test_the_healer_is_not_published_and_reads_the_token_secret():
    services = resolved("demo")["services"]
    healer = services["healer"]
    assert "ports" not in healer
    assert [s["source"] for s in healer["secrets"]] == [SECRET]
    assert healer["read_only"] is True and healer["cap_drop"] == ["ALL"]
    cmd = healer["command"]
    assert cmd[cmd.index("--restarter") + 1] == "docker"
    assert cmd[cmd.index("--token-file") + 1] == f"/run/secrets/{SECRET}"
    # Alertmanager gets the same secret for its webhook's credentials_file; nobody else does.
    holders = {name for name, svc in services.items() if any(s["source"] == SECRET for s in svc.get("secrets", []))}
    assert holders == {"healer", "alertmanager"}


def test_vllm_drains_on_stop_and_carries_the_label_the_healer_looks_for():
    vllm = resolved("demo")["services"]["vllm-demo"]
    timeout = int(load_settings().service("vllm").shutdown_timeout_s)
    cmd = vllm["command"]
    assert cmd[cmd.index("--shutdown-timeout") + 1] == str(timeout)
    assert vllm["labels"]["io.leakwatch.role"] == "vllm"
    assert vllm["stop_grace_period"] == f"{timeout + 15}s"
