"""The healer's HTTP side: POST /alerts (Alertmanager's webhook, bearer token), GET /metrics, GET /healthz.

Bounded by design, because it sits on the path to a production restart:
  * one event-loop thread reads every request (selectors), so a slow client costs a buffer, not a thread;
    complete requests go to a small fixed pool of handler threads;
  * at most MAX_CONNECTIONS open at once; when full, the oldest connection still being read is dropped
    (a slow-loris attacker holds nothing for long), and the listen backlog absorbs bursts;
  * a whole-request deadline (not a per-read timeout), at most MAX_HEADER_BYTES of headers and
    MAX_HEADERS of them, the body only read after the token is checked and never beyond max_body_bytes;
  * strict parsing: Content-Length digits only, duplicate Authorization/Content-Length/Content-Type/
    Transfer-Encoding refused, no obsolete line folding; replies never echo the target (a query string
    may carry a secret), and one request per connection.

Checks run cheapest and safest first: path, token, length, content type, JSON, schema, allowlist.
Every refusal is a 4xx with a one-line reason, and nothing acts unless the policy says so.
"""

from __future__ import annotations

import json
import logging
import re
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..core.settings import load as load_settings
from ..core.topology import HEALER_WEBHOOK_PATH
from .decisions import Healer, safe
from .payload import PayloadError, parse

log = logging.getLogger("leakwatch.heal")

