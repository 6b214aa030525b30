"""up / down / status / logs through Docker Compose, for hosts with a Docker engine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from . import profiles as model_profiles
from .errors import LeakwatchError
from .paths import REPO_ROOT
from .settings import load as load_settings

COMPOSE_FILE = REPO_ROOT / "compose.yaml"
ENV_FILE = REPO_ROOT / ".env"


def engine_problem() -> str | None:
    """None when a Docker engine answers; otherwise why not, in a few words."""
    if not shutil.which("docker"):
        return "the docker CLI is not installed"
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        return "`docker info` timed out"
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines()
        return f"`docker info` failed: {reason[-1] if reason else 'no output'}"
    return None


def read_env_file(path=ENV_FILE) -> dict[str, str]:
    values = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip().strip("'\"")
    return values


def _compose(*args: str, model: str | None = None) -> list[str]:
    profile_args = ["--profile", model] if model else ["--profile", "*"]
    return ["docker", "compose", "-f", str(COMPOSE_FILE), "--project-directory", str(REPO_ROOT), *profile_args, *args]


def require_engine() -> None:
    problem = engine_problem()
    if problem:
        raise LeakwatchError(
            f"STACK=compose needs a running Docker engine, but {problem}. Start Docker, or run the same "
            f"stack as native processes with STACK=native"
        )


def require_grafana_password() -> None:
    env = {**read_env_file(), **os.environ}
    if not env.get("GRAFANA_ADMIN_PASSWORD", "").strip():
        raise LeakwatchError(
            "GRAFANA_ADMIN_PASSWORD is not set: compose mode refuses to start Grafana without an admin password "
            "(there is no default). Copy .env.example to .env and set it"
        )


def ensure_healer_token() -> None:
    """The bearer token Alertmanager and the healer share, as a compose secret file. 0644 inside a
    0700 folder: only this user reaches it on the host, and the containers' users can read it."""
    from .generate.compose_healer import SECRET_FILE
    from .heal.token import ensure_file

    ensure_file(REPO_ROOT / SECRET_FILE, mode=0o644)
    # Prometheus's and Alertmanager's basic auth; readable by the containers' users, like the token.
    from . import webauth
    from .generate.compose_webauth import SECRETS_DIR

    webauth.ensure(REPO_ROOT / SECRETS_DIR, mode=0o644)


def up(model: str, out=sys.stdout) -> None:
    profile = model_profiles.load(model)
    require_grafana_password()
    require_engine()
    ensure_healer_token()
    subprocess.run(_compose("up", "-d", "--wait", model=profile.name), check=True)
    settings = load_settings()
    host = settings.bind_address if settings.bind_address not in ("0.0.0.0", "::") else "127.0.0.1"
    print(
        f"\nleakwatch compose stack is up (model profile {profile.name}, served as {profile.served_name!r}):\n"
        f"  vLLM OpenAI API   http://{host}:{settings.service('vllm').port}/v1\n"
        f"  Grafana           http://{host}:{settings.service('grafana').port}  (user admin, password from .env)\n"
        f"  Prometheus        http://{host}:{settings.service('prometheus').port}\n"
        f"  Alertmanager      http://{host}:{settings.service('alertmanager').port}\n"
        f"  stop              make down\n",
        file=out,
    )


def down() -> None:
    require_engine()
    subprocess.run(_compose("down"), check=True)


def status() -> bool:
    require_engine()
    return subprocess.call(_compose("ps")) == 0


def logs(follow: bool = True) -> int:
    require_engine()
    return subprocess.call(_compose("logs", *(["-f"] if follow else []), "--tail", "50"))
