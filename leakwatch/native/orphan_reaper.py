"""Runs a command so that none of its processes outlives it: `python -m leakwatch.native.orphan_reaper -- CMD ...`.

vLLM's API server starts EngineCore, which starts the workers. When the API server dies without
stopping them (kill -9, the OOM killer picking it), they are orphaned: they keep their memory (on a
GPU, their VRAM), no exporter sees them (they are no longer under the process on vLLM's port), and
supervisord starts a new API server beside them. Measured on the native stack before this launcher:
after kill -9 of the API server, the old EngineCore and worker (~2 GB of anonymous memory with the
demo model's 1 GiB KV cache) were still running 120 s after the new vLLM served.

The native runner starts vLLM under this launcher. It marks itself a child subreaper, so orphans of
the command become its children instead of init's; runs the command; and when the command exits,
stops every process left under it (SIGTERM, then SIGKILL after a grace period) and exits with the
command's status, so supervisord sees the same exit and restarts the program as before.

It forwards no signal: supervisord stops the program by signalling its whole process group
(stopasgroup), which the command's processes share with the launcher, so vLLM gets each signal
once, as without the launcher (a second SIGTERM would cut uvicorn's graceful drain short). On a
system without PR_SET_CHILD_SUBREAPER (not Linux) orphans are not found; only the command's own
descendants are stopped. (Containers need none of this: the container's init dying ends the rest.)
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

import psutil

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
# Its own title: with the command's line as its own, every `ps | grep vllm.entrypoints` (ours: the
# drill, the tests) would count the launcher as a second API server.
TITLE = "leakwatch-orphan-reaper"
GRACE_S = 10.0  # after the command exited, how long its leftovers get to stop on SIGTERM
USAGE = "usage: python -m leakwatch.native.orphan_reaper -- COMMAND [ARG ...]"


def set_title(command: list[str]) -> None:
    try:
        import setproctitle  # vLLM's own dependency (its VLLM::EngineCore titles)
    except ImportError:
        return
    setproctitle.setproctitle(f"{TITLE} {command[0]}")


def become_subreaper() -> bool:
    """Orphaned descendants reparent to this process instead of init (Linux 3.4+)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def terminate_then_kill(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM to each, SIGKILL to those still running after grace_s; returns once they are gone."""
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


def stop_leftovers(grace_s: float = GRACE_S) -> list[int]:
    """Stops every process still under this one; returns their pids."""
    left = psutil.Process().children(recursive=True)
    terminate_then_kill(left, grace_s)
    return [proc.pid for proc in left]


def exit_status(returncode: int) -> int:
    """The shell's convention: a command killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    become_subreaper()
    set_title(argv[1:])
    # A handler, not SIG_IGN: the command must start with the default dispositions (exec resets
    # handlers but keeps ignored signals ignored).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    try:
        command = subprocess.Popen(argv[1:])
    except OSError as exc:
        print(f"orphan_reaper: cannot run {argv[1]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    returncode = command.wait()
    left = stop_leftovers()
    if left:
        print(
            f"orphan_reaper: {argv[1]} exited with status {exit_status(returncode)}; stopped the "
            f"{len(left)} process(es) it left behind: {left}",
            file=sys.stderr,
            flush=True,
        )
    return exit_status(returncode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
