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
import time
from collections.abc import Callable
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
    name = head[len(prefix) + 2 :]
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
    def __init__(
        self,
        procfs: ProcFS,
        port: int,
        title_prefix: str = DEFAULT_TITLE_PREFIX,
        retry_s: float = 2.0,
        rescan_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.procfs = procfs
        self.port = port
        self.title_prefix = title_prefix
        self.retry_s = retry_s  # while vLLM is down, look for it at most this often
        self.rescan_s = rescan_s
        self.clock = clock
        self._tree: VllmTree | None = None
        self._next_search = float("-inf")
        self._next_rescan = float("-inf")

    def _is_candidate(self, pid: int) -> bool:
        """Could be vLLM's API server: mentions vLLM, but is none of the titled children (EngineCore,
        workers; with --api-server-count > 1 the untitled launcher above them holds the socket)."""
        title = self.procfs.title(pid)
        return "vllm" in title.lower() and not title.startswith(f"{self.title_prefix}::")

    def _find_root(self, parents: dict[int, int]) -> int | None:
        """The process listening on vLLM's port whose parent is not listening on it too."""
        listeners = set()
        inodes_by_netns: dict[str, set[str]] = {}  # processes in one network namespace share sockets
        for pid in parents:
            try:
                netns = self.procfs.netns(pid)
                if netns not in inodes_by_netns:
                    inodes_by_netns[netns] = self.procfs.listening_inodes(pid, self.port)
                inodes = inodes_by_netns[netns]
                # Cheapest test first: most processes live where nothing listens on the port.
                if inodes and self._is_candidate(pid) and inodes & self.procfs.socket_inodes(pid):
                    listeners.add(pid)
            except (ProcessGone, PermissionError):
                continue  # another user's process or one that just exited: not ours to read
        roots = [pid for pid in listeners if parents[pid] not in listeners]
        return min(roots) if roots else None

    def _alive(self, pid: int, starttime: int) -> bool:
        try:
            return self.procfs.stat(pid).starttime == starttime
        except ProcessGone:
            return False

    def _scan(self) -> tuple[dict[int, int], dict[int, int]]:
        """pid -> ppid and pid -> start time for every process: the one full walk of /proc."""
        parents: dict[int, int] = {}
        starts: dict[int, int] = {}
        for pid in self.procfs.pids():
            try:
                stat = self.procfs.stat(pid)
            except ProcessGone:
                continue
            parents[pid] = stat.ppid
            starts[pid] = stat.starttime
        return parents, starts

    def find(self) -> VllmTree | None:
        """The current tree, or None when no vLLM API server listens on the port.

        A full walk of /proc costs ~0.1 ms per process on the host, so a known tree is only checked
        (each member still alive) and walked again every rescan_s to pick up new children; a new API
        server (restart) is searched for at once."""
        now = self.clock()
        tree = self._tree
        if tree is not None and self._alive(tree.root_pid, tree.root_starttime):
            if now < self._next_rescan:
                members = tuple(p for p in tree.processes if self._alive(p.pid, p.starttime))
                self._tree = VllmTree(tree.root_pid, tree.root_starttime, members)
                return self._tree
            parents, starts = self._scan()
            root = (tree.root_pid, tree.root_starttime)
        else:
            if tree is None and now < self._next_search:
                return None  # vLLM is down: look again after retry_s
            parents, starts = self._scan()
            pid = self._find_root(parents)
            self._next_search = now + self.retry_s
            if pid is None:
                self._tree = None
                return None
            root = (pid, starts[pid])
        self._tree = self._walk(root, parents, starts)
        self._next_rescan = now + self.rescan_s
        return self._tree

    def _walk(self, root: tuple[int, int], parents: dict[int, int], starts: dict[int, int]) -> VllmTree:
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        processes = [VllmProcess(root[0], "api_server", "", root[1])]
        pending = list(children.get(root[0], ()))
        while pending:
            pid = pending.pop()
            try:
                role, rank = classify(self.procfs.title(pid), self.title_prefix)
            except ProcessGone:
                continue
            processes.append(VllmProcess(pid, role, rank, starts[pid]))
            pending.extend(children.get(pid, ()))
        return VllmTree(root[0], root[1], tuple(sorted(processes, key=lambda p: p.pid)))
