"""The healer's Docker restarter against a stand-in for the socket proxy in front of the Docker Engine
API (no Docker engine on these machines). The stand-in applies the proxy's own rules (CONTAINERS=1,
ALLOW_RESTARTS=1, POST=0: GETs under /containers and POST .../restart|stop|kill, 403 otherwise), so
the test also proves the healer needs nothing more than that."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from leakwatch.errors import LeakwatchError
from leakwatch.heal.restarters import DockerRestarter, RestartError

ALLOWED_POST = re.compile(r"^(/v[\d.]+)?/containers/[a-zA-Z0-9_.-]+/(stop|restart|kill)$")
LABEL = "io.leakwatch.role=vllm"


class FakeDockerProxy:
    def __init__(self, containers: list[dict]):
        self.containers = containers
        self.calls: list[tuple[str, str, dict]] = []
        self.restarted: list[tuple[str, int]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status, body=b""):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlparse(self.path)
                query = parse_qs(url.query)
                proxy.calls.append(("GET", url.path, query))
                if not re.match(r"^(/v[\d.]+)?/containers", url.path):
                    return self._reply(403, b"<html>403 Forbidden</html>")
                if url.path.endswith("/containers/json"):
                    wanted = json.loads(query.get("filters", ["{}"])[0]).get("label", [])
                    found = [c for c in proxy.containers if set(wanted) <= {f"{k}={v}" for k, v in c["Labels"].items()}]
                    return self._reply(200, found)
                return self._reply(404, {"message": "no such endpoint in this stand-in"})

            def do_POST(self):
                url = urlparse(self.path)
                query = parse_qs(url.query)
                proxy.calls.append(("POST", url.path, query))
                if not ALLOWED_POST.match(url.path):
                    return self._reply(403, b"<html>403 Forbidden</html>")
                cid = url.path.split("/")[-2]
                if url.path.endswith("/restart"):
                    proxy.restarted.append((cid, int(query["t"][0])))
                return self._reply(204)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def container(cid: str, labels: dict) -> dict:
    return {"Id": cid, "Names": [f"/{cid[:6]}"], "Labels": labels, "State": "running"}


@pytest.fixture
def proxy():
    p = FakeDockerProxy(
        [
            container("abc123def456", {"io.leakwatch.role": "vllm", "com.docker.compose.service": "vllm-demo"}),
            container("999888777666", {"com.docker.compose.service": "prometheus"}),
        ]
    )
    yield p
    p.close()


def test_restarts_the_labelled_container_with_the_drain_timeout(proxy):
    restarter = DockerRestarter(proxy.url, LABEL, stop_timeout_s=35)
    restarter.check()
    timing = restarter.restart()
    assert proxy.restarted == [("abc123def456", 35)]
    assert timing.start_s >= 0
    # Only what the proxy allows: container listing and one restart.
    assert {(m, p.rsplit("/", 1)[-1]) for m, p, _ in proxy.calls} <= {("GET", "json"), ("POST", "restart")}
    assert json.loads(proxy.calls[0][2]["filters"][0])["label"] == [LABEL]


def test_refuses_when_the_label_matches_no_container_or_several(proxy):
    none = DockerRestarter(proxy.url, "io.leakwatch.role=nothing", stop_timeout_s=35)
    with pytest.raises(LeakwatchError, match="found 0"):
        none.check()
    with pytest.raises(RestartError, match="found 0"):
        none.restart()
    proxy.containers.append(container("fff000fff000", {"io.leakwatch.role": "vllm"}))
    with pytest.raises(RestartError, match="found 2"):
        DockerRestarter(proxy.url, LABEL, stop_timeout_s=35).restart()
    assert proxy.restarted == []


def test_a_proxy_that_refuses_is_a_clear_error(proxy):
    proxy.containers[0]["Id"] = "bad/../id"  # the URL-quoted id no longer matches the allowed pattern
    with pytest.raises(RestartError, match="HTTP 403"):
        DockerRestarter(proxy.url, LABEL, stop_timeout_s=35).restart()


def test_an_unreachable_proxy_is_a_clear_error():
    with pytest.raises(RestartError, match="cannot reach the Docker API"):
        DockerRestarter("http://127.0.0.1:9", LABEL, stop_timeout_s=35).restart()
