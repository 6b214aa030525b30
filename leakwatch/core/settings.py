"""Reads config/stack.yaml (ports, images, versions, intervals) with environment overrides."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import config_schema
from .config_schema import DICT, STR, Key, Schema, duration
from .durations import parse_duration
from .errors import LeakwatchError
from .paths import CONFIG_DIR

STACK_FILE = CONFIG_DIR / "stack.yaml"


@dataclass(frozen=True)
class Service:
    name: str
    default_port: int
    port_env: str
    image: str | None
    extra: dict
    health_path: str | None = None  # GET <health_path> answers 200 once the service is ready
    shutdown_timeout: float | None = None  # seconds (services.<name>.shutdown_timeout; vLLM's --shutdown-timeout)

    @property
    def port(self) -> int:
        """The port, from the service's environment variable when set."""
        return port_from_env(self.port_env, self.default_port)

    @property
    def ready_path(self) -> str:
        """Its health_path, for code that checks the service (config/stack.yaml must give one)."""
        if not self.health_path:
            raise LeakwatchError(f"{STACK_FILE}: services.{self.name} has no health_path")
        return self.health_path

    @property
    def shutdown_timeout_s(self) -> float:
        """Its shutdown_timeout in seconds, for code that stops the service (config/stack.yaml must give one)."""
        if self.shutdown_timeout is None:
            raise LeakwatchError(f"{STACK_FILE}: services.{self.name} has no shutdown_timeout")
        return self.shutdown_timeout


@dataclass(frozen=True)
class StackSettings:
    vllm_version: str
    default_bind_address: str
    prometheus: dict
    services: dict[str, Service]
    local_images: dict  # the look-alike image set for machines that cannot pull (leakwatch/stack/local_images.py)

    @property
    def bind_address(self) -> str:
        value = os.environ.get("BIND_ADDRESS", "").strip() or self.default_bind_address
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise LeakwatchError(f"BIND_ADDRESS={value!r} is not an IP address (e.g. 127.0.0.1)") from None
        return value

    def service(self, name: str) -> Service:
        return self.services[name]


def ready_path(service: str) -> str:
    """The service's health path in config/stack.yaml (e.g. vLLM's /health)."""
    return load().service(service).ready_path


def port_from_env(env_name: str, default: int) -> int:
    raw = os.environ.get(env_name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise LeakwatchError(f"{env_name}={raw!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise LeakwatchError(f"{env_name}={port} is outside 1-65535")
    return port


def _format(value, variables: dict):
    return value.format(**variables) if isinstance(value, str) else value


ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
# The keys a service may have; the last ones are facts of one service each.
SERVICE_KEYS = (
    "port",
    "port_env",
    "health_path",
    "image",
    "cpu_image",
    "base_image",
    "shutdown_timeout",
    "cluster_port",
    "cluster_port_env",
    "canary_percent",
    "admin_port",
)


def _service(spec) -> str | None:
    """A service: its port and the variable that overrides it, an optional image, and any facts of
    its own (cpu_image, shutdown_timeout, ...)."""
    if not isinstance(spec, dict):
        return "must be a mapping"
    unknown = sorted(set(spec) - set(SERVICE_KEYS))
    if unknown:
        return f"has unknown key {unknown[0]}; valid keys: {', '.join(SERVICE_KEYS)}"
    port = spec.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        return f"needs port: a number in 1-65535 (got {port!r})"
    if not isinstance(spec.get("port_env"), str) or not ENV_NAME.match(spec["port_env"]):
        return f"needs port_env: an environment variable name such as VLLM_PORT (got {spec.get('port_env')!r})"
    if "health_path" in spec and not (isinstance(spec["health_path"], str) and spec["health_path"].startswith("/")):
        return f"health_path must be a path such as /health (got {spec['health_path']!r})"
    if "image" in spec and not isinstance(spec["image"], str):
        return f"image must be a string (got {spec['image']!r})"
    if "shutdown_timeout" in spec and (problem := duration(spec["shutdown_timeout"])):
        return f"shutdown_timeout {problem} (got {spec['shutdown_timeout']!r})"
    return None


def _services(value) -> str | None:
    for name, spec in value.items():
        if problem := _service(spec):
            return f"{name} {problem}"
    return None


SCHEMA: Schema = {
    "vllm_version": Key(STR),
    "bind_address": Key(STR),
    "prometheus": {
        "scrape_interval": Key(STR, check=duration),
        "evaluation_interval": Key(STR, check=duration),
        "retention": Key(STR, check=duration),
    },
    "services": Key(DICT, check=_services),
    "local_images": Key(DICT, required=False),
}


@cache
def load(path: Path = STACK_FILE) -> StackSettings:
    raw = config_schema.load(path, SCHEMA, "the stack settings")
    variables = {"vllm_version": str(raw["vllm_version"])}
    services = {}
    for name, spec in raw["services"].items():
        spec = {key: _format(value, variables) for key, value in spec.items()}
        services[name] = Service(
            name=name,
            default_port=int(spec.pop("port")),
            port_env=spec.pop("port_env"),
            image=spec.pop("image", None),
            health_path=spec.pop("health_path", None),
            shutdown_timeout=parse_duration(spec.pop("shutdown_timeout")) if "shutdown_timeout" in spec else None,
            extra=spec,
        )
    return StackSettings(
        vllm_version=variables["vllm_version"],
        default_bind_address=str(raw["bind_address"]),
        prometheus=dict(raw["prometheus"]),
        services=services,
        local_images=dict(raw.get("local_images") or {}),
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m leakwatch.core.settings vllm-version` prints single facts for shell scripts."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    settings = load()
    if argv == ["vllm-version"]:
        print(settings.vllm_version)
        return 0
    print("usage: python -m leakwatch.core.settings vllm-version", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
