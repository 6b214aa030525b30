"""Compose as a newcomer meets it (issue 35): an engine whose root mount is private, and `make
down` / `status` with nothing but what `make up` was given.

The first test starts a throwaway Debian dockerd (its own data root, no images) in a mount namespace
with private propagation, as on many containers, VMs and hand-started daemons: `make up` must stop
before building anything, with a message that says what to do, instead of Docker's raw error after
minutes. The compose end-to-end module (test_compose_e2e.py) runs `make down` the same bare way on
the real stack."""

from __future__ import annotations

import os
import subprocess

import pytest

from leakwatch.core.paths import REPO_ROOT
from leakwatch.stack.engine_mounts import dockerd_pid, root_propagation
from tests.support.compose_support import bare_env, compose_binary
from tests.support.docker_engine import EngineUnavailable, start_bare, stop
from tests.support.native_stack import short_state_dir


def make(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_up_on_an_engine_with_a_private_root_mount_stops_before_building_and_says_what_to_do():
    # Not pytest's tmp_path: under xdist its paths pass the 108-byte limit of the containerd socket
    # that dockerd puts under the folder (dockerd then exits).
    folder = short_state_dir("lw-dk-")
    try:
        engine = start_bare(folder, "private", compose_binary())
    except EngineUnavailable as exc:
        pytest.skip(f"no throwaway Docker engine: {exc}")
    try:
        assert dockerd_pid(engine.host) == engine.pid
        assert root_propagation(engine.pid) == "private"
        result = make("up", "STACK=compose", "IMAGES=local", "MODEL=demo", env=bare_env(**engine.env))
        out = result.stdout + result.stderr
        assert result.returncode != 0, out[-3000:]
        assert f"the Docker engine (dockerd, pid {engine.pid}) sees / as a private mount" in out, out[-3000:]
        assert "mount --make-rshared /" in out and "STACK=native" in out, out[-3000:]
        assert "Traceback" not in out and "building the local image set" not in out, out[-3000:]
        images = subprocess.run(
            ["docker", "images", "-q"], env={**os.environ, **engine.env}, capture_output=True, text=True, check=True
        )
        assert images.stdout.strip() == "", "nothing may be built before the check"
    finally:
        stop(engine)
