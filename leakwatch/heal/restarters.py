"""How the healer stops and starts vLLM: supervisord's XML-RPC natively, the Docker Engine API
(through a socket proxy that allows only listing and restarting containers) in compose."""

from __future__ import annotations

import threading
import time
import urllib.parse
import xmlrpc.client
from dataclasses import dataclass
from pathlib import Path

import requests

from ..core.errors import LeakwatchError
from ..core.topology import (
    COMPOSE_SERVICE_LABEL,
    VLLM_PROGRAM,
    VLLM_SERVICE_PREFIX,
    compose_container,
    exporter_service,
    vllm_container_list_query,
)


class RestartError(RuntimeError):
    pass


class TargetRefused(RestartError):
    """The alert names no target of this healer (Kubernetes: no pod of its release): nothing to
    restart, and no reason for Alertmanager to retry."""


@dataclass
class RestartTiming:
    stop_s: float  # SIGTERM until the old process is gone (vLLM's own drain); 0 when not separable
    start_s: float  # until the restart call returned


class SupervisorRestarter:
    """Stops (SIGTERM to the process group: vLLM drains for --shutdown-timeout) and starts one
    supervisord program over its unix socket. Every call has a timeout and the stop and the start
    are polled against deadlines, so a hung supervisord fails the restart instead of wedging the healer."""

    STOPPED = ("STOPPED", "EXITED", "FATAL")

    def __init__(
        self,
        socket_path: Path,
        program: str = VLLM_PROGRAM,
        stop_timeout_s: float = 60.0,
        start_timeout_s: float = 120.0,
        rpc_timeout_s: float = 10.0,
        poll_s: float = 0.5,
    ):
        self.socket_path = Path(socket_path)
        self.program = program
        self.stop_timeout_s = stop_timeout_s
        self.start_timeout_s = start_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self.poll_s = poll_s
        # A restart and the reconciling after a failed one never act on the program at once.
        self._acting = threading.Lock()

    def describe(self) -> str:
        return f"supervisord program {self.program!r} ({self.socket_path})"

    def _rpc(self):
        from ..native.supervisor import client

        return client(self.socket_path, self.rpc_timeout_s).supervisor

    def check(self) -> None:
        try:
            info = self._rpc().getProcessInfo(self.program)
        except (OSError, xmlrpc.client.Error) as exc:
            raise LeakwatchError(f"cannot reach {self.describe()}: {exc}") from None
        if not info:
            raise LeakwatchError(f"{self.describe()} is unknown to supervisord")

    def _wait_state(self, rpc, done, deadline: float, what: str) -> str:
        while True:
            state = rpc.getProcessInfo(self.program)["statename"]
            if done(state):
                return state
            if time.monotonic() >= deadline:
                raise RestartError(f"{self.describe()}: still {state} after waiting to {what}")
            time.sleep(self.poll_s)

    def restart(self) -> RestartTiming:
        with self._acting:
            return self._restart()

    def _restart(self) -> RestartTiming:
        rpc = self._rpc()
        began = time.monotonic()
        try:
            state = rpc.getProcessInfo(self.program)["statename"]
            if state not in self.STOPPED:
                # Not waited for inside supervisord: the call returns at once and the stop is polled.
                rpc.stopProcess(self.program, False)
                self._wait_state(rpc, lambda s: s in self.STOPPED, began + self.stop_timeout_s, "stop")
            stopped = time.monotonic()
            rpc.startProcess(self.program, False)
            state = self._wait_state(rpc, lambda s: s in ("RUNNING", "FATAL"), stopped + self.start_timeout_s, "start")
            if state != "RUNNING":
                raise RestartError(f"{self.describe()}: {state} after the start (see its log)")
        except (OSError, xmlrpc.client.Error) as exc:
            raise RestartError(f"{self.describe()}: {exc!r}") from None
        return RestartTiming(stopped - began, time.monotonic() - stopped)

    def reconcile(self) -> str:
        """After a failed restart, makes sure the program runs: supervisord may carry out a stop the
        healer gave up on (a host swapping under the very leak being healed answers late), which
        would leave vLLM stopped with no one to start it. Waits (bounded by the stop and start
        timeouts) for supervisord to answer, lets a stop in progress finish, and starts a stopped
        program. Returns "running" (nothing to do) or "started"; RestartError when it cannot."""
        with self._acting:
            return self._reconcile(time.monotonic() + self.stop_timeout_s + self.start_timeout_s)

    def _reconcile(self, deadline: float) -> str:
        while True:
            try:
                rpc = self._rpc()
                state = rpc.getProcessInfo(self.program)["statename"]
                if state == "STOPPING":
                    state = self._wait_state(rpc, lambda s: s != "STOPPING", deadline, "finish stopping")
                if state not in self.STOPPED:
                    return "running"
                rpc.startProcess(self.program, False)
                state = self._wait_state(rpc, lambda s: s in ("RUNNING", "FATAL"), deadline, "start")
                if state != "RUNNING":
                    raise RestartError(f"{self.describe()}: {state} after the reconciling start (see its log)")
                return "started"
            except xmlrpc.client.Fault as exc:  # supervisord answered: it will not
                raise RestartError(f"{self.describe()}: {exc.faultString}") from None
            except (OSError, xmlrpc.client.Error) as exc:  # no answer (yet): a hung or swapping host
                if time.monotonic() >= deadline:
                    raise RestartError(
                        f"{self.describe()}: no answer to reconcile after the failed restart: {exc!r}"
                    ) from None
                time.sleep(self.poll_s)


