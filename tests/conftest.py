"""Shared fixtures: a real native stack (vLLM CPU, Prometheus, Alertmanager, node exporter) on free
ports in a private state directory, started once per session and stopped at the end."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from leakwatch.native.layout import StateLayout
from leakwatch.native.ports import free_port
from leakwatch.native.runner import NativeStack
from leakwatch.promapi import Prometheus
from leakwatch.settings import load as load_settings

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def stack_port_env() -> dict[str, str]:
    """A free port for every service, so test stacks never collide with a user's `make up`."""
    return {svc.port_env: str(free_port()) for svc in load_settings().services.values()}


_state_dirs: list[Path] = []


def short_state_dir(prefix: str) -> Path:
    # supervisord's unix socket path must stay under ~100 characters: keep it in /tmp. Removed at the end
    # of the session (pytest_sessionfinish), whoever made it, so a run leaves no /tmp/lw-* behind.
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    _state_dirs.append(path)
    return path


def pytest_sessionfinish(session, exitstatus):
    for path in _state_dirs:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def environ(values: dict[str, str]):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@dataclass
class RunningStack:
    stack: NativeStack
    env: dict[str, str]

    @property
    def layout(self) -> StateLayout:
        return self.stack.layout

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.env[load_settings().service(service).port_env]}"

    @property
    def vllm_url(self) -> str:
        return self.url("vllm")

    @property
    def prometheus(self) -> Prometheus:
        return Prometheus(self.url("prometheus"))

    @property
    def model(self) -> str:
        return self.stack.info()["served_model_name"]


@contextlib.contextmanager
def running_native_stack(prefix: str, model: str = "demo", settings=None, **up_kwargs):
    """settings: StackSettings to run with instead of config/stack.yaml's (e.g. shorter intervals)."""
    state = short_state_dir(prefix)
    env = {**stack_port_env(), "LEAKWATCH_STATE_DIR": str(state)}
    with environ(env):
        stack = NativeStack(settings=settings)
        try:
            stack.up(model, out=io.StringIO(), **up_kwargs)
            yield RunningStack(stack, env)
        finally:
            stack.down(out=io.StringIO())
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def native_stack():
    """The shared real stack for tests that only read from it or send ordinary traffic."""
    with running_native_stack("lw-session-") as running:
        yield running


@pytest.fixture(scope="session")
def metric_catalogue(native_stack) -> set[str]:
    """Every metric name the real exporters emit: a live scrape of each target of the running stack
    (after some traffic, so per-request series exist) plus DCGM's default list (no GPU here) and the
    load generator's contract."""
    import requests

    from leakwatch.catalogue import dcgm_metrics, loadgen_metrics, sample_names, scrape_names
    from leakwatch.topology import LOADGEN_JOB

    for i in range(3):
        requests.post(
            f"{native_stack.vllm_url}/v1/completions",
            timeout=60,
            json={"model": native_stack.model, "prompt": f"catalogue {i}", "max_tokens": 8},
        )
    names: set[str] = set()
    for target in native_stack.prometheus.targets():
        # A finished load test's target lingers in Prometheus until file_sd rereads its folder.
        if target["labels"].get("job") != LOADGEN_JOB:
            names |= scrape_names(target["scrapeUrl"])
    # The load generator's metrics exist only while a load test runs; tests/loadgen checks the
    # exporter against its CSV, so the CSV stands for them here.
    return names | set(dcgm_metrics()) | sample_names(loadgen_metrics())


@pytest.fixture(scope="session")
def docker_engine():
    """A Docker engine for the compose tests: one answering at $DOCKER_HOST, or a private dockerd
    (installed from Debian when missing) stopped at the end. Skipped, with the reason in pytest's
    summary, where neither is possible (not root)."""
    from .compose_support import compose_binary
    from .docker_engine import EngineUnavailable, start, stop

    try:
        engine = start(compose_binary())
    except EngineUnavailable as exc:
        pytest.skip(f"no Docker engine for the compose tests: {exc}")
    try:
        yield engine
    finally:
        stop(engine)


# tryfirst: xdist names each test after its group in its own hook, which must see ours.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Tests that need the shared stack quiet run first, storms that saturate it run last; the rest
    keep their order (the sort is stable). Under xdist (`make test`: -n 2 --dist loadgroup) every stack
    test goes to one worker, in this order, so the session's native stack starts once and no two vLLMs
    compete for the cores; the other worker runs the unit and integration tiers meanwhile."""

    def rank(item) -> int:
        return 0 if item.get_closest_marker("quiet_stack") else 2 if item.get_closest_marker("storm") else 1

    items.sort(key=rank)
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue  # a module with a stack of its own (its own group) runs beside the shared one
        if item.get_closest_marker("stack") or {"native_stack", "metric_catalogue"} & set(item.fixturenames):
            item.add_marker(pytest.mark.xdist_group("native_stack"))


# --- Test tiers --------------------------------------------------------------------------------------
# `make test-fast` runs `-m "not stack and not integration"`: no test there may start another program.
# An audit hook enforces it, so a new test that starts promtool, Locust, Chromium or a server without
# its module's `pytestmark = pytest.mark.integration` fails with a message saying so.
_SPAWN_EVENTS = {"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"}
_running: list[pytest.Item] = []


def _tier_audit(event: str, args: tuple) -> None:
    if event not in _SPAWN_EVENTS or not _running:
        return
    item = _running[-1]
    if item.get_closest_marker("integration") or item.get_closest_marker("stack"):
        return
    program = args[1] if event == "subprocess.Popen" else args[0] if args else "?"
    raise RuntimeError(
        f"{item.nodeid} starts another program ({event}: {program!r}), so it belongs to the integration tier: "
        "add `pytestmark = pytest.mark.integration` to its module (see [tool.pytest.ini_options] markers)"
    )


sys.addaudithook(_tier_audit)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()
