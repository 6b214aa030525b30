"""Fault drills on the real native stack: a stack that runs the production rules and routing with two
changes, so that short outages show (VLLMDown and VLLMEngineDown wait SHORT_FOR instead of minutes,
and the Watchdog's heartbeat route posts to a recorder in the test, repeating after HEARTBEAT_REPEAT,
instead of to nobody), and the kill -9 drill that tests/stack (the API server) and tests/soak
(EngineCore, the worker) run on it. Everything through the stack's basic auth."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from xmlrpc.client import Fault

import psutil
import requests
import yaml

from leakwatch.core.alert_config import ALERTS_FILE
from leakwatch.core.promapi import Prometheus
from leakwatch.core.settings import load as load_settings
from leakwatch.core.topology import VLLM_PROGRAM
from leakwatch.drill.drill_settings import with_scrape_interval
from leakwatch.exporter.derived import WARMUP_REQUESTS
from leakwatch.generate.alertmanager_config import compose_alertmanager_config
from leakwatch.native.runner import NativeStack
from leakwatch.rules.render import write_rule_copy

from . import vllm_tree
from .healer_support import wait_for
from .native_stack import RunningStack, environ, running_native_stack

# Production waits 5m (VLLMDown) and 2m (VLLMEngineDown), longer than these outages last here. The
# drill stack scrapes and evaluates every SCRAPE_INTERVAL_S and waits one interval: an alert fires on
# the second failed evaluation in a row, at most ~3 intervals after the outage begins. (At the
# production 15 s a supervised vLLM restart, 30-60 s here, could end before VLLMDown fired.)
SCRAPE_INTERVAL_S = 5
SHORT_FOR = {"down_for": f"{SCRAPE_INTERVAL_S}s", "engine_down_for": f"{SCRAPE_INTERVAL_S}s"}
# Longer than this module runs: every Watchdog notification after the first one is a re-send.
HEARTBEAT_REPEAT = "3h"


class WebhookRecorder:
    """An Alertmanager webhook receiver on 127.0.0.1 that keeps the alert names of every notification."""

    def __init__(self):
        self.notifications: list[list[str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                recorder.notifications.append([a["labels"]["alertname"] for a in body["alerts"]])
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, alertname: str) -> int:
        return sum(alertname in names for names in self.notifications)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def drill_rules(folder: Path) -> Path:
    """The production rules rendered from config/alerts.yaml with only SHORT_FOR changed."""
    thresholds = yaml.safe_load(ALERTS_FILE.read_text())
    thresholds["serving"].update(SHORT_FOR)
    config = folder / "alerts.yaml"
    config.write_text(yaml.safe_dump(thresholds))
    rules = folder / "rules"
    write_rule_copy(rules, f"Fault drills' copy: production rules with {SHORT_FOR}.", config=config)
    return rules


def drill_alertmanager(heartbeat_url: str) -> dict:
    """The production routing with the Watchdog's heartbeat receiver posting to heartbeat_url."""
    doc = compose_alertmanager_config(load_settings())
    (route,) = [r for r in doc["route"]["routes"] if r.get("matchers") == ['alertname="Watchdog"']]
    route["repeat_interval"] = HEARTBEAT_REPEAT
    (receiver,) = [r for r in doc["receivers"] if r["name"] == route["receiver"]]
    receiver["webhook_configs"] = [{"url": heartbeat_url, "send_resolved": False}]
    return doc


@contextlib.contextmanager
def fault_drill_stack(folder: Path, heartbeat_url: str):
    with running_native_stack(
        "lw-fault-",
        settings=with_scrape_interval(load_settings(), SCRAPE_INTERVAL_S),
        rules_dir=drill_rules(folder),
        alertmanager_config=drill_alertmanager(heartbeat_url),
    ) as running:
        yield running


def rpc(stack):
    with environ(stack.env):
        return NativeStack().rpc()


def restart_program(stack, name: str, while_stopped=lambda: None) -> None:
    server = rpc(stack)
    server.stopProcess(name, True)
    while_stopped()
    server.startProcess(name, True)


def am_alert_names(am: str, auth) -> set[str]:
    try:
        return {a["labels"]["alertname"] for a in requests.get(f"{am}/api/v2/alerts", auth=auth, timeout=10).json()}
    except (requests.RequestException, ValueError):
        return set()


