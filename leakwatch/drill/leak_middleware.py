"""A known leak for a real vLLM server: keeps a fixed amount of memory per API request, forever.

Load it with vLLM's own option, then every matching request leaks LEAKWATCH_LEAK_BYTES_PER_REQUEST:

    python -m vllm.entrypoints.openai.api_server ... \\
        --middleware leakwatch.drill.leak_middleware.leak_memory
    LEAKWATCH_LEAK_BYTES_PER_REQUEST=2097152   # bytes kept per request (0 or unset: no leak)
    LEAKWATCH_LEAK_DEVICE=auto                 # auto (CUDA when available, else host) | cpu | cuda
    LEAKWATCH_LEAK_PATH_PREFIX=/v1/            # which request paths leak
    LEAKWATCH_LEAK_MODE=keep                   # keep (the leak) | release | off

A request can pick another mode with the header `X-Leakwatch-Leak-Mode`. `release` allocates the same
memory for as long as the request runs and frees it afterwards: the non-leaking control for a drill,
with the same allocation pattern and traffic as the leak but nothing held afterwards.

It runs in vLLM's API server process. On the host it keeps a block of written (so resident) memory;
on a CUDA host it keeps CUDA memory instead, which the GPU-side rules and `leakwatch exporter`'s
per-process GPU figure must catch. The blocks are held in a module-level list until the process
exits: exactly the shape of a real leak.
"""

from __future__ import annotations

import mmap
import os

BYTES_ENV = "LEAKWATCH_LEAK_BYTES_PER_REQUEST"
DEVICE_ENV = "LEAKWATCH_LEAK_DEVICE"
PREFIX_ENV = "LEAKWATCH_LEAK_PATH_PREFIX"
MODE_ENV = "LEAKWATCH_LEAK_MODE"
MODE_HEADER = "x-leakwatch-leak-mode"
DEVICES = ("auto", "cpu", "cuda")
MODES = ("keep", "release", "off")

_kept: list = []


def _setting(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def bytes_per_request() -> int:
    raw = _setting(BYTES_ENV, "0")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{BYTES_ENV}={raw!r} is not a whole number of bytes") from None
    if value < 0:
        raise ValueError(f"{BYTES_ENV}={value} must be >= 0")
    return value


def device() -> str:
    choice = _setting(DEVICE_ENV, "auto").lower()
    if choice not in DEVICES:
        raise ValueError(f"{DEVICE_ENV}={choice!r} is not one of {', '.join(DEVICES)}")
    if choice == "auto":
        import torch  # vLLM's own dependency, already loaded in its API server

        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


def mode(value: str | None = None) -> str:
    choice = (value if value is not None else _setting(MODE_ENV, "keep")).strip().lower()
    if choice not in MODES:
        raise ValueError(f"leak mode {choice!r} is not one of {', '.join(MODES)}")
    return choice


# Read once when vLLM imports the middleware: a bad value stops the server at start-up, not mid-run.
_BYTES = bytes_per_request()
_PREFIX = _setting(PREFIX_ENV, "/v1/")
_DEVICE = device() if _BYTES else "cpu"
_MODE = mode()


def leaked_bytes() -> int:
    """What this process has leaked so far (for drills that run in the same process)."""
    return len(_kept) * _BYTES


PAGE = mmap.PAGESIZE


class _HostBlock:
    """Anonymous memory mapped for this block alone: resident once written, back to the kernel the
    moment it is closed. (malloc'd memory would stay in the allocator's free lists after release and
    blur the control run; the leak itself behaves the same either way.)"""

    def __init__(self, size: int):
        self._map = mmap.mmap(-1, size)
        for offset in range(0, size, PAGE):  # touch every page: resident, not lazily mapped zeros
            self._map[offset] = 1

    def release(self) -> None:
        self._map.close()


class _CudaBlock:
    def __init__(self, size: int):
        import torch  # vLLM's own dependency, already loaded in its API server

        self._tensor = torch.ones(size, dtype=torch.uint8, device="cuda")

    def release(self) -> None:
        import torch

        self._tensor = None
        torch.cuda.empty_cache()  # hand the block back to the driver, so NVML sees it go


def _allocate():
    return _CudaBlock(_BYTES) if _DEVICE == "cuda" else _HostBlock(_BYTES)


async def leak_memory(request, call_next):
    """ASGI http middleware (FastAPI's `app.middleware("http")` form, which vLLM's --middleware takes)."""
    if not _BYTES or not request.url.path.startswith(_PREFIX):
        return await call_next(request)
    try:
        chosen = mode(request.headers.get(MODE_HEADER, _MODE))
    except ValueError as exc:
        from starlette.responses import PlainTextResponse

        return PlainTextResponse(str(exc), status_code=400)
    if chosen == "off":
        return await call_next(request)
    block = _allocate()
    try:
        return await call_next(request)
    finally:
        if chosen == "keep":
            _kept.append(block)
        else:  # for a non-streaming response the whole request has run by now
            block.release()
