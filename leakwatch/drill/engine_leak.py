"""A known leak inside vLLM's EngineCore or worker process, where --middleware cannot reach (it runs in
the API server): a vLLM general plugin that keeps a fixed block of host memory per request, in the
process role the request asks for.

vLLM loads `vllm.general_plugins` entry points in every process it starts, EngineCore included
(vllm/v1/engine/core.py calls load_general_plugins()). leakwatch does not declare the entry point in
its own package metadata, so no production vLLM ever loads this: `plugin_dir()` writes a tiny
distribution (a .dist-info with the entry point) that a drill or test puts on vLLM's PYTHONPATH:

    LEAKWATCH_ENGINE_LEAK_BYTES_PER_REQUEST=1048576   # bytes kept per marked request (0: no leak)
    PYTHONPATH=<plugin_dir()>

Only requests carrying `"vllm_xargs": {"leakwatch_leak": "<role>"}` leak, in that role alone:
`engine_core` keeps the block when EngineCore adds the request (EngineCore.add_request), `worker`
when a worker first schedules it (WorkerWrapperBase.execute_model, the new requests of the step). One
stack can so serve leaking and clean traffic side by side, as the middleware's path prefix does for
the API server.
"""

from __future__ import annotations

import os
from pathlib import Path

BYTES_ENV = "LEAKWATCH_ENGINE_LEAK_BYTES_PER_REQUEST"
MARKER = "leakwatch_leak"
ROLES = ("engine_core", "worker")
ENTRY_POINT = f"leakwatch_engine_leak = {__name__}:register"
DIST = "leakwatch_engine_leak-0.0.dist-info"

_kept: list = []


def bytes_per_request() -> int:
    raw = os.environ.get(BYTES_ENV, "").strip() or "0"
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{BYTES_ENV}={raw!r} is not a whole number of bytes") from None
    if value < 0:
        raise ValueError(f"{BYTES_ENV}={value} must be >= 0")
    return value


def plugin_dir(parent: Path) -> Path:
    """A folder holding the plugin's distribution metadata; put it on vLLM's PYTHONPATH."""
    root = Path(parent) / "leakwatch-engine-leak"
    info = root / DIST
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: leakwatch-engine-leak\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{ENTRY_POINT}\n")
    return root


def pythonpath(parent: Path) -> str:
    """PYTHONPATH for vLLM with the plugin first, keeping whatever was there."""
    return os.pathsep.join(p for p in (str(plugin_dir(parent)), os.environ.get("PYTHONPATH", "")) if p)


def marked(request, role: str) -> bool:
    """Whether a request (EngineCore's Request, or a worker's NewRequestData) asks to leak in `role`."""
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) or {}
    return extra.get(MARKER) == role


def register() -> None:
    """The plugin: patch EngineCore.add_request and WorkerWrapperBase.execute_model to keep the
    block. vLLM calls this in every process; each method only runs in its own role's process, so
    the other processes' copies of the patch stay idle."""
    size = bytes_per_request()  # a bad value stops vLLM at start-up, not mid-run
    if not size:
        return
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    from .leak_middleware import _HostBlock

    def keep() -> None:
        _kept.append(_HostBlock(size))

    if not getattr(EngineCore.add_request, "_leakwatch_leak", False):  # plugins may load twice
        add_original = EngineCore.add_request

        def add_request(self, request, *args, **kwargs):
            if marked(request, "engine_core"):
                keep()
            return add_original(self, request, *args, **kwargs)

        add_request._leakwatch_leak = True
        EngineCore.add_request = add_request

    if not getattr(WorkerWrapperBase.execute_model, "_leakwatch_leak", False):
        execute_original = WorkerWrapperBase.execute_model

        def execute_model(self, scheduler_output, *args, **kwargs):
            for new in getattr(scheduler_output, "scheduled_new_reqs", None) or ():
                if marked(new, "worker"):
                    keep()
            return execute_original(self, scheduler_output, *args, **kwargs)

        execute_model._leakwatch_leak = True
        WorkerWrapperBase.execute_model = execute_model
