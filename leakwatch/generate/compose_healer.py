"""The healer's part of compose.yaml: the healer, the Docker socket proxy it restarts vLLM through,
their private network and the bearer-token secret it shares with Alertmanager.

The healer never sees the Docker socket. The proxy holds it read-only, sits on an internal network
that only the healer joins, and allows listing containers and restarting one, nothing else.
"""

from __future__ import annotations

from ..heal.command import VLLM_CONTAINER_LABEL
from ..settings import StackSettings

SECRET = "healer_token"
SECRET_FILE = "./secrets/healer-token"  # created by `make up` (compose runner), git-ignored
SECRET_PATH = f"/run/secrets/{SECRET}"
PROXY_NETWORK = "docker-api"
PROXY_HOST = "docker-socket-proxy"
STATE_DIR = "/var/lib/leakwatch-healer"

# What the proxy lets through (lscr.io/linuxserver/socket-proxy): container listing and
# restart/stop/kill, which it allows even with POST=0; every other write (create, exec, start of
# another container, images, volumes) is refused. Everything not named here is off by default.
PROXY_ENV = {"CONTAINERS": "1", "ALLOW_RESTARTS": "1", "POST": "0", "EVENTS": "0", "PING": "1", "VERSION": "1"}


def vllm_labels() -> dict:
    key, _, value = VLLM_CONTAINER_LABEL.partition("=")
    return {key: value}


def healer_services(settings: StackSettings, image: dict, http_check) -> dict:
    port = settings.service("healer").default_port
    proxy_port = settings.service("docker_socket_proxy").default_port
    return {
        "healer": {
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
                f"http://{PROXY_HOST}:{proxy_port}",
                "--container-label",
                VLLM_CONTAINER_LABEL,
                "--vllm-url",
                f"http://vllm:{settings.service('vllm').default_port}",
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
            "healthcheck": http_check(f"http://localhost:{port}/healthz", tool="python"),
            "restart": "unless-stopped",
        },
        PROXY_HOST: {
            "image": settings.service("docker_socket_proxy").image,
            "environment": PROXY_ENV,
            "volumes": ["/var/run/docker.sock:/var/run/docker.sock:ro"],
            "networks": [PROXY_NETWORK],
            "expose": [str(proxy_port)],
            "read_only": True,
            "tmpfs": ["/run"],
            "security_opt": ["no-new-privileges:true"],
            "restart": "unless-stopped",
        },
    }


def networks() -> dict:
    # internal: no route out of it; the proxy is reachable from the healer and nothing else.
    return {"default": {}, PROXY_NETWORK: {"internal": True}}


def secrets() -> dict:
    return {SECRET: {"file": SECRET_FILE}}
