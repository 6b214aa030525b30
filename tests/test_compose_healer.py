"""The healer in compose, as the real Compose v2 binary resolves it: the Docker socket reaches only the
restart-only proxy, the proxy only the healer, and the token only Alertmanager and the healer."""

from __future__ import annotations

import pytest

from leakwatch.generate.compose_healer import PROXY_HOST, PROXY_NETWORK, SECRET
from leakwatch.settings import load as load_settings

from .compose_support import resolved

pytestmark = pytest.mark.integration  # starts other programs (see the markers in pyproject.toml)

DOCKER_SOCKET = "/var/run/docker.sock"


def mounts(service: dict) -> list[dict]:
    return service.get("volumes", [])


def test_only_the_proxy_touches_the_docker_socket_and_only_read_only():
    services = resolved("demo")["services"]
    holders = [name for name, svc in services.items() if any(m.get("source") == DOCKER_SOCKET for m in mounts(svc))]
    assert holders == [PROXY_HOST]
    (sock,) = [m for m in mounts(services[PROXY_HOST]) if m.get("source") == DOCKER_SOCKET]
    assert sock["read_only"] is True


def test_the_proxy_allows_listing_and_restarting_containers_only():
    proxy = resolved("demo")["services"][PROXY_HOST]
    env = proxy["environment"]
    assert env["CONTAINERS"] == "1" and env["ALLOW_RESTARTS"] == "1" and env["POST"] == "0"
    granted = {k for k, v in env.items() if v == "1"}
    assert granted <= {"CONTAINERS", "ALLOW_RESTARTS", "PING", "VERSION"}, granted
    assert "ports" not in proxy
    assert set(proxy["networks"]) == {PROXY_NETWORK}
    assert proxy["image"] == load_settings().service("docker_socket_proxy").image
    assert ":" in proxy["image"] and not proxy["image"].endswith(":latest")


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
    timeout = int(load_settings().service("vllm").extra["shutdown_timeout_s"])
    cmd = vllm["command"]
    assert cmd[cmd.index("--shutdown-timeout") + 1] == str(timeout)
    assert vllm["labels"]["io.leakwatch.role"] == "vllm"
    assert vllm["stop_grace_period"] == f"{timeout + 15}s"
