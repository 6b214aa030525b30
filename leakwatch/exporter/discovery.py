"""Finds the vLLM process tree and labels each process with its role and rank.

The API server is the process listening on vLLM's port (read through each candidate's own network
namespace, so this works from another container that shares vLLM's PID namespace). Everything below it
is vLLM's: setproctitle names them `VLLM::EngineCore`, `VLLM::EngineCore_DP<n>`, `VLLM::Worker`,
`VLLM::Worker_TP<n>` (or `_DP<d>_PP<p>_TP<t>` and so on with more parallelism), `VLLM::APIServer_<n>`
(--api-server-count > 1) and `VLLM::DPCoordinator` (vllm/utils/system_utils.py: set_process_title;
vllm/v1/executor/multiproc_executor.py: setup_proc_title_and_log_prefix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .procfs import ProcessGone, ProcFS

ROLES = ("api_server", "engine_core", "worker", "other")
DEFAULT_TITLE_PREFIX = "VLLM"  # vLLM's VLLM_PROCESS_NAME_PREFIX

_WORKER = re.compile(r"^Worker(?:[_-](?P<suffix>\S+))?$")
_SINGLE_RANK = re.compile(r"^(?:TP)?(?P<rank>\d+)$")


@dataclass(frozen=True)
class VllmProcess:
    pid: int
    role: str
    rank: str  # the worker's rank; "" for the other roles
    starttime: int


@dataclass(frozen=True)
class VllmTree:
    root_pid: int
    root_starttime: int
    processes: tuple[VllmProcess, ...]

    @property
    def identity(self) -> tuple[int, int]:
        """Changes when vLLM restarts (a new API server process), even if the pid is reused."""
        return (self.root_pid, self.root_starttime)

    def count(self, role: str) -> int:
        return sum(1 for p in self.processes if p.role == role)


def classify(title: str, prefix: str = DEFAULT_TITLE_PREFIX) -> tuple[str, str]:
    """(role, rank) of a process below the API server, from its title."""
    head = title.split(" ", 1)[0]
    if not head.startswith(f"{prefix}::"):
        return "other", ""  # e.g. multiprocessing's resource tracker
    name = head[len(prefix) + 2:]
    if name.startswith("EngineCore"):
        return "engine_core", ""
    if name.startswith("APIServer"):
        return "api_server", ""
    match = _WORKER.match(name)
    if match:
        suffix = match.group("suffix") or "0"
        # A single dimension (Worker_TP3, Worker-3) becomes "3"; combined ones keep their parts
        # (DP0_PP1_TP2) so each rank stays distinct. Bounded by the number of workers.
        single = _SINGLE_RANK.match(suffix)
        return "worker", single.group("rank") if single else suffix
    return "other", ""


class Discovery:
    def __init__(self, procfs: ProcFS, port: int, title_prefix: str = DEFAULT_TITLE_PREFIX):
        self.procfs = procfs
        self.port = port
        self.title_prefix = title_prefix
        self._root: tuple[int, int] | None = None

    def _is_candidate(self, pid: int) -> bool:
        title = self.procfs.title(pid)
        return "vllm" in title.lower() or title.startswith(f"{self.title_prefix}::")

    def _find_root(self, stats: dict[int, int]) -> int | None:
        """The process listening on vLLM's port whose parent is not listening on it too."""
        listeners = set()
        for pid in stats:
            try:
                if not self._is_candidate(pid):
                    continue
                inodes = self.procfs.listening_inodes(pid, self.port)
                if inodes and inodes & self.procfs.socket_inodes(pid):
                    listeners.add(pid)
            except (ProcessGone, PermissionError):
                continue  # another user's process or one that just exited: not ours to read
        roots = [pid for pid in listeners if stats[pid] not in listeners]
        return min(roots) if roots else None

    def find(self) -> VllmTree | None:
        """The current tree, or None when no vLLM API server listens on the port."""
        stats: dict[int, int] = {}
        starts: dict[int, int] = {}
        for pid in self.procfs.pids():
            try:
                stat = self.procfs.stat(pid)
            except ProcessGone:
                continue
            stats[pid] = stat.ppid
            starts[pid] = stat.starttime
        # The listener search reads every candidate's sockets: only when the known root is gone.
        if self._root is None or starts.get(self._root[0]) != self._root[1]:
            root = self._find_root(stats)
            self._root = (root, starts[root]) if root is not None else None
        if self._root is None:
            return None
        root_pid = self._root[0]
        children: dict[int, list[int]] = {}
        for pid, ppid in stats.items():
            children.setdefault(ppid, []).append(pid)
        processes = [VllmProcess(root_pid, "api_server", "", self._root[1])]
        pending = list(children.get(root_pid, ()))
        while pending:
            pid = pending.pop()
            try:
                role, rank = classify(self.procfs.title(pid), self.title_prefix)
            except ProcessGone:
                continue
            processes.append(VllmProcess(pid, role, rank, starts[pid]))
            pending.extend(children.get(pid, ()))
        return VllmTree(root_pid, self._root[1], tuple(sorted(processes, key=lambda p: p.pid)))
