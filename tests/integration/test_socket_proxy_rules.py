"""The Docker socket proxy's rules on real HAProxy (Debian's 2.6, as in the local images), with the
config `leakwatch generate` writes, in front of a recording stand-in for the Docker socket.

The stand-in is a Unix-socket HTTP server that records every request HAProxy passes on: what reached
it is exactly what would have reached dockerd. The same attacks run against a real dockerd (Debian's
20.10, which still honours a HostConfig in a start's body) behind the proxy container in the compose
tier (tests/compose/test_compose_e2e.py, the socket proxy test)."""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from leakwatch.core.ports import free_port
from leakwatch.core.settings import load as load_settings
from leakwatch.core.topology import docker_restart_wait_s, vllm_container_list_query
from leakwatch.generate.compose_healer import PROJECT
from leakwatch.generate.socket_proxy import exporter_container_names, haproxy_config, vllm_container_names

SETTINGS = load_settings()
VLLM = vllm_container_names(PROJECT)[0]
EXPORTER = exporter_container_names(PROJECT)[0]
DRAIN = docker_restart_wait_s(SETTINGS)
# The body Docker Engine <= 24 applies on a versioned start: a host file, the host's PID namespace, root's powers.
HOSTCONFIG_INJECTION = json.dumps(
    {"Binds": ["/etc/shadow:/host-shadow:ro"], "PidMode": "host", "Privileged": True, "CapAdd": ["ALL"]}
).encode()


class RecordingDockerSocket(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Stand-in for dockerd's socket: answers like Docker (204 for a start or restart, a JSON list
    for the listing) and records (method, path, body) of each request that got through."""

    daemon_threads = True

    def __init__(self, path: str):
        self.received: list[tuple[str, str, bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while size := int(self.rfile.readline().strip() or b"0", 16):
                        data += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                    return data
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _answer(self, status: int, body: bytes = b"") -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except BrokenPipeError:
                    pass  # HAProxy closed the client's connection (a refused pipelined request): recorded all the same

            def do_GET(self):
                server.received.append(("GET", self.path, self._body()))
                self._answer(200, b"[]")

            def do_POST(self):
                server.received.append(("POST", self.path, self._body()))
                self._answer(204)

        super().__init__(path, Handler)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    """(HAProxy's port, the stand-in socket's record) with the generated rules."""
    folder = tmp_path_factory.mktemp("socket-proxy")
    docker = RecordingDockerSocket(str(folder / "docker.sock"))
    threading.Thread(target=docker.serve_forever, daemon=True).start()
    port = free_port()
    config = folder / "haproxy.cfg"
    config.write_text(
        haproxy_config(SETTINGS, PROJECT, listen=f"127.0.0.1:{port}", socket_path=str(folder / "docker.sock"))
    )
    log = folder / "haproxy.log"
    haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if haproxy.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"HAProxy did not start: {log.read_text()}") from None
                time.sleep(0.1)
        yield port, docker
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=30)
        docker.shutdown()
        docker.server_close()


def send(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> int:
    """Status of one request through the proxy (http.client: it sends Content-Length: 0 on a bodiless POST, as requests does)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        return conn.getresponse().status
    finally:
        conn.close()


def raw(port: int, data: bytes) -> bytes:
    """HAProxy's answer to bytes sent as they are (framing attacks http.client would not send)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


def test_the_healers_three_requests_pass_as_it_sends_them(proxy):
    port, docker = proxy
    before = len(docker.received)
    list_path = f"/containers/json?{vllm_container_list_query(PROJECT)}"
    assert send(port, "GET", list_path) == 200
    assert send(port, "POST", f"/containers/{VLLM}/restart?t={DRAIN}") == 204
    assert send(port, "POST", f"/containers/{EXPORTER}/start") == 204
    assert docker.received[before:] == [
        ("GET", list_path, b""),
        ("POST", f"/containers/{VLLM}/restart?t={DRAIN}", b""),
        ("POST", f"/containers/{EXPORTER}/start", b""),
    ]


@pytest.mark.parametrize(
    "method, path, body, headers",
    [
        # Issue 32 N1: Docker 20.10 applied this HostConfig to the exporter (host file, host PID, privileges).
        ("POST", f"/v1.23/containers/{EXPORTER}/start", HOSTCONFIG_INJECTION, {"Content-Type": "application/json"}),
        ("POST", f"/containers/{EXPORTER}/start", HOSTCONFIG_INJECTION, {"Content-Type": "application/json"}),
        ("POST", f"/v1.41/containers/{EXPORTER}/start", None, None),
        ("POST", f"/v1.41/containers/{VLLM}/restart?t={DRAIN}", None, None),
        ("GET", f"/v1.41/containers/json?{vllm_container_list_query(PROJECT)}", None, None),
        # A restart without the drain (t=0 kills vLLM with requests in flight) or with another wait.
        ("POST", f"/containers/{VLLM}/restart?t=0", None, None),
        ("POST", f"/containers/{VLLM}/restart?t={DRAIN + 1}", None, None),
        ("POST", f"/containers/{VLLM}/restart?t={DRAIN}", b"{}", {"Content-Type": "application/json"}),
    ],
    ids=[
        "hostconfig-injection-v1.23",
        "hostconfig-injection-unversioned",
        "versioned-start",
        "versioned-restart",
        "versioned-list",
        "restart-t0",
        "restart-other-t",
        "restart-with-body",
    ],
)
def test_everything_else_is_refused_before_the_socket(proxy, method, path, body, headers):
    port, docker = proxy
    before = len(docker.received)
    assert send(port, method, path, body, headers) == 403
    assert docker.received[before:] == []


PIPELINED_START = f"POST /containers/{EXPORTER}/start HTTP/1.1\r\nHost: p\r\nContent-Length: 0\r\n\r\n".encode()


@pytest.mark.parametrize(
    "request_bytes, passed",
    [
        # A chunked body carries no Content-Length to check.
        (
            f"POST /containers/{EXPORTER}/start HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n"
            f"{len(HOSTCONFIG_INJECTION):x}\r\n".encode()
            + HOSTCONFIG_INJECTION
            + b"\r\n0\r\n\r\n",
            [],
        ),
        # Both framings at once (the classic smuggling shape).
        (
            f"POST /containers/{EXPORTER}/start HTTP/1.1\r\nHost: p\r\nContent-Length: 0\r\n"
            "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n".encode(),
            [],
        ),
        # The healer's own start, then the injection pipelined on the same connection: each is judged.
        (
            PIPELINED_START
            + f"POST /v1.23/containers/{EXPORTER}/start HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(HOSTCONFIG_INJECTION)}\r\n\r\n".encode()
            + HOSTCONFIG_INJECTION,
            [("POST", f"/containers/{EXPORTER}/start", b"")],
        ),
        # HTTP/2 with prior knowledge: its frames could carry a body without either header (HAProxy
        # speaks it on a plain bind unless told `proto h1`).
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", []),
    ],
    ids=["chunked-body", "content-length-and-chunked", "pipelined-after-an-allowed-start", "http2-prior-knowledge"],
)
def test_bodies_in_other_framings_never_reach_the_socket(proxy, request_bytes, passed):
    port, docker = proxy
    before = len(docker.received)
    answer = raw(port, request_bytes)
    assert docker.received[before:] == passed, answer[:300]
    assert answer.count(b"HTTP/1.1 204") == len(passed), answer[:300]
