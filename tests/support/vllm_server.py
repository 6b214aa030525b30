"""One vLLM OpenAI server as a plain child process: free port, wait for /health, stop the whole group.

For tools and tests that need a server of their own outside the stack (the GPU KV check, the
converted-model test); the stack itself runs vLLM under supervisord or compose.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from leakwatch.core.errors import LeakwatchError
from leakwatch.core.ports import free_port
from leakwatch.core.settings import ready_path


@contextlib.contextmanager
def running(
    engine_args: list[str], log: Path, env: dict[str, str] | None = None, ready_timeout_s: float = 600
) -> Iterator[str]:
    """Starts `python -m vllm.entrypoints.openai.api_server ENGINE_ARGS` on 127.0.0.1 and yields its URL."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *engine_args,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with open(log, "w") as out:
        # Its own process group, so EngineCore and the workers stop with it.
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not _healthy(url):
            if proc.poll() is not None:
                raise LeakwatchError(f"vLLM exited with {proc.returncode}; the end of {log}:\n" + _tail(log))
            if time.monotonic() > deadline:
                raise LeakwatchError(
                    f"vLLM not healthy after {ready_timeout_s:.0f} s; the end of {log}:\n" + _tail(log)
                )
            time.sleep(1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}{ready_path('vllm')}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _tail(log: Path, lines: int = 25) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