class DockerRestarter:
    """Restarts this compose project's vLLM container through the Docker Engine API, reached via
    the HAProxy socket proxy (leakwatch/generate/socket_proxy.py), which lets through exactly the
    three requests sent here: the listing below, a restart by container name, and a start of the
    exporter that lives in the restarted container's PID namespace."""

    def __init__(self, base_url: str, label: str, stop_timeout_s: int, project: str, http_timeout_s: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.label = label
        self.project = project
        self.stop_timeout_s = int(stop_timeout_s)
        self.http_timeout_s = http_timeout_s
        self.session = requests.Session()
        # The webhook's restart and the exporter keeper's start (another thread) never interleave.
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"running container of compose project {self.project!r} labelled {self.label} via {self.base_url}"

    def _containers(self) -> list[dict]:
        # Running containers of this project only: a leftover vLLM of another stack, or an exited
        # one of this, is not ours to restart. The query string is the exact one the proxy allows.
        url = f"{self.base_url}/containers/json?{vllm_container_list_query(self.project, self.label)}"
        try:
            resp = self.session.get(url, timeout=self.http_timeout_s)
        except requests.RequestException as exc:
            raise RestartError(f"cannot reach the Docker API at {self.base_url}: {exc}") from None
        if resp.status_code != 200:
            raise RestartError(f"listing containers at {self.base_url}: HTTP {resp.status_code} {resp.text[:200]}")
        return resp.json()

    def _one(self) -> dict:
        found = self._containers()
        if len(found) != 1:
            raise RestartError(f"expected one {self.describe()}, found {len(found)}")
        if not found[0].get("Names"):
            raise RestartError(f"container {found[0].get('Id', '?')[:12]} has no name")
        return found[0]

    def _exporter_of(self, vllm: dict) -> str | None:
        """compose's name for the exporter beside this vLLM container (its service says the profile)."""
        service = (vllm.get("Labels") or {}).get(COMPOSE_SERVICE_LABEL, "")
        if not service.startswith(VLLM_SERVICE_PREFIX):
            return None  # not one of our compose services: nothing known to start beside it
        return compose_container(self.project, exporter_service(service.removeprefix(VLLM_SERVICE_PREFIX)))

    def _start_exporter(self, name: str) -> bool:
        """The exporter dies with vLLM's PID namespace and Docker's own restart of it fails while vLLM
        is down (it does not retry: moby/moby#35502), so it is started here once vLLM runs again.
        True when it was stopped and is started now; False when it was running (304)."""
        try:
            resp = self.session.post(
                f"{self.base_url}/containers/{urllib.parse.quote(name, safe='')}/start", timeout=self.http_timeout_s
            )
        except requests.RequestException as exc:
            raise RestartError(f"starting the exporter {name}: {exc}") from None
        if resp.status_code not in (204, 304):
            raise RestartError(f"starting the exporter {name}: HTTP {resp.status_code} {resp.text[:200]}")
        return resp.status_code == 204

    def start_stopped_exporter(self) -> str | None:
        """Starts the exporter beside this project's running vLLM if it is stopped; its name when it
        was, None when it runs. RestartError when vLLM is not running (one listing, one start: what
        the proxy allows)."""
        with self._lock:
            exporter = self._exporter_of(self._one())
            if exporter and self._start_exporter(exporter):
                return exporter
            return None

    def check(self) -> None:
        try:
            self._one()
        except RestartError as exc:
            raise LeakwatchError(str(exc)) from None

    def restart(self) -> RestartTiming:
        with self._lock:
            return self._restart()

    def _restart(self) -> RestartTiming:
        vllm = self._one()
        name = urllib.parse.quote(vllm["Names"][0].lstrip("/"), safe="")
        began = time.monotonic()
        try:
            # By name: the proxy allows the restart path for the vLLM containers' names only. Docker
            # sends SIGTERM (vLLM drains), waits t seconds, then SIGKILLs and starts it.
            resp = self.session.post(
                f"{self.base_url}/containers/{name}/restart?t={self.stop_timeout_s}",
                timeout=self.stop_timeout_s + self.http_timeout_s,
            )
        except requests.RequestException as exc:
            raise RestartError(f"restarting container {name}: {exc}") from None
        if resp.status_code != 204:
            raise RestartError(f"restarting container {name}: HTTP {resp.status_code} {resp.text[:200]}")
        exporter = self._exporter_of(vllm)
        if exporter:
            try:
                self._start_exporter(exporter)
            except RestartError as exc:
                raise RestartError(f"vLLM restarted, but {exc}") from None
        return RestartTiming(0.0, time.monotonic() - began)
