"""Memory charged to the cgroup of vLLM's API server, and that cgroup's limit.

cgroup v2 (memory.current / memory.max) is read where the process's unified hierarchy has the memory
controller, at <root>/<path> or, on hybrid hosts, <root>/unified/<path>; otherwise cgroup v1's
memory hierarchy (memory.usage_in_bytes / memory.limit_in_bytes). In compose the exporter runs with
`cgroup: host`, so the path in /proc/<pid>/cgroup resolves under its /sys/fs/cgroup on v2; on v1, and
as a Kubernetes sidecar (private cgroup namespaces), it reads the process's own view through
/proc/<pid>/root.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .procfs import ProcFS

# cgroup v1 reports "no limit" as the largest page-aligned counter value (9223372036854771712 on
# 4 KiB pages); anything from 2^62 up is unlimited in practice.
V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class CgroupMemory:
    usage: int
    limit: int | None  # None: unlimited


class CgroupReader:
    def __init__(self, procfs: ProcFS, root: str | Path = "/sys/fs/cgroup"):
        self.procfs = procfs
        self.root = Path(root)

    def _dir(self, *parts: str) -> Path:
        return self.root.joinpath(*(p.strip("/") for p in parts if p.strip("/")))

    def read(self, pid: int) -> CgroupMemory | None:
        """None when the process has no memory cgroup to report (e.g. the v2 root cgroup)."""
        entries = self.procfs.cgroups(pid)
        for entry in entries:
            if entry.hierarchy == "0" and not entry.controllers:
                candidates = [self._dir(base, entry.path) for base in ("", "unified")]
                if entry.path.startswith("/.."):
                    # The process's cgroup lies outside ours (a Kubernetes sidecar: each container
                    # has a private cgroup namespace): its own mount of the cgroupfs, through
                    # /proc/<pid>/root, shows its cgroup at the root.
                    candidates.append(self.procfs.root / str(pid) / "root" / "sys" / "fs" / "cgroup")
                for directory in candidates:
                    try:
                        usage = int((directory / "memory.current").read_text())
                        limit = (directory / "memory.max").read_text().strip()
                    except (FileNotFoundError, PermissionError, NotADirectoryError):
                        continue
                    return CgroupMemory(usage, None if limit == "max" else int(limit))
        for entry in entries:
            if "memory" in entry.controllers:
                # Docker on cgroup v1 mounts only a container's own cgroup at /sys/fs/cgroup/memory,
                # `cgroup: host` or not: the exporter's container lacks vLLM's /docker/<id>, which
                # vLLM's own mount, through /proc/<pid>/root, shows at its root.
                own_mount = self.procfs.root / str(pid) / "root" / "sys" / "fs" / "cgroup" / "memory"
                for directory in (self._dir("memory", entry.path), own_mount):
                    try:
                        usage = int((directory / "memory.usage_in_bytes").read_text())
                        limit_bytes = int((directory / "memory.limit_in_bytes").read_text())
                    except (FileNotFoundError, PermissionError, NotADirectoryError):
                        continue
                    return CgroupMemory(usage, None if limit_bytes >= V1_UNLIMITED else limit_bytes)
        return None
