"""The EngineCore leak injector: vLLM's own plugin loader finds it only on the PYTHONPATH a drill or
test gives vLLM, it leaks only for marked requests, and a bad size stops vLLM at start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from leakwatch.drill import engine_leak

# Starts Prometheus, promtool or vLLM's plugin loader in other processes.
# importing vLLM in a subprocess, which costs a minute on a loaded machine; the live stack test
# tests/soak/test_leak_verdicts_live.py proves vLLM's EngineCore loads it).
PROBE = (
    "import json; from importlib.metadata import entry_points; "
    "print(json.dumps(sorted(e.value for e in entry_points(group='vllm.general_plugins'))))"
)


def plugins_seen(env_extra: dict) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_vllm_finds_the_plugin_only_on_the_given_path(tmp_path):
    target = f"{engine_leak.__name__}:register"
    assert target in plugins_seen({"PYTHONPATH": engine_leak.pythonpath(tmp_path)})
    # leakwatch's own metadata declares no entry point: a production vLLM never loads the injector.
    assert target not in plugins_seen({})


def test_a_bad_size_stops_vllm_at_start_up(monkeypatch):
    monkeypatch.setenv(engine_leak.BYTES_ENV, "lots")
    with pytest.raises(ValueError, match="is not a whole number of bytes"):
        engine_leak.register()
    monkeypatch.setenv(engine_leak.BYTES_ENV, "-1")
    with pytest.raises(ValueError, match="must be >= 0"):
        engine_leak.register()


class Params:
    def __init__(self, extra):
        self.extra_args = extra


class Request:
    def __init__(self, extra):
        self.sampling_params = Params(extra)


def test_only_requests_marked_for_the_role_leak_there(monkeypatch):
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    calls = []
    monkeypatch.setattr(EngineCore, "add_request", lambda self, request, *a, **k: calls.append(request))
    monkeypatch.setattr(WorkerWrapperBase, "execute_model", lambda self, out, *a, **k: calls.append(out))
    monkeypatch.setenv(engine_leak.BYTES_ENV, "8192")
    monkeypatch.setattr(engine_leak, "_kept", [])
    engine_leak.register()

    core = object.__new__(EngineCore)
    for extra in ({engine_leak.MARKER: "engine_core"}, None, {"other": 1}, {engine_leak.MARKER: "worker"}):
        EngineCore.add_request(core, Request(extra))
    assert len(calls) == 4  # every request still reaches vLLM's own add_request
    assert len(engine_leak._kept) == 1  # only the one marked for the engine core kept its block

    class Step:
        # a scheduler step with two new requests, one marked for the worker
        scheduled_new_reqs = [  # noqa: RUF012 - a read-only stand-in of vLLM's scheduler output
            Request({engine_leak.MARKER: "worker"}),
            Request({engine_leak.MARKER: "engine_core"}),
        ]

    worker = object.__new__(WorkerWrapperBase)
    WorkerWrapperBase.execute_model(worker, Step())
    assert len(engine_leak._kept) == 2 and len(calls) == 5
    engine_leak.register()  # a second load in the same process does not wrap twice
    EngineCore.add_request(core, Request({engine_leak.MARKER: "engine_core"}))
    assert len(engine_leak._kept) == 3


def test_no_size_is_no_patch(monkeypatch):
    from vllm.v1.engine.core import EngineCore

    before = EngineCore.add_request
    monkeypatch.delenv(engine_leak.BYTES_ENV, raising=False)
    engine_leak.register()
    assert EngineCore.add_request is before
