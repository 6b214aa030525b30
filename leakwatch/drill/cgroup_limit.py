"""A memory cgroup for the drill's vLLM: a container-like limit on a machine without containers.

The exhaustion alert forecasts against the container's headroom (limit minus usage); a drill that
leaks into a whole host would need the host's free memory to run out. Putting vLLM's processes into
a child cgroup with `usage + headroom` as its limit gives the alert, the exporter and the healer
the situation they are built for, at a size the machine can afford.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import LeakwatchError

ROOT = Path("/sys/fs/cgroup")


class MemoryCgroup:
    def __init__(self, path: Path, version: int):
        self.path = path
        self.version = version

    @classmethod
    def create(cls, name: str, root: Path = ROOT) -> MemoryCgroup:
        """A child of this process's memory cgroup (v1 memory hierarchy, or v2 with the controller)."""
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        candidates = []
        for line in lines:
            hierarchy, controllers, rel = line.split(":", 2)
            if "memory" in controllers.split(","):
                candidates.append((1, root / "memory" / rel.lstrip("/")))
            elif hierarchy == "0":
                for base in (root, root / "unified"):
                    if (base / rel.lstrip("/") / "cgroup.subtree_control").exists():
                        candidates.append((2, base / rel.lstrip("/")))
        for version, parent in candidates:
            if version == 2 and "memory" not in (parent / "cgroup.subtree_control").read_text().split():
                continue
            child = parent / name
            try:
                child.mkdir(exist_ok=True)
            except OSError:
                continue
            return cls(child, version)
        raise LeakwatchError(
            "the drill needs a writable memory cgroup to give vLLM a container-like memory limit "
            "(run as root, or with a delegated cgroup v2 subtree that has the memory controller)"
        )

    def _file(self, v1: str, v2: str) -> Path:
        return self.path / (v1 if self.version == 1 else v2)

    def adopt(self, pids: list[int]) -> None:
        """Moves processes (and, where the kernel still supports it on v1, the memory they already
        hold) into this cgroup. Without moved charges only new allocations count against the
        limit, so callers set the limit from the processes' own memory, not from usage()."""
        if self.version == 1:
            try:
                (self.path / "memory.move_charge_at_immigrate").write_text("3")
            except OSError:  # deprecated in newer kernels (EINVAL)
                pass
        for pid in pids:
            try:
                (self.path / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                continue

    def usage(self) -> int:
        return int(self._file("memory.usage_in_bytes", "memory.current").read_text())

    def limit(self) -> int:
        return int(self._file("memory.limit_in_bytes", "memory.max").read_text())

    def set_limit(self, limit: int) -> None:
        self._file("memory.limit_in_bytes", "memory.max").write_text(str(int(limit)))

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this cgroup (v2 memory.events, v1
        memory.oom_control; 0 on a v1 kernel too old to count them)."""
        text = self._file("memory.oom_control", "memory.events").read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        """Moves anything left back to the parent and deletes the cgroup."""
        parent_procs = self.path.parent / "cgroup.procs"
        try:
            for pid in (self.path / "cgroup.procs").read_text().split():
                try:
                    parent_procs.write_text(pid)
                except OSError:
                    pass
            os.rmdir(self.path)
        except OSError:
            pass
