"""Port checks before start-up: a port in use is named together with the process that holds it."""

from __future__ import annotations

import errno
import socket

import psutil

from .errors import LeakwatchError


def owner_of(port: int) -> str | None:
    """'name (pid N)' of the process listening on port, when this user may see it."""
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            try:
                proc = psutil.Process(conn.pid)
                return f"{proc.name()} (pid {conn.pid}: {' '.join(proc.cmdline())[:120]})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return None


def is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def require_free(host: str, port: int, service: str, env_name: str) -> None:
    if is_free(host, port):
        return
    owner = owner_of(port)
    held_by = f"by {owner}" if owner else "by a process this user cannot see"
    raise LeakwatchError(
        f"port {port} for {service} is already in use {held_by}; stop that process or pick another "
        f"port with {env_name}=<port>"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (for tests and side-by-side stacks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
