"""A STAND-IN for the Kubernetes API server (none can run on these machines), for the healer's
Kubernetes restarter. It serves only what the restarter uses, with the real contract:

* bearer-token authentication (401 without it) and the chart's Role as authorisation: every request
  is checked against the rendered Role's rules (403 for a verb/resource it does not grant);
* GET pods (one, or a list with a labelSelector of `key=value` or `key`), 404 Status for a missing pod;
* POST pods/{name}/eviction with a policy/v1 Eviction whose metadata.name is the pod (400 otherwise):
  201 when the pod's PodDisruptionBudget allows a disruption or none covers it, 429 (reason
  TooManyRequests, "would violate the pod's disruption budget") when it does not, 404 for a missing pod;
* an evicted pod terminates after `grace_s`, and a Deployment-like controller creates a replacement
  that turns Ready after `ready_s`.

scripts/k8s/check.sh runs the same restarter against a real cluster.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


@dataclass
class StandinPod:
    name: str
    labels: dict[str, str]
    ready: bool = True
    deleting: bool = False

    def to_json(self, namespace: str) -> dict:
        meta = {
            "name": self.name,
            "namespace": namespace,
            "labels": self.labels,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, self.name)),
        }
        if self.deleting:
            meta["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if self.ready and not self.deleting else "False"}],
            },
        }


@dataclass
class StandinPDB:
    selector: dict[str, str]
    max_unavailable: int


@dataclass
class StandinCluster:
    namespace: str
    token: str
    role_rules: list[dict]
    pods: dict[str, StandinPod] = field(default_factory=dict)
    pdbs: list[StandinPDB] = field(default_factory=list)
    grace_s: float = 0.3
    ready_s: float = 0.3
    requests: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # An unresponsive API server: requests whose path contains one of these get no answer until
    # `answer_again` is set (or a minute passes).
    hang_on: tuple[str, ...] = ()
    answer_again: threading.Event = field(default_factory=threading.Event)
    hung: list[str] = field(default_factory=list)  # paths of the requests it left unanswered

    def allowed(self, verb: str, resource: str) -> bool:
        return any(
            resource in r.get("resources", []) and verb in r.get("verbs", []) and "" in r.get("apiGroups", [])
            for r in self.role_rules
        )

    def disruptions_allowed(self, pod: StandinPod) -> bool:
        for pdb in self.pdbs:
            if all(pod.labels.get(k) == v for k, v in pdb.selector.items()):
                covered = [p for p in self.pods.values() if all(p.labels.get(k) == v for k, v in pdb.selector.items())]
                unavailable = sum(1 for p in covered if not p.ready or p.deleting)
                if unavailable >= pdb.max_unavailable:
                    return False
        return True

    def evict(self, pod: StandinPod) -> None:
        pod.deleting = True

        def terminate_and_replace():
            time.sleep(self.grace_s)
            with self.lock:
                self.pods.pop(pod.name, None)
                replacement = StandinPod(
                    f"{pod.name.rsplit('-', 1)[0]}-{uuid.uuid4().hex[:5]}", dict(pod.labels), ready=False
                )
                self.pods[replacement.name] = replacement
            time.sleep(self.ready_s)
            with self.lock:
                replacement.ready = True

        threading.Thread(target=terminate_and_replace, daemon=True).start()


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure" if code >= 400 else "Success",
        "reason": reason,
        "message": message,
        "code": code,
    }


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


def make_handler(cluster: StandinCluster):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            cluster.requests.append((self.command, self.path, code))
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first (a test's hung or timed-out call): it is recorded above

        def _route(self):
            if any(part in self.path for part in cluster.hang_on) and not cluster.answer_again.is_set():
                cluster.hung.append(self.path)
                cluster.answer_again.wait(60)
            if self.headers.get("Authorization") != f"Bearer {cluster.token}":
                return self._send(401, _status(401, "Unauthorized", "Unauthorized"))
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            # api/v1/namespaces/{ns}/pods[/{name}[/eviction]]
            if parts[:3] != ["api", "v1", "namespaces"] or len(parts) < 5 or parts[4] != "pods":
                return self._send(404, _status(404, "NotFound", f"the stand-in does not serve {url.path}"))
            namespace = parts[3]
            name = parts[5] if len(parts) > 5 else None
            sub = parts[6] if len(parts) > 6 else None
            if self.command == "GET" and name is None:
                return self._list(namespace, parse_qs(url.query).get("labelSelector", [""])[0])
            if self.command == "GET" and sub is None:
                return self._get(namespace, name)
            if self.command == "POST" and sub == "eviction":
                return self._evict(namespace, name)
            verb = {"GET": "get", "POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(
                self.command, "?"
            )
            if not cluster.allowed(verb, f"pods/{sub}" if sub else "pods"):
                return self._send(403, _status(403, "Forbidden", f"cannot {verb} pods"))
            return self._send(405, _status(405, "MethodNotAllowed", "not served by the stand-in"))

        def _forbidden_unless(self, verb: str, resource: str, namespace: str) -> bool:
            if namespace != cluster.namespace or not cluster.allowed(verb, resource):
                self._send(
                    403, _status(403, "Forbidden", f'{resource} is forbidden: cannot {verb} in namespace "{namespace}"')
                )
                return True
            return False

        def _list(self, namespace: str, selector: str):
            if self._forbidden_unless("list", "pods", namespace):
                return
            with cluster.lock:
                items = [p.to_json(namespace) for p in cluster.pods.values() if _selector_matches(selector, p.labels)]
            self._send(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})

        def _get(self, namespace: str, name: str):
            if self._forbidden_unless("get", "pods", namespace):
                return
            with cluster.lock:
                pod = cluster.pods.get(name)
                body = pod.to_json(namespace) if pod else None
            if body is None:
                return self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
            self._send(200, body)

        def _evict(self, namespace: str, name: str):
            if self._forbidden_unless("create", "pods/eviction", namespace):
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self._send(400, _status(400, "BadRequest", "body is not JSON"))
            if body.get("apiVersion", "policy/v1") != "policy/v1" or body.get("kind", "Eviction") != "Eviction":
                return self._send(400, _status(400, "BadRequest", "expected a policy/v1 Eviction"))
            if (body.get("metadata") or {}).get("name") != name:
                return self._send(
                    400, _status(400, "BadRequest", "name in URL does not match the Eviction's metadata.name")
                )
            with cluster.lock:
                pod = cluster.pods.get(name)
                if pod is None:
                    return self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
                if pod.deleting:
                    return self._send(201, _status(201, "", ""))
                if not cluster.disruptions_allowed(pod):
                    return self._send(
                        429,
                        _status(
                            429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
                        ),
                    )
                cluster.evict(pod)
            self._send(201, _status(201, "", ""))

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = lambda self: self._route()

    return Handler


class StandinApiServer:
    def __init__(self, cluster: StandinCluster):
        self.cluster = cluster
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(cluster))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> StandinApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.cluster.answer_again.set()
        self.server.shutdown()
        self.server.server_close()

    def core_api(self, token: str | None = None):
        """The official client's CoreV1Api pointed at the stand-in."""
        from kubernetes import client

        configuration = client.Configuration(host=self.url)
        configuration.api_key = {"authorization": token or self.cluster.token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.CoreV1Api(client.ApiClient(configuration))