def vllm_processes(stack) -> dict[str, list[psutil.Process]]:
    """By role (api_server, engine_core, worker); the supervised program is
    leakwatch/native/orphan_reaper.py, the API server its child."""
    reaper = psutil.Process(rpc(stack).getProcessInfo(VLLM_PROGRAM)["pid"])
    api = [p for p in reaper.children() if vllm_tree.is_api_server(p)]
    trees = [vllm_tree.by_role(p) for p in api]
    return {role: [p for tree in trees for p in tree[role]] for role in ("api_server", "engine_core", "worker")}


def serving(stack) -> bool:
    try:
        return requests.get(f"{stack.vllm_url}/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def replaced(stack, old: list[psutil.Process]) -> bool:
    """vLLM serves again, with one new process per role."""
    if not serving(stack):
        return False
    return all(len(procs) == 1 and procs[0] not in old for procs in vllm_processes(stack).values())


def kill_9_and_watch_the_restart(stack: RunningStack, role: str) -> None:
    """kill -9 of one process of vLLM's tree: vLLM's own watchdog stops the API server when EngineCore
    or the worker is gone, supervisord starts the program again, VLLMDown fires while vLLM is down
    and resolves once it is back, nothing of the old tree is left behind (an orphaned EngineCore or
    worker keeps its memory), and the exporter sees one process per role, counts the restart and
    takes a new baseline after its warm-up.

    The restart is held (supervisord's new start stopped, then started again) until Prometheus has
    VLLMDown firing: a supervised restart that wins the race against the scrape and the rule's `for`
    on a fast machine would otherwise leave nothing to alert on."""
    with environ(stack.env):
        prom = Prometheus(stack.url("prometheus"))
    before = vllm_processes(stack)
    assert all(len(procs) == 1 for procs in before.values()), before
    old = [p for procs in before.values() for p in procs]
    # The exporter counts a restart as a new API server after one it has seen: on a fresh stack, wait
    # until it has sampled this one (a kill before its first sample would be no restart to it).
    for r in before:
        prom.wait_for(f'leakwatch_processes{{role="{r}"}} == 1', timeout=300)
    restarts_before = prom.scalar("sum(leakwatch_vllm_restarts_total)") or 0
    server = rpc(stack)
    old_program_pid = server.getProcessInfo(VLLM_PROGRAM)["pid"]
    killed_at = time.time()
    before[role][0].send_signal(signal.SIGKILL)
    wait_for(
        lambda: server.getProcessInfo(VLLM_PROGRAM)["pid"] not in (0, old_program_pid),
        timeout=600,
        interval=0.5,
        what=f"supervisord starting vLLM again after kill -9 of {role}",
    )
    with contextlib.suppress(Fault):  # NOT_RUNNING: the new start failed on its own; startProcess below
        server.stopProcess(VLLM_PROGRAM, True)
    prom.wait_for('ALERTS{alertname="VLLMDown", alertstate="firing"}', timeout=300)
    with contextlib.suppress(Fault):  # ALREADY_STARTED: supervisord's own retry came first
        server.startProcess(VLLM_PROGRAM, False)
    wait_for(
        lambda: replaced(stack, old),
        timeout=900,
        interval=2,
        what=f"vLLM serving again after kill -9 of {role}",
    )
    assert fired_since(prom, "VLLMDown", killed_at)
    prom.wait_for('absent(ALERTS{alertname="VLLMDown"})', timeout=180)
    wait_for(
        lambda: not [p for p in old if p.is_running()],
        timeout=120,
        what="no process of the old vLLM left: " + ", ".join(f"{p.pid}" for p in old if p.is_running()),
    )
    for i in range(WARMUP_REQUESTS):  # the exporter's warm-up before it takes a baseline
        requests.post(
            f"{stack.vllm_url}/v1/completions",
            timeout=120,
            json={"model": stack.model, "prompt": f"after kill -9 of {role} {i}", "max_tokens": 8},
        ).raise_for_status()
    for r in before:
        prom.wait_for(f'leakwatch_processes{{role="{r}"}} == 1', timeout=300)
    prom.wait_for(f"sum(leakwatch_vllm_restarts_total) > {restarts_before}", timeout=300)
    prom.wait_for(f"max(leakwatch_baseline_timestamp_seconds) > {killed_at:.0f}", timeout=600)


def fired_since(prom: Prometheus, alertname: str, since: float) -> bool:
    span = int(time.time() - since) + 1
    return bool(prom.query(f'max_over_time(ALERTS{{alertname="{alertname}", alertstate="firing"}}[{span}s])'))


def prom_start(prom: Prometheus) -> float:
    return prom.scalar('process_start_time_seconds{job="prometheus"}') or time.time() - 600


def ok(url: str, auth) -> bool:
    try:
        return requests.get(url, auth=auth, timeout=5).status_code == 200
    except requests.RequestException:
        return False
