"""The canary router: HAProxy sending each request to the stable or the canary vLLM by weight.

Weighted round robin (`balance roundrobin`) per request, also on kept-alive client connections, so
1000 requests at 10 % give the canary 100 of them, not whatever a few long connections happened to
pick. The weights are percentages of the stable/canary pair; they change at run time over HAProxy's
admin socket (`set weight`), which applies to the next request and leaves requests in flight where
they are: a weight change drops nothing. Responses name the side that served them
(`X-Leakwatch-Deployment`), and HAProxy's own stats count each side's requests.

The router streams (no response buffering; long server timeout for long generations) and answers
its own health path without touching either vLLM, so "router up" and "a side up" stay apart: a side
whose /health fails is taken out of rotation by HAProxy's checks until it answers again.
"""

from __future__ import annotations

import csv
import io
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..core.errors import LeakwatchError
from ..core.settings import StackSettings, ready_path
from ..core.topology import DEPLOYMENTS

BACKEND = "vllm"
SIDES = DEPLOYMENTS  # HAProxy's server names, and the deployment label's values
SERVED_BY_HEADER = "X-Leakwatch-Deployment"
# HAProxy's spelling of a TCP address (`stats socket ipv4@127.0.0.1:8011`): the admin API on a pod's
# loopback, reached with `kubectl port-forward` (the official image has no client for a unix socket).
TCP_PREFIX = "ipv4@"
# A generation can stream for minutes; the client side gets the same allowance.
STREAM_TIMEOUT_S = 600
HEALTH_CHECK_INTERVAL_S = 2
# compose: the sides are container names, looked up in Docker's DNS (the resolver in the container's
# resolv.conf) while HAProxy runs, so a side that restarts with a new address is followed, and a side
# not started yet is a server waiting for its name instead of a router that refuses to start.
RESOLVERS = "container_dns"


@dataclass(frozen=True)
class Split:
    """The share of requests the canary gets, in whole percent (HAProxy weights 0-256)."""

    canary_percent: int

    def __post_init__(self) -> None:
        value = self.canary_percent
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
            raise LeakwatchError(f"canary percent must be a whole number 0-100 (got {value!r})")

    @classmethod
    def parse(cls, text: str) -> Split:
        try:
            return cls(int(text.strip().rstrip("%")))
        except ValueError:
            raise LeakwatchError(f"canary percent must be a whole number 0-100 (got {text!r})") from None

    @property
    def weights(self) -> dict[str, int]:
        return dict(zip(SIDES, (100 - self.canary_percent, self.canary_percent), strict=True))


def default_split(settings: StackSettings) -> Split:
    return Split(settings.service("canary_router").extra["canary_percent"])


