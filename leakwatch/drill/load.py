"""A bounded CPU hog beside the stack, for the loaded drill (`make bench-drill LOAD=1`): the figures
must stay honest when the machine is busy (same verdicts, the alert attributed to the leak, the
recovery time explained by its phases).

Each hog is a separate process that spins on one core and exits by itself after `max_s`, so an
interrupted drill cannot leave a busy loop behind; `stop()` ends them earlier.
"""

from __future__ import annotations

import multiprocessing
import os
import time


def _spin(until: float) -> None:
    x = 0
    while time.time() < until:
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


class CpuHog:
    def __init__(self, processes: int, max_s: float):
        if processes < 0:
            raise ValueError(f"CPU hog processes must be >= 0, not {processes}")
        if not max_s > 0:
            raise ValueError(f"CPU hog duration must be positive, not {max_s}")
        self.processes = processes
        self.max_s = max_s
        self._procs: list[multiprocessing.Process] = []

    def start(self) -> CpuHog:
        ctx = multiprocessing.get_context("spawn")  # no copy of the drill's threads and sockets
        until = time.time() + self.max_s
        for _ in range(self.processes):
            proc = ctx.Process(target=_spin, args=(until,), daemon=True, name="leakwatch-cpu-hog")
            proc.start()
            self._procs.append(proc)
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.pid is not None]

    def stop(self) -> None:
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(timeout=10)
        self._procs = []

    def __enter__(self) -> CpuHog:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def load_average() -> float:
    return os.getloadavg()[0]
