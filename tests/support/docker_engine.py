"""A private Docker engine for the compose tests: Debian's dockerd with its own exec root, unix socket
and pidfile under .stack/docker/, started when no engine answers and stopped by its PID.

dockerd runs in its own mount namespace (shared propagation, as on a systemd host). The data root is
the image cache, kept per user outside the checkout (DATA_ROOT) so that a fresh clone on the same
machine (CI's) reuses the images an earlier run built: the local image set is rebuilt only when its
inputs change. The daemon creates no docker0: `--bridge none` leaves a user's own Docker alone,
and compose's networks come from a private address pool. Builds use the host network.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from leakwatch.core.paths import DEFAULT_STATE_DIR
from leakwatch.core.state_layout import StateLayout

# The checkout's own (default) state folder, whatever LEAKWATCH_STATE_DIR says: a run that was
# killed leaves its engine there for the next run to find.
STATE = StateLayout(DEFAULT_STATE_DIR).docker
DATA_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leakwatch" / "docker-data"
# A /16 rarely used by home routers, VPNs or Docker's own default pools (172.17-31, 192.168).
ADDRESS_POOL = "base=10.213.0.0/16,size=24"
APT_PACKAGES = ("docker.io", "debootstrap", "iptables")


class EngineUnavailable(RuntimeError):
    """Why the compose tests cannot have an engine on this machine (shown as the skip reason)."""


@dataclass
class Engine:
    host: str  # DOCKER_HOST value
    config_dir: Path  # DOCKER_CONFIG: holds the compose CLI plugin
    pid: int | None  # our dockerd, None when an existing engine answered

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host, "DOCKER_CONFIG": str(self.config_dir)}


def _answers(host: str, config_dir: Path) -> str | None:
    """None when `docker info` answers on host; else the reason."""
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, "DOCKER_HOST": host, "DOCKER_CONFIG": str(config_dir)},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if result.returncode == 0 else (result.stderr.strip() or result.stdout.strip())


def compose_plugin_dir(compose_binary: str) -> Path:
    """A private DOCKER_CONFIG whose cli-plugins/ holds Docker Compose v2 (Debian's docker.io has
    none): `docker compose` then works for the tests and for `make up` run by them."""
    config = STATE / "config"
    plugins = config / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    link = plugins / "docker-compose"
    if not link.exists() or link.resolve() != Path(compose_binary).resolve():
        link.unlink(missing_ok=True)
        link.symlink_to(compose_binary)
    return config


def install_packages() -> None:
    """Debian's docker.io (dockerd, the CLI) and debootstrap (the local base image), as root."""
    missing = [
        p
        for p in APT_PACKAGES
        if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout
        != "install ok installed"
    ]
    if not missing:
        return
    if os.geteuid() != 0:
        raise EngineUnavailable(f"no Docker engine answers and installing {', '.join(missing)} needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for _attempt in range(10):  # another apt run may hold the lock for a while
        update = subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env)
        result = subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
            capture_output=True,
            text=True,
            env=env,
        )
        if result.returncode == 0:
            return
        if "lock" not in (result.stderr + update.stderr):
            break
        time.sleep(15)
    raise EngineUnavailable(f"apt-get install {' '.join(missing)} failed: {result.stderr.strip()[-300:]}")


def start(compose_binary: str, timeout_s: float = 120) -> Engine:
    """An engine for the tests: DOCKER_HOST's when it answers, else our own dockerd."""
    config = compose_plugin_dir(compose_binary)
    if os.environ.get("DOCKER_HOST") and _answers(os.environ["DOCKER_HOST"], config) is None:
        return Engine(os.environ["DOCKER_HOST"], config, None)
    socket = STATE / "docker.sock"
    host = f"unix://{socket}"
    if socket.exists() and _answers(host, config) is None:  # left by an earlier run that was killed
        pidfile = STATE / "docker.pid"
        return Engine(host, config, int(pidfile.read_text()) if pidfile.exists() else None)
    install_packages()
    if os.geteuid() != 0:
        raise EngineUnavailable("no Docker engine answers and a private dockerd needs root")
    if not shutil.which("dockerd"):
        raise EngineUnavailable("dockerd is not installed (Debian package docker.io)")
    STATE.mkdir(parents=True, exist_ok=True)
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)
    log = open(STATE / "dockerd.log", "ab")
    # Its own mount namespace with shared propagation: compose's `rslave` bind of / (node exporter)
    # needs a shared root, which a container host often lacks; the host's mounts stay untouched.
    namespace = ["unshare", "--mount", "--propagation", "shared", "--"] if shutil.which("unshare") else []
    proc = subprocess.Popen(
        [
            *namespace,
            "dockerd",
            "--data-root",
            str(DATA_ROOT),
            "--exec-root",
            str(STATE / "exec"),
            "--host",
            host,
            "--pidfile",
            str(STATE / "docker.pid"),
            "--bridge",
            "none",
            "--default-address-pool",
            ADDRESS_POOL,
            "--log-level",
            "warn",
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    return _answering(proc, host, config, STATE / "dockerd.log", timeout_s, EngineUnavailable)


def _answering(proc, host: str, config: Path, log: Path, timeout_s: float, failure: type[Exception]) -> Engine:
    """The engine once `docker info` answers; `failure` (with the log's tail) if dockerd exits or stays silent."""
    deadline = time.monotonic() + timeout_s
    reason = "not started"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise failure(f"dockerd exited with {proc.returncode}: {log.read_text(errors='replace')[-800:]}")
        reason = _answers(host, config)
        if reason is None:
            return Engine(host, config, proc.pid)
        time.sleep(1)
    stop(Engine(host, config, proc.pid))
    raise failure(f"dockerd did not answer within {timeout_s:.0f}s: {reason}")


def start_bare(folder: Path, propagation: str, compose_binary: str, timeout_s: float = 120) -> Engine:
    """A throwaway dockerd with everything under `folder` (an empty image store, no iptables rules;
    keep the path short: containerd's socket goes under it, and a unix socket path ends at 108 bytes),
    in a mount namespace whose root has the given propagation (`private`: what a container or a
    hand-started daemon often has). For checks that never get as far as starting a container."""
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("unshare"):
        raise EngineUnavailable("a throwaway dockerd needs root, dockerd and unshare")
    socket = folder / "docker.sock"
    host = f"unix://{socket}"
    config = compose_plugin_dir(compose_binary)
    log = open(folder / "dockerd.log", "ab")
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", propagation, "--", "dockerd"]
        + ["--data-root", str(folder / "data"), "--exec-root", str(folder / "exec"), "--host", host]
        + ["--pidfile", str(folder / "docker.pid"), "--bridge", "none", "--iptables=false", "--log-level", "warn"],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    # With the prerequisites there, a daemon that does not come up is a failure, not a skip.
    return _answering(proc, host, config, folder / "dockerd.log", timeout_s, RuntimeError)


def stop(engine: Engine, timeout_s: float = 60) -> None:
    """SIGTERM to our dockerd (it stops its containers first), SIGKILL if it lingers."""
    if engine.pid is None:
        return
    try:
        os.kill(engine.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(engine.pid, 0)
        except ProcessLookupError:
            return
        try:
            os.waitpid(engine.pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.5)
    os.kill(engine.pid, signal.SIGKILL)


if __name__ == "__main__":  # `python -m tests.docker_engine`: start one by hand, print its environment
    from tests.support.compose_support import compose_binary

    started = start(compose_binary())
    print(" ".join(f"export {k}={v};" for k, v in started.env.items()), f"# dockerd pid {started.pid}")
