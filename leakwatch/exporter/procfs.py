"""Reads the few /proc files the exporter needs, under an injectable root.

psutil keeps its /proc root in a process-wide global; reading these files directly lets each collector
take its own root (fixture trees in tests, a host /proc mounted elsewhere in a container) and reads RSS
and swap with one small file per process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# /proc/<pid>/smaps_rollup fields, in kB. USS as psutil defines it: private pages (clean, dirty, huge).
_USS_FIELDS = ("Private_Clean", "Private_Dirty", "Private_Hugetlb")
# TCP socket state "LISTEN" in /proc/<pid>/net/tcp{,6}.
_TCP_LISTEN = "0A"


class ProcessGone(Exception):
    """The process exited between listing and reading: churn, not a failed read."""


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    starttime: int  # clock ticks after boot: with the pid, identifies one process incarnation


@dataclass(frozen=True)
class Smaps:
    pss: int
    uss: int


@dataclass(frozen=True)
class CgroupEntry:
    hierarchy: str
    controllers: tuple[str, ...]
    path: str


# RssAnon and RssShmem (Linux >= 4.5) are VmRSS without its file pages, the ones the kernel can drop
# and fault back in under memory pressure, so they move without any leak.
STATUS_FIELDS = ("VmRSS", "VmSwap", "RssAnon", "RssShmem")


class ProcFS:
    def __init__(self, root: str | Path = "/proc"):
        self.root = Path(root)

    def _read(self, pid: int, name: str, binary: bool = False):
        path = self.root / str(pid) / name
        try:
            return path.read_bytes() if binary else path.read_text()
        except (FileNotFoundError, ProcessLookupError):
            raise ProcessGone(pid) from None

    def environ_value(self, pid: int, name: str) -> str | None:
        """One variable of the process's environment as it started; None when unset or unreadable
        (another user's process without CAP_SYS_PTRACE)."""
        try:
            raw = self._read(pid, "environ", binary=True)
        except PermissionError:
            return None
        prefix = name.encode() + b"="
        for entry in raw.split(b"\0"):
            if entry.startswith(prefix):
                return entry[len(prefix) :].decode(errors="replace")
        return None

    def pids(self) -> list[int]:
        return [int(entry) for entry in os.listdir(self.root) if entry.isdigit()]

    def stat(self, pid: int) -> ProcStat:
        text = self._read(pid, "stat")
        # The command name (field 2) sits in parentheses and may itself contain spaces and ')'.
        fields = text[text.rindex(")") + 2 :].split()
        return ProcStat(pid=pid, ppid=int(fields[1]), starttime=int(fields[19]))

    def title(self, pid: int) -> str:
        """The process title: argv as the process shows it (setproctitle rewrites it)."""
        raw = self._read(pid, "cmdline", binary=True)
        return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part).strip()

    def status(self, pid: int) -> dict[str, int]:
        """The kB fields of /proc/<pid>/status that the exporter uses, in bytes."""
        values = {}
        for line in self._read(pid, "status").splitlines():
            key, _, rest = line.partition(":")
            if key in STATUS_FIELDS:
                values[key] = int(rest.split()[0]) * 1024
        return values

    def smaps_rollup(self, pid: int) -> Smaps:
        fields: dict[str, int] = {}
        for line in self._read(pid, "smaps_rollup").splitlines()[1:]:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                fields[key] = int(parts[0]) * 1024
        if "Pss" not in fields:
            raise ValueError(f"no Pss in {self.root}/{pid}/smaps_rollup")
        return Smaps(pss=fields["Pss"], uss=sum(fields.get(key, 0) for key in _USS_FIELDS))

    def cgroups(self, pid: int) -> list[CgroupEntry]:
        entries = []
        for line in self._read(pid, "cgroup").splitlines():
            hierarchy, controllers, path = line.split(":", 2)
            entries.append(CgroupEntry(hierarchy, tuple(c for c in controllers.split(",") if c), path))
        return entries

    def listening_inodes(self, pid: int, port: int) -> set[str]:
        """Inodes of TCP sockets listening on `port` in the network namespace of `pid`.

        Reading the namespace through the process (not /proc/net) finds vLLM's listener even when the
        exporter runs in another network namespace, as it does in compose."""
        inodes = set()
        for name in ("net/tcp", "net/tcp6"):
            try:
                text = self._read(pid, name)
            except ProcessGone:
                continue
            for line in text.splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == _TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
        return inodes

    def netns(self, pid: int) -> str:
        """The network namespace of a process ("net:[4026531840]"), or its pid when unreadable."""
        try:
            return os.readlink(self.root / str(pid) / "ns" / "net")
        except (FileNotFoundError, ProcessLookupError):
            raise ProcessGone(pid) from None
        except OSError:
            return f"pid:{pid}"

    def socket_inodes(self, pid: int) -> set[str]:
        """Inodes of the sockets a process holds open (needs the same access as ptrace-read)."""
        fd_dir = self.root / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except (FileNotFoundError, ProcessLookupError):
            raise ProcessGone(pid) from None
        inodes = set()
        for name in names:
            try:
                target = os.readlink(fd_dir / name)
            except OSError:
                continue  # closed in the meantime
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        return inodes
