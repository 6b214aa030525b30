"""Compose's share of Prometheus's and Alertmanager's basic auth (leakwatch/core/webauth.py): the web config
and the password as compose secrets (./secrets, created by `make up`, git-ignored), the flags, health
checks that log in, and what Prometheus and Grafana send. Kept apart from compose.py so the socket
proxy and the runner's work there stay separate."""

from __future__ import annotations

from ..core import webauth
from ..core.paths import COMPOSE_SECRETS_DIR
from ..core.settings import StackSettings
from ..core.topology import COMPOSE_HOSTS

SECRETS_DIR = f"./{COMPOSE_SECRETS_DIR.name}"
WEB_CONFIG_SECRET = "web_config"
PASSWORD_SECRET = "web_password"
PASSWORD_PATH = f"/run/secrets/{PASSWORD_SECRET}"
WEB_CONFIG_PATH = f"/run/secrets/{WEB_CONFIG_SECRET}"
GRAFANA_PASSWORD_ENV = "GF_LEAKWATCH_WEB_PASSWORD"


def secrets() -> dict:
    return {
        WEB_CONFIG_SECRET: {"file": f"{SECRETS_DIR}/{webauth.WEB_CONFIG_FILE}"},
        PASSWORD_SECRET: {"file": f"{SECRETS_DIR}/{webauth.PASSWORD_FILE}"},
    }


def basic_auth() -> dict:
    """Prometheus's basic_auth block inside its container."""
    return webauth.basic_auth_config(PASSWORD_PATH)


def _login_check(port: int, path: str) -> dict:
    # The password is URL-safe (secrets.token_urlsafe), so it can sit in the URL busybox's wget reads.
    url = f"http://{webauth.USER}:$$(cat {PASSWORD_PATH})@localhost:{port}{path}"
    return {
        "test": ["CMD-SHELL", f'wget -q -O /dev/null "{url}"'],
        "interval": "15s",
        "timeout": "5s",
        "retries": 5,
        "start_period": "30s",
    }


def apply(services: dict, settings: StackSettings) -> None:
    for name in ("prometheus", "alertmanager"):
        service = services[COMPOSE_HOSTS[name]]
        service["command"].append(f"--web.config.file={WEB_CONFIG_PATH}")
        service["secrets"] = [*service.get("secrets", []), WEB_CONFIG_SECRET, PASSWORD_SECRET]
        spec = settings.service(name)
        service["healthcheck"] = _login_check(spec.default_port, spec.ready_path)
    # Grafana's image exports GF_*__FILE variables with the file's content (its run.sh); the provisioned
    # data sources read that variable (provisioning expands environment variables).
    grafana = services[COMPOSE_HOSTS["grafana"]]
    grafana["secrets"] = [*grafana.get("secrets", []), PASSWORD_SECRET]
    grafana.setdefault("environment", {})[f"{GRAFANA_PASSWORD_ENV}__FILE"] = PASSWORD_PATH


def grafana_auth() -> dict:
    """The keys a provisioned Grafana data source needs to log in to Prometheus or Alertmanager."""
    return {
        "basicAuth": True,
        "basicAuthUser": webauth.USER,
        "secureJsonData": {"basicAuthPassword": f"${{{GRAFANA_PASSWORD_ENV}}}"},
    }
