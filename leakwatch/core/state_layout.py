"""The files under a state directory: one native stack's, and what the compose runner and the local
image build keep there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .paths import state_dir

# compose.canary.yaml mounts this folder of the state directory into the canary router's container
# (leakwatch/generate/compose_canary.py), where HAProxy makes its admin socket.
COMPOSE_ROUTER_DIR = "canary-router"
ROUTER_ADMIN_SOCKET = "admin.sock"


@dataclass(frozen=True)
class StateLayout:
    root: Path

    @classmethod
    def current(cls) -> StateLayout:
        return cls(state_dir())

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def alertmanager_data(self) -> Path:
        """Alertmanager's --storage.path: its silences and notification log."""
        return self.data / "alertmanager"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def targets(self) -> Path:
        """file_sd target files of services that come and go (a running load test's exporter)."""
        return self.conf / "targets"

    @property
    def secrets(self) -> Path:
        """Private files (0700): the healer's bearer token, shared with Alertmanager."""
        return self.root / "secrets"

    @property
    def healer_token(self) -> Path:
        return self.secrets / "healer-token"

    @property
    def router_config(self) -> Path:
        """The canary router's haproxy.cfg (`make up CANARY=1`)."""
        return self.conf / "haproxy.cfg"

    @property
    def router_socket(self) -> Path:
        """HAProxy's admin socket: `leakwatch canary-router set|show --admin-socket <this>`."""
        return self.root / "router.sock"

    @property
    def supervisord_conf(self) -> Path:
        return self.conf / "supervisord.conf"

    @property
    def supervisor_socket(self) -> Path:
        return self.root / "supervisor.sock"

    @property
    def supervisord_pid(self) -> Path:
        return self.root / "supervisord.pid"

    @property
    def stack_info(self) -> Path:
        """What `up` started (model, ports), read by status/down and by other tools."""
        return self.root / "stack.json"

    @property
    def compose_record(self) -> Path:
        """What the last compose `up` used (image set, profile, engine), read by down/status/logs."""
        return self.root / "compose-stack.json"

    @property
    def compose_router_socket(self) -> Path:
        """The compose canary router's admin socket on the host."""
        return self.root / COMPOSE_ROUTER_DIR / ROUTER_ADMIN_SOCKET

    @property
    def docker(self) -> Path:
        """Docker's work files: the local image build's (leakwatch/stack/local_images.py: base image
        root, build contexts, image-build.log); in the default state folder also the tests' private
        engine (tests/support/docker_engine.py: socket, pidfile, exec root)."""
        return self.root / "docker"

    def log(self, program: str) -> Path:
        return self.logs / f"{program}.log"

    def make_dirs(self) -> None:
        for path in (self.conf, self.data, self.logs, self.models):
            path.mkdir(parents=True, exist_ok=True)
