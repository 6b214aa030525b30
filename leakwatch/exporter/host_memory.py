"""Host memory of the vLLM processes, summed per role and rank.

RSS, its anonymous part and swap come from /proc/<pid>/status (cheap). The leak measure is anonymous
memory (RssAnon + RssShmem) plus swap: resident file pages (shared libraries, mmapped weights) are
dropped by the kernel under memory pressure and faulted back in by the next requests, which looks
like growth per request on a host short of memory while nothing leaks.

USS and PSS need /proc/<pid>/smaps_rollup, for which the kernel walks every page table of the
process: on vLLM's multi-GB workers that is the expensive part of a scrape, so those two are re-read
at most every `smaps_interval_s` per process and served from that cache in between (0 reads them on
every scrape).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .process_tree import VllmTree
from .procfs import ProcessGone, ProcFS, Smaps

RoleRank = tuple[str, str]


@dataclass
class HostReading:
    rss: dict[RoleRank, int] = field(default_factory=dict)
    anonymous: dict[RoleRank, int] = field(default_factory=dict)
    swap: dict[RoleRank, int] = field(default_factory=dict)
    uss: dict[RoleRank, int] = field(default_factory=dict)
    pss: dict[RoleRank, int] = field(default_factory=dict)

    def anonymous_plus_swap_by_role(self) -> dict[str, int]:
        """Anonymous memory + swap per role: the leak measure, so pages pushed to swap still count
        and file pages the kernel drops and reads back do not."""
        totals: dict[str, int] = {}
        for key, anonymous in self.anonymous.items():
            if key in self.swap:
                totals[key[0]] = totals.get(key[0], 0) + anonymous + self.swap[key]
        return totals


def anonymous_bytes(status: dict[str, int]) -> int:
    """RssAnon + RssShmem: resident memory only swap can free (shared memory counts: a leaked
    /dev/shm segment is a leak). Kernels before 4.5 lack the split: all of VmRSS then."""
    if "RssAnon" not in status:
        return status.get("VmRSS", 0)
    return status["RssAnon"] + status.get("RssShmem", 0)


class HostMemory:
    def __init__(self, procfs: ProcFS, smaps_interval_s: float = 60.0, clock: Callable[[], float] = time.time):
        self.procfs = procfs
        self.smaps_interval_s = smaps_interval_s
        self.clock = clock
        # (pid, starttime) -> (read at, values); starttime keeps a reused pid from inheriting old values.
        self._smaps: dict[tuple[int, int], tuple[float, Smaps]] = {}

    def _smaps_of(self, pid: int, starttime: int) -> Smaps:
        now = self.clock()
        cached = self._smaps.get((pid, starttime))
        if cached and now - cached[0] < self.smaps_interval_s:
            return cached[1]
        values = self.procfs.smaps_rollup(pid)
        self._smaps[(pid, starttime)] = (now, values)
        return values

    def read(self, tree: VllmTree, on_error: Callable[[Exception], None]) -> HostReading:
        """Sums per (role, rank). A role with a failed read loses that metric for this scrape (a
        partial sum would look like a drop); a process that exited meanwhile is simply left out."""
        reading = HostReading()
        failed: dict[str, set[RoleRank]] = {"status": set(), "smaps": set()}
        live = set()
        for proc in tree.processes:
            key = (proc.role, proc.rank)
            try:
                status = self.procfs.status(proc.pid)
            except ProcessGone:
                continue
            except (OSError, ValueError, IndexError) as exc:
                failed["status"].add(key)
                on_error(exc)
                continue
            live.add((proc.pid, proc.starttime))
            # Kernel threads and zombies have no VmRSS line: they hold no user memory.
            reading.rss[key] = reading.rss.get(key, 0) + status.get("VmRSS", 0)
            reading.anonymous[key] = reading.anonymous.get(key, 0) + anonymous_bytes(status)
            reading.swap[key] = reading.swap.get(key, 0) + status.get("VmSwap", 0)
            try:
                smaps = self._smaps_of(proc.pid, proc.starttime)
            except ProcessGone:
                continue
            except (OSError, ValueError) as exc:
                failed["smaps"].add(key)
                on_error(exc)
                continue
            reading.uss[key] = reading.uss.get(key, 0) + smaps.uss
            reading.pss[key] = reading.pss.get(key, 0) + smaps.pss
        for key in failed["status"]:
            for values in (reading.rss, reading.anonymous, reading.swap, reading.uss, reading.pss):
                values.pop(key, None)
        for key in failed["smaps"]:
            reading.uss.pop(key, None)
            reading.pss.pop(key, None)
        self._smaps = {k: v for k, v in self._smaps.items() if k in live}
        return reading