def _address(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.path.strip("/"):
        raise LeakwatchError(f"{url!r}: a side is a plain http://host:port URL (vLLM's own server)")
    try:
        port = parts.port
    except ValueError:
        raise LeakwatchError(f"{url!r} has no valid port") from None
    return f"{parts.hostname}:{port or 80}"


def haproxy_config(
    listen: str,
    port: int,
    sides: dict[str, str],
    split: Split,
    admin_socket: Path | None,
    header: str = "",
    resolve_at_run_time: bool = False,
) -> str:
    """haproxy.cfg for the router listening on listen:port, `sides` mapping stable/canary to URLs.
    resolve_at_run_time: the sides' host names are re-resolved while it runs (compose's containers)."""
    if set(sides) != set(SIDES):
        raise LeakwatchError(f"the router needs exactly the sides {SIDES} (got {sorted(sides)})")
    weights = split.weights
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += ["global", "  log stdout format raw local0 info", "  maxconn 4096"]
    if admin_socket is not None:
        # A unix socket is kept to its owner; a TCP one (TCP_PREFIX) only listens on loopback.
        access = "" if str(admin_socket).startswith(TCP_PREFIX) else " mode 600"
        lines.append(f"  stats socket {admin_socket}{access} level admin")
    if resolve_at_run_time:
        lines += ["", f"resolvers {RESOLVERS}", "  parse-resolv-conf", "  hold valid 10s"]
    lines += [
        "",
        "defaults",
        "  mode http",
        "  log global",
        "  option httplog",
        "  timeout connect 5s",
        "  timeout http-request 30s",
        "  timeout http-keep-alive 60s",
        f"  timeout client {STREAM_TIMEOUT_S}s",
        f"  timeout server {STREAM_TIMEOUT_S}s",
        "",
        "frontend canary_router",
        f"  bind {listen}:{port}",
        f"  monitor-uri {ready_path('canary_router')}",
        f"  default_backend {BACKEND}",
        "",
        f"backend {BACKEND}",
        "  balance roundrobin",
        f"  option httpchk GET {ready_path('vllm')}",
        "  http-check expect status 200",
        f"  http-response set-header {SERVED_BY_HEADER} %s",
        # A connection error before the request was sent goes to the other side once.
        "  retries 1",
        "  option redispatch",
    ]
    # init-addr none: a name that does not resolve yet leaves the server down, not the router.
    # ipv4: compose's networks have no IPv6 unless asked for (HAProxy asks for AAAA first).
    dns = f" resolvers {RESOLVERS} resolve-prefer ipv4 init-addr libc,none" if resolve_at_run_time else ""
    for side in SIDES:
        lines.append(
            f"  server {side} {_address(sides[side])} weight {weights[side]} check inter {HEALTH_CHECK_INTERVAL_S}s"
            + dns
        )
    return "\n".join(lines) + "\n"


def _admin_address(path: Path | str) -> tuple[socket.AddressFamily, str | tuple[str, int]]:
    """A unix socket's path, or HAProxy's ipv4@HOST:PORT."""
    text = str(path)
    if not text.startswith(TCP_PREFIX):
        return socket.AF_UNIX, text
    host, _, port = text.removeprefix(TCP_PREFIX).rpartition(":")
    if not host or not port.isdigit():
        raise LeakwatchError(f"{text!r}: a TCP admin socket is {TCP_PREFIX}HOST:PORT")
    return socket.AF_INET, (host, int(port))


class RouterAdmin:
    """HAProxy's admin socket: one command per connection (its non-interactive mode). `path` is a
    unix socket, or ipv4@HOST:PORT (the chart's router, through `kubectl port-forward`)."""

    def __init__(self, path: Path | str, timeout_s: float = 5.0):
        self.path = path
        self.timeout_s = timeout_s
        self.family, self.address = _admin_address(path)

    def command(self, line: str) -> str:
        with socket.socket(self.family, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout_s)
            chunks = []
            try:
                sock.connect(self.address)
                sock.sendall(line.encode() + b"\n")
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
            except OSError as exc:  # refused, missing, or no answer within the timeout
                raise LeakwatchError(f"router admin socket {self.path}: {exc.strerror or exc}") from None
        return b"".join(chunks).decode()

    def set_split(self, split: Split) -> None:
        """One `set weight` per side: the side that gains goes first, so between the two commands
        the pair never weighs less than the new split (0/100 -> 100/0 lowering first would leave
        both at 0 for a moment, and HAProxy answers 503 to every request then)."""
        current = self.split()
        weights = split.weights
        for side in sorted(SIDES, key=lambda side: weights[side] <= current[side]):
            weight = weights[side]
            answer = self.command(f"set weight {BACKEND}/{side} {weight}").strip()
            if answer:  # HAProxy answers nothing on success
                raise LeakwatchError(f"HAProxy refused weight {weight} for {side}: {answer}")

    def split(self) -> dict[str, int]:
        """Each side's current weight."""
        return {side: int(self.command(f"get weight {BACKEND}/{side}").split()[0]) for side in SIDES}

    def sides_up(self) -> dict[str, bool]:
        """Whether HAProxy's health checks have each side in rotation."""
        return {side: row["status"] == "UP" for side, row in self._stats().items()}

    def _stats(self) -> dict[str, dict[str, str]]:
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {row["svname"]: row for row in rows if row["pxname"] == BACKEND and row["svname"] in SIDES}

    def wait_sides_up(self, timeout_s: float = 60) -> dict[str, bool] | None:
        """Waits until HAProxy's own checks (every 2 s) have both sides in rotation: healthy vLLMs are
        not yet the router's, and until then the first requests all go to whichever side it found
        first. None once both are up; the last states seen (None for a socket that never answered)
        when timeout_s ran out."""
        deadline = time.monotonic() + timeout_s
        states: dict[str, bool] | None = None
        while True:
            try:
                states = self.sides_up()
            except LeakwatchError:  # the socket is not there yet
                states = None
            if states == dict.fromkeys(SIDES, True):
                return None
            if time.monotonic() > deadline:
                return states or dict.fromkeys(SIDES, False)
            time.sleep(0.5)

    def served(self) -> dict[str, int]:
        """Requests each side has been sent since the router started (HAProxy's stot)."""
        return {side: int(row["stot"] or 0) for side, row in self._stats().items()}
