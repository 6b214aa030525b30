"""The real native stack for tests (vLLM CPU, Prometheus, Alertmanager, node exporter, exporter) on free
ports in a private state directory, and the rule that keeps the stack tiers landing on a 2-core
machine: at most one vLLM process tree at any moment of a run.

- `running_native_stack` starts a stack for a module (or the shared one) and refuses to start while
  any vLLM API server is alive on this machine, naming it.
- `SHARED` is the stack that the tests reading from an ordinary stack share: started by the first
  test that asks for it, stopped by tests/conftest.py after the last one (so a module's own stack
  never runs beside it). Its vLLM carries the drill's leak middleware, inert: a request leaks only
  when it asks to with the `X-Leakwatch-Leak-Mode` header (SHARED_LEAK_BYTES per /v1/completions
  request), so the exporter's leak test needs no vLLM of its own."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from leakwatch.core.ports import free_port
from leakwatch.core.promapi import Prometheus
from leakwatch.core.settings import load as load_settings
from leakwatch.core.state_layout import StateLayout
from leakwatch.drill import leak_middleware
from leakwatch.native.runner import NativeStack
from tests.support import vllm_tree

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

# What the shared vLLM keeps per /v1/completions request sent with `X-Leakwatch-Leak-Mode: keep` (and
# holds for the request's duration with `release`). 8 MiB, not 2: what a loaded 2-core host adds to a
# role's memory over a burst (up to ~160 kB/request seen) stays a small share of it.
SHARED_LEAK_BYTES = 8 << 20
SHARED_STACK_VLLM = {
    "vllm_extra_args": ["--middleware", "leakwatch.drill.leak_middleware.leak_memory"],
    "vllm_extra_env": {
        leak_middleware.BYTES_ENV: str(SHARED_LEAK_BYTES),
        leak_middleware.MODE_ENV: "off",  # inert unless a request asks
        leak_middleware.PREFIX_ENV: "/v1/completions",
    },
}


def stack_port_env() -> dict[str, str]:
    """A free port for every service, so test stacks never collide with a user's `make up`."""
    return {svc.port_env: str(free_port()) for svc in load_settings().services.values()}


_state_dirs: list[Path] = []


def short_state_dir(prefix: str) -> Path:
    # supervisord's unix socket path must stay under ~100 characters: keep it in /tmp. Removed at the end
    # of the session (remove_state_dirs, from pytest_sessionfinish), whoever made it, so a run leaves no
    # /tmp/lw-* behind.
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    _state_dirs.append(path)
    return path


def remove_state_dirs() -> None:
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


# --- One vLLM at a time -------------------------------------------------------------------------------


def vllm_api_servers() -> list[psutil.Process]:
    """Every vLLM API server on this machine, native or in a container (the host sees their processes)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if vllm_tree.is_api_server(proc):
                found.append(proc)
    return found


def describe(procs: list[psutil.Process]) -> str:
    return "; ".join(f"pid {p.pid}: {vllm_tree.command_line(p)[:160]}" for p in procs)


def assert_no_vllm_running(starting: str) -> None:
    """Fails the test before `starting` brings up a vLLM while another one runs: two vLLMs on two cores
    starve each other's scrapes and bursts, the way three of four CI runs failed before this rule."""
    running = vllm_api_servers()
    if running:
        pytest.fail(
            f"{starting} would start a second vLLM while one is running ({describe(running)}); the stack "
            "tiers run one vLLM at a time: stop the module's stack (or the shared one) first",
            pytrace=False,
        )


# --- Stacks -------------------------------------------------------------------------------------------


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
    assert_no_vllm_running(f"the stack {prefix!r}")
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


class SharedStack:
    """The stack shared by every test that only reads from it or sends ordinary traffic. Tests ask for
    it through the `native_stack` fixture; tests/conftest.py orders them together and calls release()
    after the last one, before any module starts a stack of its own."""

    def __init__(self):
        self._context: contextlib.AbstractContextManager | None = None
        self.running: RunningStack | None = None
        self.cache: dict[str, object] = {}  # facts read once per running stack (the metric catalogue)
        self.failed: str | None = None  # why the start failed: every later module fails at once with it

    def acquire(self) -> RunningStack:
        if self.failed:
            pytest.fail(f"the shared stack failed to start earlier in this run: {self.failed}", pytrace=False)
        if self.running is None:
            context = running_native_stack("lw-session-", **SHARED_STACK_VLLM)
            try:
                self.running = context.__enter__()
            except BaseException as exc:
                self.failed = f"{type(exc).__name__}: {exc}"[:2000]
                raise
            self._context = context
        return self.running

    def release(self) -> None:
        context, self._context, self.running = self._context, None, None
        self.cache.clear()
        if context is not None:
            context.__exit__(None, None, None)


SHARED = SharedStack()
