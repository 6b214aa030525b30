"""Whether the Docker engine can make compose's `rslave` binds of the host's `/` (the node exporter's
`/:/host:ro,rslave`), checked before `docker compose up` instead of failing after minutes of builds.

Docker refuses such a bind unless `/` is a shared or slave mount in dockerd's own mount namespace
("path / is mounted on / but it is not a shared or slave mount"). systemd hosts have a shared root;
many containers, VMs and hand-started daemons do not. The answer is read from /proc/<dockerd>/mountinfo
(the kernel's record of that namespace), so it is only known for an engine on this host that /proc
lets us see; otherwise the check says nothing and compose reports what Docker says.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
DEFAULT_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


def rslave_sources(plan: dict) -> list[tuple[str, str]]:
    """(service, host path) of every bind in a compose plan (compose.yaml's parsed form) that asks
    for rslave or rshared propagation of a host path."""
    found = []
    for name, service in (plan.get("services") or {}).items():
        for volume in service.get("volumes") or []:
            if isinstance(volume, str):
                parts = volume.split(":")
                if len(parts) == 3 and any(o in ("rslave", "rshared") for o in parts[2].split(",")):
                    found.append((name, parts[0]))
            elif isinstance(volume, dict) and (volume.get("bind") or {}).get("propagation") in ("rslave", "rshared"):
                found.append((name, str(volume.get("source"))))
    return found


def _dockerd_hosts(cmdline: list[str]) -> list[str]:
    hosts = []
    for i, arg in enumerate(cmdline):
        if arg in ("-H", "--host") and i + 1 < len(cmdline):
            hosts.append(cmdline[i + 1])
        elif arg.startswith("--host="):
            hosts.append(arg.split("=", 1)[1])
        elif arg.startswith("-H") and len(arg) > 2:
            hosts.append(arg[2:].lstrip("="))
    return hosts


def dockerd_pid(docker_host: str | None, proc: Path = PROC) -> int | None:
    """PID of the dockerd on this host that serves `docker_host` (a unix:// URL; None or empty: the
    default socket), or None when it cannot be told (a remote engine, /proc hidden, no match)."""
    if docker_host and not docker_host.startswith("unix://"):
        return None
    socket = docker_host.removeprefix("unix://") if docker_host else DEFAULT_SOCKETS[0]
    wanted = {os.path.realpath(socket), socket}
    try:
        entries = list(proc.iterdir())
    except OSError:
        return None
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in cmdline if a]
        if not args or os.path.basename(args[0]) != "dockerd":
            continue
        hosts = _dockerd_hosts(args[1:])
        # No -H, or systemd's socket activation: dockerd serves the default socket.
        sockets = {h.removeprefix("unix://") for h in hosts if h.startswith("unix://")}
        if not hosts or any(h.startswith("fd://") for h in hosts):
            sockets |= set(DEFAULT_SOCKETS)
        if sockets & wanted or {os.path.realpath(s) for s in sockets} & wanted:
            return int(entry.name)
    return None


def root_propagation(pid: int, proc: Path = PROC) -> str | None:
    """'shared', 'slave' or 'private' for `/` in that process's mount namespace; None when unreadable."""
    try:
        lines = (proc / str(pid) / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    top = None
    for line in lines:
        fields = line.split()
        # id parent major:minor root mountpoint options [optional fields...] - fstype source super
        if len(fields) > 6 and fields[4] == "/":
            top = fields[6 : fields.index("-")] if "-" in fields else fields[6:]
    if top is None:
        return None
    if any(f.startswith("shared:") for f in top):
        return "shared"
    if any(f.startswith("master:") for f in top):
        return "slave"
    return "private"


def rslave_problem(plan: dict, docker_host: str | None, proc: Path = PROC) -> str | None:
    """Why `docker compose up` would fail on the plan's rslave binds, with what to do; None when it
    will not (or when this host cannot tell)."""
    binds = rslave_sources(plan)
    if not binds:
        return None
    pid = dockerd_pid(docker_host, proc)
    if pid is None:
        return None
    propagation = root_propagation(pid, proc)
    if propagation != "private":
        return None
    services = ", ".join(sorted({f"{service} ({source})" for service, source in binds}))
    return (
        f"the Docker engine (dockerd, pid {pid}) sees / as a private mount, and compose's rslave bind of "
        f"the host's filesystem ({services}) needs it shared or slave: Docker would refuse it after the "
        "images are built. Fix the engine's mounts: `mount --make-rshared /` and restart dockerd (hosts "
        "that allow it), or start dockerd as `unshare --mount --propagation shared -- dockerd ...`; or run "
        "the same stack as native processes with STACK=native"
    )
