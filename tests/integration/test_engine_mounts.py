"""engine_mounts: which dockerd serves a socket, and how `/` propagates in its mount namespace.
The kernel's own files are read: this process's real /proc (checked against util-linux's findmnt),
and /proc trees laid out like the kernel's for daemons this machine does not run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from leakwatch.core.paths import REPO_ROOT
from leakwatch.stack.engine_mounts import dockerd_pid, root_propagation, rslave_problem, rslave_sources

MOUNTINFO = {
    "private": "22 1 259:1 / / rw,relatime - ext4 /dev/root rw\n",
    "shared": "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw\n",
    "slave": "22 1 259:1 / / rw,relatime master:1 - ext4 /dev/root rw\n",
    # An overlay root whose top mount (listed last) is shared: the last "/" line decides.
    "overmounted": "22 1 0:30 / / rw - overlay overlay rw\n23 22 0:31 / / rw shared:7 - tmpfs tmpfs rw\n",
}


def fake_proc(tmp_path: Path, processes: dict[int, tuple[list[str], str]]) -> Path:
    proc = tmp_path / "proc"
    for pid, (argv, mountinfo) in processes.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (proc / str(pid) / "mountinfo").write_text(mountinfo)
    (proc / "self").mkdir()
    return proc


def test_this_processs_root_propagation_matches_findmnt():
    if not shutil.which("findmnt"):
        pytest.skip("util-linux's findmnt is not installed")
    want = subprocess.run(
        ["findmnt", "-n", "-o", "PROPAGATION", "/"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    assert root_propagation(os.getpid()) == want.removesuffix(",unbindable")


@pytest.mark.parametrize(
    "name, want", [("private", "private"), ("shared", "shared"), ("slave", "slave"), ("overmounted", "shared")]
)
def test_root_propagation_reads_the_last_root_mount(tmp_path, name, want):
    proc = fake_proc(tmp_path, {100: (["dockerd"], MOUNTINFO[name])})
    assert root_propagation(100, proc) == want


def test_the_dockerd_serving_a_socket_is_found_by_its_host_flags(tmp_path):
    proc = fake_proc(
        tmp_path,
        {
            10: (
                ["/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"],
                MOUNTINFO["shared"],
            ),
            20: (["dockerd", "--host", "unix:///srv/a/docker.sock", "--data-root", "/srv/a"], MOUNTINFO["private"]),
            30: (["dockerd", "--host=unix:///srv/b/docker.sock"], MOUNTINFO["slave"]),
            40: (["python3", "-c", "dockerd -H unix:///srv/c.sock"], MOUNTINFO["private"]),
        },
    )
    assert dockerd_pid("unix:///srv/a/docker.sock", proc) == 20
    assert dockerd_pid("unix:///srv/b/docker.sock", proc) == 30
    assert dockerd_pid(None, proc) == 10  # the default socket: systemd's socket activation
    assert dockerd_pid("unix:///srv/c.sock", proc) is None  # not a dockerd, whatever its arguments say
    assert dockerd_pid("tcp://10.0.0.7:2376", proc) is None  # a remote engine: nothing to read here


def test_compose_yaml_asks_for_an_rslave_bind_of_the_host_root_and_the_check_names_it(tmp_path):
    plan = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())
    assert ("node-exporter", "/") in rslave_sources(plan)
    private = fake_proc(tmp_path / "a", {20: (["dockerd", "-H", "unix:///srv/a.sock"], MOUNTINFO["private"])})
    problem = rslave_problem(plan, "unix:///srv/a.sock", private)
    assert problem.startswith("the Docker engine (dockerd, pid 20) sees / as a private mount"), problem
    assert "node-exporter (/)" in problem and "mount --make-rshared /" in problem and "STACK=native" in problem
    shared = fake_proc(tmp_path / "b", {20: (["dockerd", "-H", "unix:///srv/a.sock"], MOUNTINFO["slave"])})
    assert rslave_problem(plan, "unix:///srv/a.sock", shared) is None
    assert rslave_problem({"services": {"x": {"volumes": ["/data:/data:ro"]}}}, "unix:///srv/a.sock", private) is None