REQUEST_DEADLINE_S = 10.0  # from accept to the last byte of the body
MAX_HEADER_BYTES = 16 * 1024  # request line and headers together
MAX_HEADERS = 32
MAX_CONNECTIONS = 128
HANDLER_THREADS = 4
LISTEN_BACKLOG = 512  # the kernel caps it at net.core.somaxconn
SEND_TIMEOUT_S = 5.0
SINGLE_HEADERS = ("authorization", "content-length", "content-type", "transfer-encoding", "host")
# Its own (config/stack.yaml) and the exporter's, which the chart's sidecar probes share.
HEALTH_PATHS = tuple(dict.fromkeys(load_settings().service(s).ready_path for s in ("healer", "leakwatch_exporter")))

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_TARGET = re.compile(r"/[\x21-\x7e]*")
_DIGITS = re.compile(r"[0-9]{1,12}")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class Refusal(Exception):
    def __init__(self, status: int, outcome: str | None, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.outcome, self.headers = status, outcome, headers or {}


@dataclass
class Request:
    method: str
    path: str  # without the query string
    headers: dict[str, str]  # lower-case names
    body: bytes = b""


@dataclass
class Connection:
    sock: socket.socket
    peer: str
    deadline: float
    accepted: float
    buffer: bytearray = field(default_factory=bytearray)
    request: Request | None = None
    body_length: int = 0


def parse_head(raw: bytes) -> Request:
    """The request line and headers, strictly (RFC 9112 minus what Alertmanager and Prometheus never send)."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise Refusal(400, "bad_request", "request line and headers must be ASCII") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not _TARGET.fullmatch(parts[1]):
        raise Refusal(400, "bad_request", "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise Refusal(505, "bad_request", "HTTP/1.0 or HTTP/1.1 only")
    headers: dict[str, str] = {}
    count = 0
    for line in lines[1:]:
        if not line:
            continue
        count += 1
        if count > MAX_HEADERS:
            raise Refusal(431, "headers_too_large", f"more than {MAX_HEADERS} headers")
        if line[0] in " \t":
            raise Refusal(400, "bad_request", "obsolete header line folding is not accepted")
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise Refusal(400, "bad_request", "malformed header line")
        value = value.strip(" \t")
        if _BAD_VALUE.search(value):
            raise Refusal(400, "bad_request", f"control character in header {safe(name, 40)}")
        key = name.lower()
        if key in headers:
            if key in SINGLE_HEADERS:
                raise Refusal(400, "bad_request", f"duplicate {name[:40]} header")
            headers[key] += ", " + value
        else:
            headers[key] = value
    return Request(method, target.split("?", 1)[0], headers)


class HealerServer:
    """serve_forever()/shutdown()/server_close() like socketserver's servers, so callers need not care."""

    def __init__(self, healer: Healer, host: str, port: int):
        self.healer = healer
        self.cfg = healer.cfg
        self.metrics = healer.metrics
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((host, port))
            self.listener.listen(LISTEN_BACKLOG)
        except OSError:
            self.listener.close()
            raise
        self.listener.setblocking(False)
        self.server_address = self.listener.getsockname()
        self.selector = selectors.DefaultSelector()
        self.connections: dict[int, Connection] = {}
        self.pool = ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="healer-http")
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()

    # -- event loop -------------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        try:
            while not self._stop.is_set():
                for key, _ in self.selector.select(timeout=min(poll_interval, 0.5)):
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                self._expire(time.monotonic())
        finally:
            self.selector.unregister(self.listener)
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait()

    def server_close(self) -> None:
        for conn in list(self.connections.values()):
            self._drop(conn)
        self.pool.shutdown(wait=True)
        self.listener.close()
        self.selector.close()

    def _accept(self) -> None:
        for _ in range(64):  # drain a burst without starving the connections already open
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: log, keep serving the others
                log.error("accept failed: %s", exc)
                return
            if len(self.connections) >= MAX_CONNECTIONS:
                self._evict_oldest_reading()
            sock.setblocking(False)
            now = time.monotonic()
            conn = Connection(sock, str(addr[0]), now + REQUEST_DEADLINE_S, now)
            self.connections[sock.fileno()] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def _evict_oldest_reading(self) -> None:
        oldest = min(self.connections.values(), key=lambda c: c.accepted)
        log.warning(
            "%d connections open; dropping the oldest, from %s, still unfinished after %.1fs",
            len(self.connections),
            oldest.peer,
            time.monotonic() - oldest.accepted,
        )
        self._drop(oldest)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self.connections.values() if c.deadline <= now]:
            self._answer_in_loop(
                conn, Refusal(408, "request_timeout", f"request not complete within {REQUEST_DEADLINE_S:.0f}s")
            )

    def _drop(self, conn: Connection) -> None:
        self.connections.pop(conn.sock.fileno(), None)
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _read(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self._drop(conn)
        if not chunk:
            return self._drop(conn)
        conn.buffer += chunk
        try:
            if conn.request is None:
                end = conn.buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(conn.buffer) > MAX_HEADER_BYTES:
                        raise Refusal(431, "headers_too_large", f"headers larger than {MAX_HEADER_BYTES} bytes")
                    return
                if end > MAX_HEADER_BYTES:
                    raise Refusal(431, "headers_too_large", f"headers larger than {MAX_HEADER_BYTES} bytes")
                conn.request = parse_head(bytes(conn.buffer[:end]))
                del conn.buffer[: end + 4]
                conn.body_length = self._admit(conn.request)
            if len(conn.buffer) > conn.body_length:
                raise Refusal(400, "bad_request", "more bytes than Content-Length (one request per connection)")
            if len(conn.buffer) == conn.body_length:
                conn.request.body = bytes(conn.buffer)
                self.selector.unregister(conn.sock)
                self.connections.pop(conn.sock.fileno(), None)
                self.pool.submit(self._handle, conn)
        except Refusal as refusal:
            self._answer_in_loop(conn, refusal)

    def _admit(self, req: Request) -> int:
        """Checks that need no body, before a byte of it is kept; returns the body length to read."""
        if req.method in ("GET", "HEAD"):
            if req.headers.get("content-length", "0") != "0" or "transfer-encoding" in req.headers:
                raise Refusal(400, "bad_request", f"{req.method} with a body")
            return 0
        if req.method != "POST":
            raise Refusal(405, "method_not_allowed", f"{req.method[:20]} is not allowed", {"Allow": "GET, HEAD, POST"})
        if req.path != HEALER_WEBHOOK_PATH:
            raise Refusal(404, "not_found", f"not found; the webhook is POST {HEALER_WEBHOOK_PATH}")
        if not self.healer.authorized(req.headers.get("authorization")):
            raise Refusal(
                401,
                "unauthorized",
                "missing or wrong bearer token",
                {"WWW-Authenticate": 'Bearer realm="leakwatch-healer"'},
            )
        if "transfer-encoding" in req.headers:
            raise Refusal(411, "length_required", "chunked bodies are not accepted; send Content-Length")
        raw_length = req.headers.get("content-length")
        if raw_length is None:
            raise Refusal(411, "length_required", "Content-Length is required")
        if not _DIGITS.fullmatch(raw_length):
            raise Refusal(400, "bad_request", "Content-Length must be digits only")
        length = int(raw_length)
        if length > self.cfg.max_body_bytes:
            raise Refusal(413, "too_large", f"body of {length} bytes; at most {self.cfg.max_body_bytes}")
        ctype = req.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise Refusal(415, "unsupported_media_type", f"Content-Type {safe(ctype, 60)!r}; send application/json")
        return length

    def _answer_in_loop(self, conn: Connection, refusal: Refusal) -> None:
        # Refusals are small: one non-blocking send fits the socket buffer; a client that reads
        # nothing loses the reply, not the server's time.
        self._log_refusal(conn, refusal)
        data = self._response(
            refusal.status,
            {"error": str(refusal)},
            refusal.outcome,
            headers=refusal.headers,
            head=conn.request is not None and conn.request.method == "HEAD",
        )
        try:
            conn.sock.send(data)
        except OSError:
            pass
        self._drop(conn)

    def _log_refusal(self, conn: Connection, refusal: Refusal) -> None:
        what = f"{safe(conn.request.method, 20)} {safe(conn.request.path, 80)}" if conn.request else "request"
        log.warning("refused %s from %s: %s (HTTP %d)", what, conn.peer, refusal, refusal.status)

    # -- handlers (pool threads) ----------------------------------------------------------------

    def _handle(self, conn: Connection) -> None:
        req = conn.request
        try:
            try:
                data = self._dispatch(req)
            except Refusal as refusal:
                self._log_refusal(conn, refusal)
                data = self._response(refusal.status, {"error": str(refusal)}, refusal.outcome, headers=refusal.headers)
            except Exception:
                log.exception("internal error on %s %s", safe(req.method, 20), safe(req.path, 80))
                data = self._response(500, {"error": "internal error; see the healer's log"})
            conn.sock.settimeout(SEND_TIMEOUT_S)
            conn.sock.sendall(data)
        except OSError as exc:
            log.debug("client %s went away: %s", conn.peer, exc)
        finally:
            conn.sock.close()

    def _dispatch(self, req: Request) -> bytes:
        if req.method in ("GET", "HEAD"):
            head = req.method == "HEAD"
            if req.path == "/metrics":
                return self._response(
                    200, generate_latest(self.metrics.registry), content_type=CONTENT_TYPE_LATEST, head=head
                )
            if req.path in HEALTH_PATHS:
                return self._response(200, {"status": "ok"}, head=head)
            return self._response(404, {"error": "not found"}, head=head)
        try:
            alerts = parse(req.body, self.cfg.max_alerts)
        except PayloadError as exc:
            outcome = {400: "bad_request", 413: "too_large"}.get(exc.status, "invalid_schema")
            raise Refusal(exc.status, outcome, str(exc)) from None
        status, outcome, reply = self.healer.notify(alerts)
        return self._response(status, reply, outcome)

    def _response(
        self,
        status: int,
        body: dict | bytes,
        outcome: str | None = None,
        content_type: str = "application/json",
        headers: dict | None = None,
        head: bool = False,
    ) -> bytes:
        if outcome:
            self.metrics.notifications.labels(outcome).inc()
        data = body if isinstance(body, bytes) else (json.dumps(body) + "\n").encode()
        lines = [
            f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(data)}",
            "Connection: close",
            "Server: leakwatch-healer",
            *(f"{k}: {v}" for k, v in (headers or {}).items()),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head else data)
