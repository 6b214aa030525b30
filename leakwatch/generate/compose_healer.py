"""The healer's part of compose.yaml: the healer, the Docker socket proxy it restarts vLLM through,
their private network and the bearer-token secret it shares with Alertmanager.

The healer never sees the Docker socket. The proxy (HAProxy, leakwatch/generate/socket_proxy.py)
holds it, sits on an internal network that only the healer joins, and lets through two requests:
listing this project's running vLLM container and restarting that container by name.
"""

from __future__ import annotations

from ..core.paths import COMPOSE_SECRETS_DIR, REPO_ROOT
from ..core.settings import StackSettings
from ..core.topology import COMPOSE_HOSTS, VLLM_CONTAINER_LABEL, compose_url
from . import socket_proxy

SECRET = "healer_token"
SECRET_FILE = f"./{COMPOSE_SECRETS_DIR.name}/healer-token"  # created by `make up` (compose runner), git-ignored
SECRET_PATH = f"/run/secrets/{SECRET}"
PROXY_NETWORK = "docker-api"
PROXY_HOST = COMPOSE_HOSTS["docker_socket_proxy"]
STATE_DIR = "/var/lib/leakwatch-healer"

PROJECT = "leakwatch"  # compose.yaml's `name:`; the proxy's rules and the healer's lookup use it
PROXY_CONFIG_FILE = REPO_ROOT / "docker" / "socket-proxy" / "haproxy.cfg"
# The engine's socket on the host; a private engine (the tests' dockerd) names its own.
DOCKER_SOCKET = "${DOCKER_SOCKET:-/var/run/docker.sock}"


def vllm_labels() -> dict:
    key, _, value = VLLM_CONTAINER_LABEL.partition("=")
    return {key: value}


def healer_services(settings: StackSettings, image: dict, http_check) -> dict:
    port = settings.service("healer").default_port
    proxy_port = settings.service("docker_socket_proxy").default_port
    return {
        COMPOSE_HOSTS["healer"]: {
            **image,
            "entrypoint": ["leakwatch", "heal"],
            "command": [
                "--listen",
                "0.0.0.0",
                "--port",
                str(port),
                "--token-file",
                SECRET_PATH,
                "--restarter",
                "docker",
                "--docker-url",
                compose_url(settings, "docker_socket_proxy"),
                "--container-label",
                VLLM_CONTAINER_LABEL,
                "--compose-project",
                PROJECT,
                "--vllm-url",
                compose_url(settings, "vllm"),
                "--state-file",
                f"{STATE_DIR}/state.json",
            ],
            "secrets": [SECRET],
            "volumes": [f"healer-data:{STATE_DIR}"],
            # Not published: only Alertmanager and Prometheus reach it, on the compose network.
            "networks": ["default", PROXY_NETWORK],
            "read_only": True,
            "cap_drop": ["ALL"],  # it only speaks HTTP
            "security_opt": ["no-new-privileges:true"],
            "depends_on": {PROXY_HOST: {"condition": "service_started"}},
            "healthcheck": http_check(f"http://localhost:{port}{settings.service('healer').ready_path}", tool="python"),
            "restart": "unless-stopped",
        },
        PROXY_HOST: {
            "image": settings.service("docker_socket_proxy").image,
            "volumes": [
                f"./{PROXY_CONFIG_FILE.relative_to(REPO_ROOT)}:{socket_proxy.CONFIG_PATH}:ro",
                # Not `:ro`: a read-only bind of a socket still lets writes through. The proxy's
                # rules are the protection, so nothing but the proxy mounts it.
                f"{DOCKER_SOCKET}:{socket_proxy.SOCKET_IN_CONTAINER}",
            ],
            # The socket belongs to root (group docker, whose ID differs between hosts): HAProxy
            # runs as root without capabilities, in a read-only root filesystem.
            "user": "0:0",
            "networks": [PROXY_NETWORK],
            "expose": [str(proxy_port)],
            "read_only": True,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"],
            "healthcheck": {
                "test": ["CMD", "haproxy", "-c", "-q", "-f", socket_proxy.CONFIG_PATH],
                "interval": "15s",
                "timeout": "5s",
                "retries": 5,
                "start_period": "10s",
            },
            "restart": "unless-stopped",
        },
    }


def networks() -> dict:
    # internal: no route out of it; the proxy is reachable from the healer and nothing else.
    return {"default": {}, PROXY_NETWORK: {"internal": True}}


def secrets() -> dict:
    return {SECRET: {"file": SECRET_FILE}}
