"""The healer's Docker restarter against a stand-in for the HAProxy socket proxy and the Docker Engine
API behind it (unit tier; tests/compose/test_compose_e2e.py runs the real proxy and engine). The stand-in
applies the proxy's generated rules (leakwatch/generate/socket_proxy.py: the one listing query, a
restart by a vLLM container's name, 403 otherwise), so the test also proves the healer needs nothing
more than that."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from leakwatch.core.errors import LeakwatchError
from leakwatch.core.topology import vllm_container_list_query
from leakwatch.generate.socket_proxy import exporter_container_names, vllm_container_names
from leakwatch.heal.exporter_keeper import ExporterKeeper
from leakwatch.heal.restarters import DockerRestarter, RestartError

PROJECT = "leakwatch"
ALLOWED_POST = re.compile(r"^/containers/(" + "|".join(map(re.escape, vllm_container_names(PROJECT))) + r")/restart$")
ALLOWED_START = re.compile(
    r"^/containers/(" + "|".join(map(re.escape, exporter_container_names(PROJECT))) + r")/start$"
)
LABEL = "io.leakwatch.role=vllm"


class FakeDockerProxy:
    def __init__(self, containers: list[dict]):
        self.containers = containers
        self.allowed_query = vllm_container_list_query(PROJECT, LABEL)
        self.calls: list[tuple[str, str, dict]] = []
        self.restarted: list[tuple[str, int]] = []
        self.started: list[str] = []
        self.start_status = 204
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
                if not (url.path == "/containers/json" and url.query == proxy.allowed_query):
                    return self._reply(403, b"<html>403 Forbidden</html>")
                filters = json.loads(query["filters"][0])
                found = [
                    c
                    for c in proxy.containers
                    if c["State"] in filters["status"]
                    and set(filters["label"]) <= {f"{k}={v}" for k, v in c["Labels"].items()}
                ]
                return self._reply(200, found)

            def do_POST(self):
                url = urlparse(self.path)
                query = parse_qs(url.query)
                proxy.calls.append(("POST", url.path, query))
                cid = url.path.split("/")[-2]
                if ALLOWED_START.match(url.path) and not url.query:
                    proxy.started.append(cid)
                    return self._reply(proxy.start_status)
                if not ALLOWED_POST.match(url.path) or url.query != "t=35":  # the drain the restarters below are given
                    return self._reply(403, b"<html>403 Forbidden</html>")
                if url.path.endswith("/restart"):
                    proxy.restarted.append((cid, int(query["t"][0])))
                return self._reply(204)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def container(cid: str, name: str, labels: dict, state: str = "running", project: str = PROJECT) -> dict:
    return {
        "Id": cid,
        "Names": [f"/{name}"],
        "State": state,
        "Labels": {**labels, "com.docker.compose.project": project},
    }


VLLM = {"io.leakwatch.role": "vllm", "com.docker.compose.service": "vllm-demo"}


@pytest.fixture
def proxy():
    p = FakeDockerProxy(
        [
            container("abc123def456", "leakwatch-vllm-demo-1", VLLM),
            container("999888777666", "leakwatch-prometheus-1", {"com.docker.compose.service": "prometheus"}),
        ]
    )
    yield p
    p.close()


def test_restarts_the_labelled_container_with_the_drain_timeout(proxy):
    restarter = DockerRestarter(proxy.url, LABEL, stop_timeout_s=35, project=PROJECT)
    restarter.check()
    timing = restarter.restart()
    assert proxy.restarted == [("leakwatch-vllm-demo-1", 35)]
    # Then the exporter in its PID namespace, which the restart killed.
    assert proxy.started == ["leakwatch-leakwatch-exporter-demo-1"]
    assert timing.start_s >= 0
    # Only what the proxy allows: container listing, one restart, one start.
    assert [(m, p.rsplit("/", 1)[-1]) for m, p, _ in proxy.calls] == [
        ("GET", "json"),
        ("GET", "json"),
        ("POST", "restart"),
        ("POST", "start"),
    ]
    assert json.loads(proxy.calls[0][2]["filters"][0])["label"] == [f"com.docker.compose.project={PROJECT}", LABEL]


def test_a_leftover_vllm_of_another_stack_or_a_stopped_one_is_not_counted(proxy):
    proxy.containers.append(container("fff000fff000", "other-vllm-demo-1", VLLM, project="other"))
    proxy.containers.append(container("eee000eee000", "old-vllm", VLLM, state="exited"))
    DockerRestarter(proxy.url, LABEL, stop_timeout_s=35, project=PROJECT).restart()
    assert proxy.restarted == [("leakwatch-vllm-demo-1", 35)]


def test_refuses_when_the_label_matches_no_container_or_several(proxy):
    proxy.containers[0]["State"] = "exited"
    none = DockerRestarter(proxy.url, LABEL, stop_timeout_s=35, project=PROJECT)
    with pytest.raises(LeakwatchError, match="found 0"):
        none.check()
    with pytest.raises(RestartError, match="found 0"):
        none.restart()
    proxy.containers[0]["State"] = "running"
    proxy.containers.append(container("fff000fff000", "leakwatch-vllm-demo-2", VLLM))
    with pytest.raises(RestartError, match="found 2"):
        DockerRestarter(proxy.url, LABEL, stop_timeout_s=35, project=PROJECT).restart()
    assert proxy.restarted == []


def test_a_proxy_that_refuses_is_a_clear_error(proxy):
    proxy.containers[0]["Names"] = ["/leakwatch-prometheus-1"]  # not a vLLM container's name: refused
    with pytest.raises(RestartError, match="HTTP 403"):
        DockerRestarter(proxy.url, LABEL, stop_timeout_s=35, project=PROJECT).restart()


def test_an_unreachable_proxy_is_a_clear_error():
    with pytest.raises(RestartError, match="cannot reach the Docker API"):
        DockerRestarter("http://127.0.0.1:9", LABEL, stop_timeout_s=35, project=PROJECT).restart()


def test_an_exporter_already_running_is_fine_and_one_that_cannot_start_is_a_clear_error(proxy):
    proxy.start_status = 304  # Docker's restart policy brought it back first
    DockerRestarter(proxy.url, LABEL, stop_timeout_s=35, project=PROJECT).restart()
    proxy.start_status = 500
    with pytest.raises(
        RestartError, match="vLLM restarted, but starting the exporter leakwatch-leakwatch-exporter-demo-1"
    ):
        DockerRestarter(proxy.url, LABEL, stop_timeout_s=35, project=PROJECT).restart()


def test_the_exporter_keeper_starts_a_stopped_exporter_beside_running_vllm_only(proxy, caplog):
    """vLLM restarted without the healer (an OOM kill): the keeper starts the exporter, through the
    one start the proxy allows, and counts it; a running exporter (304) or a vLLM that is down
    starts nothing and restarts nothing."""
    started = []
    keeper = ExporterKeeper(
        DockerRestarter(proxy.url, LABEL, stop_timeout_s=35, project=PROJECT), 10, lambda: started.append(1)
    )
    assert keeper.check_once() == "leakwatch-leakwatch-exporter-demo-1"
    proxy.start_status = 304
    assert keeper.check_once() is None
    assert started == [1]
    proxy.containers[0]["State"] = "restarting"
    with caplog.at_level("INFO", logger="leakwatch.heal"):
        assert keeper.check_once() is None
        assert keeper.check_once() is None
    assert [r.getMessage() for r in caplog.records if "exporter check" in r.getMessage()] == [
        "exporter check: expected one running container of compose project 'leakwatch' labelled "
        f"{LABEL} via {proxy.url}, found 0 (retrying every 10s)"
    ]
    assert proxy.started == ["leakwatch-leakwatch-exporter-demo-1"] * 2 and proxy.restarted == []
    assert {m for m, _, _ in proxy.calls} == {"GET", "POST"}


def test_a_negative_exporter_check_interval_is_refused_before_anything_starts(capsys):
    from leakwatch.cli import main

    assert main(["heal", "--restarter", "docker", "--exporter-check-interval", "-1"]) == 2
    assert "--exporter-check-interval must be >= 0 seconds, not -1" in capsys.readouterr().err
