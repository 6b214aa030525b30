"""Declared cache bounds: the size limits an operator set for vLLM's bounded caches.

Some of vLLM's memory growth is a cache that fills and then stops (config/vllm_leaks.yaml, shape
`bounded`: xgrammar's compiled grammars in EngineCore, bounded by VLLM_XGRAMMAR_CACHE_MB). The
exporter publishes `leakwatch_vllm_cache_bound_bytes{role, cache}` for each such cache whose bound
is set explicitly in the environment of the role's processes (/proc/<pid>/environ, as the process
started). Only an explicit setting counts: it is a bound the operator chose and sized for the host.
vLLM's default (512 MiB for xgrammar) is not published, because the critical leak alert leaves a
role alone while its growth since the baseline stays within its published bounds: a default bound
would hide any EngineCore leak below 512 MiB from the healer, including real ones.

A role's bound is the sum over its processes (with data parallelism each EngineCore holds a cache
of its own), matching leakwatch_host_memory_growth_bytes, which sums the role's processes.
A process whose environment cannot be read (another user's process without CAP_SYS_PTRACE) adds
nothing: no bound, and the alerts act as they did without one.
"""

from __future__ import annotations

from ..realleaks import catalogue as leak_catalogue
from .process_tree import VllmTree
from .procfs import ProcessGone, ProcFS

FAMILY = "leakwatch_vllm_cache_bound_bytes"


def parse_bound(bound: leak_catalogue.Bound, raw: str | None) -> int | None:
    """Bytes for an explicit setting of `bound.env` (its value as the environment holds it); None
    when unset, empty or not a positive whole number (vLLM would fail or fall back: no bound)."""
    if raw is None:
        return None
    text = raw.strip()
    if not text.isdigit() or int(text) <= 0:
        return None
    return bound.bytes_for(int(text))


class CacheBounds:
    """Reads each vLLM process's declared bounds once per process incarnation (an environment does
    not change after exec)."""

    def __init__(self, procfs: ProcFS, caches: tuple[leak_catalogue.Case, ...] | None = None):
        self.procfs = procfs
        self.caches = leak_catalogue.load().bounded_caches if caches is None else caches
        self._seen: dict[tuple[int, int], dict[str, int]] = {}

    def _process(self, pid: int, starttime: int, role: str) -> dict[str, int]:
        key = (pid, starttime)
        if key not in self._seen:
            mine = tuple(c for c in self.caches if c.role == role)
            found = {}
            for case in mine:
                assert case.bound is not None and case.bound.env is not None  # bounded_caches' promise
                size = parse_bound(case.bound, self.procfs.environ_value(pid, case.bound.env))
                if size is not None:
                    found[case.name] = size
            self._seen[key] = found
        return self._seen[key]

    def read(self, tree: VllmTree) -> dict[tuple[str, str], int]:
        """(role, cache) -> bytes for the caches of `tree` with an explicit bound."""
        out: dict[tuple[str, str], int] = {}
        alive = set()
        for p in tree.processes:
            alive.add((p.pid, p.starttime))
            try:
                found = self._process(p.pid, p.starttime, p.role)
            except ProcessGone:
                continue
            for cache, size in found.items():
                out[(p.role, cache)] = out.get((p.role, cache), 0) + size
        self._seen = {k: v for k, v in self._seen.items() if k in alive}
        return out
