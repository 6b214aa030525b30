"""The prometheus_client custom collector: one consistent read of everything per scrape.

Register it on a registry you own (`CollectorRegistry(auto_describe=False)` is fine); nothing here
touches the global registry. A failed read skips the affected metrics for that scrape and counts in
leakwatch_collector_errors_total{collector}; vLLM being absent or restarting is a state, not a crash.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..core.profiles import Profile
from .cache_bounds import FAMILY as CACHE_BOUND_FAMILY, CacheBounds
from .cgroup_memory import CgroupMemory, CgroupReader
from .derived import (
    BASELINE_IDLE_WAIT_S,
    RETENTION_IDLE_S,
    RETENTION_MIN_GAIN_BYTES,
    WARMUP_REQUESTS,
    DerivedState,
    Sample,
)
from .host_memory import HostMemory, HostReading
from .memory_breakdown import breakdowns
from .nvml import VISIBLE_DEVICES_ENV, Gpu, GpuReadError, GpuReading, assigned_devices, import_pynvml
from .process_tree import DEFAULT_TITLE_PREFIX, ROLES, Discovery, VllmTree
from .procfs import ProcessGone, ProcFS
from .schema import Schema
from .vllm_scrape import VllmScraper, VllmStats, VllmUnreachable

log = logging.getLogger("leakwatch.exporter")

# The timeout of the scrape being answered (Prometheus sends it with every scrape; set by the HTTP
# handler). A hung vLLM must not make our own scrape time out, or every alert that reads us
# (VLLMEngineDown, the leak rules) goes blind exactly while vLLM hangs.
_scrape_timeout: ContextVar[float | None] = ContextVar("scrape_timeout", default=None)
# Kept for encoding the reply and the network: 10 % of the timeout, at least this much.
SCRAPE_MARGIN_S = 0.25
# The background sampler waits for vLLM at most this share of its interval and of the scrape
# timeout, so a scrape that arrives while it runs keeps most of its own time.
SAMPLER_VLLM_WAIT_SHARE = 0.5


@contextmanager
def scrape_timeout(seconds: float | None) -> Iterator[None]:
    """Within: collect() answers before `seconds` are over, without vLLM's reading if need be."""
    token = _scrape_timeout.set(seconds)
    try:
        yield
    finally:
        _scrape_timeout.reset(token)


# The fixed set of `collector` label values.
COLLECTORS = ("discovery", "host_memory", "cgroup", "gpu", "vllm")

FAMILIES = (
    "leakwatch_processes",
    "leakwatch_process_resident_memory_bytes",
    "leakwatch_process_anonymous_memory_bytes",
    "leakwatch_process_unique_memory_bytes",
    "leakwatch_process_proportional_memory_bytes",
    "leakwatch_process_swap_bytes",
    "leakwatch_cgroup_memory_usage_bytes",
    "leakwatch_cgroup_memory_limit_bytes",
    "leakwatch_gpu_available",
    "leakwatch_gpu_memory_used_bytes",
    "leakwatch_gpu_memory_total_bytes",
    "leakwatch_gpu_process_memory_bytes",
    "leakwatch_baseline_ready",
    "leakwatch_baseline_timestamp_seconds",
    "leakwatch_requests_since_baseline",
    "leakwatch_host_memory_baseline_bytes",
    "leakwatch_host_memory_growth_bytes",
    "leakwatch_host_memory_growth_per_request_bytes",
    "leakwatch_gpu_memory_baseline_bytes",
    "leakwatch_gpu_memory_growth_bytes",
    "leakwatch_gpu_memory_growth_per_request_bytes",
    "leakwatch_vram_retention_ratio",
    "leakwatch_host_memory_retention_ratio",
    "leakwatch_retention_bursts_rated_total",
    "leakwatch_vllm_restarts_total",
    "leakwatch_vllm_up",
    "leakwatch_vllm_metrics_series",
    CACHE_BOUND_FAMILY,
    "leakwatch_collector_errors_total",
    "leakwatch_collector_duration_seconds",
    "leakwatch_memory_expected_bytes",
    "leakwatch_memory_unexplained_bytes",
)


@dataclass(frozen=True)
class ExporterConfig:
    vllm_url: str
    # The port vLLM listens on inside its own network namespace; the URL's port when None.
    vllm_listen_port: int | None = None
    title_prefix: str = DEFAULT_TITLE_PREFIX
    warmup_requests: int = WARMUP_REQUESTS
    baseline_idle_wait_s: float = BASELINE_IDLE_WAIT_S
    retention_idle_s: float = RETENTION_IDLE_S
    retention_min_gain_bytes: int = RETENTION_MIN_GAIN_BYTES
    smaps_interval_s: float = 60.0
    vllm_timeout_s: float = 5.0
    # Keeps the restart count and the baseline across exporter restarts; None: in memory only.
    state_file: Path | None = None
    # "all": every device NVML shows (a host of its own); "vllm": only those a vLLM process runs on.
    gpu_devices: str = "all"
    # The serving profile vLLM runs: its model sizes are the memory breakdown's expected parts.
    profile: Profile | None = None

    @property
    def listen_port(self) -> int:
        if self.vllm_listen_port:
            return self.vllm_listen_port
        parts = urlsplit(self.vllm_url)
        return parts.port or (443 if parts.scheme == "https" else 80)


@dataclass
class Snapshot:
    sample: Sample
    discovered: bool  # False when discovery itself failed this time
    tree: VllmTree | None
    host: HostReading | None
    cgroup: CgroupMemory | None
    gpu_available: bool
    gpu: GpuReading | None
    durations: dict[str, float] = field(default_factory=dict)
    cache_bounds: dict[tuple[str, str], int] = field(default_factory=dict)  # (role, cache) -> bytes


class VllmMemoryCollector:
    def __init__(
        self,
        config: ExporterConfig,
        *,
        procfs: ProcFS | None = None,
        cgroup_root: str | Path = "/sys/fs/cgroup",
        nvml_loader: Callable[[], object] = import_pynvml,
        clock: Callable[[], float] = time.time,
        schema: Schema | None = None,
    ):
        self.config = config
        self.clock = clock
        self.schema = schema or Schema()
        self.schema.require(FAMILIES)
        procfs = procfs or ProcFS()
        self.procfs = procfs
        self.discovery = Discovery(procfs, config.listen_port, config.title_prefix, clock=clock)
        self.host_memory = HostMemory(procfs, config.smaps_interval_s, clock)
        self.cgroup = CgroupReader(procfs, cgroup_root)
        self.cache_bounds = CacheBounds(procfs)
        self.gpu = Gpu(nvml_loader, clock, only_vllm_devices=config.gpu_devices == "vllm")
        self.vllm = VllmScraper(config.vllm_url, config.vllm_timeout_s)
        self.derived = DerivedState(
            warmup_requests=config.warmup_requests,
            baseline_idle_wait_s=config.baseline_idle_wait_s,
            retention_idle_s=config.retention_idle_s,
            retention_min_gain_bytes=config.retention_min_gain_bytes,
        )
        self.errors = {name: 0 for name in COLLECTORS}
        self.last_snapshot_at: float | None = None
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-scrape")
        # A read of vLLM that outlived its snapshot's deadline: the next snapshot takes its answer
        # instead of queueing another request behind it.
        self._vllm_read: Future | None = None
        self._vllm_read_started = 0.0
        self._last_scrape_timeout_s: float | None = None
        self._saved_state = self._load_state()

    # -- state file ----------------------------------------------------------------------------

    def _load_state(self) -> dict | None:
        path = self.config.state_file
        if path is None or not path.exists():
            return None
        try:
            state = json.loads(path.read_text())
            self.derived.restore(state)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable state file %s (%s); starting afresh", path, exc)
            return None
        log.info(
            "restored state from %s: %d restarts, baseline %s",
            path,
            self.derived.restarts,
            "kept" if self.derived.baseline else "none",
        )
        return state

    def _save_state(self) -> None:
        path = self.config.state_file
        state = self.derived.state()
        if path is None or state == self._saved_state:
            return
        try:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)  # atomic: a crash mid-write leaves the previous state
            self._saved_state = state
        except OSError as exc:
            log.warning("cannot write state file %s: %s", path, exc)

    # -- reading -------------------------------------------------------------------------------

    def _vllms_assigned_gpus(self, tree: VllmTree | None) -> frozenset[str]:
        """The cards the device plugin gave vLLM's container, from its API server's environment;
        only asked when the exporter reports vLLM's devices alone (a sidecar on a shared node)."""
        if tree is None or not self.gpu.only_vllm_devices:
            return frozenset()
        try:
            return assigned_devices(self.procfs.environ_value(tree.root_pid, VISIBLE_DEVICES_ENV))
        except ProcessGone:
            return frozenset()

    def _error(self, collector: str, exc: BaseException) -> None:
        self.errors[collector] += 1
        log.warning("%s: %s: %s", collector, type(exc).__name__, exc)

    def snapshot(self, deadline: float | None = None) -> Snapshot:
        """Reads everything once and advances the derived state (thread-safe). With a deadline
        (time.monotonic()), vLLM's answer is not waited for past it: the sample has no vLLM reading."""
        with self._lock:
            return self._snapshot(deadline)

    def sample_if_stale(self, max_age_s: float) -> None:
        """For the background sampler: keeps bursts visible between Prometheus scrapes."""
        with self._lock:
            if self.last_snapshot_at is None or self.clock() - self.last_snapshot_at >= max_age_s:
                wait_s = min(self.config.vllm_timeout_s, max_age_s * SAMPLER_VLLM_WAIT_SHARE)
                if self._last_scrape_timeout_s is not None:
                    wait_s = min(wait_s, self._last_scrape_timeout_s * SAMPLER_VLLM_WAIT_SHARE)
                self._snapshot(time.monotonic() + wait_s)

    def _snapshot(self, deadline: float | None) -> Snapshot:
        durations: dict[str, float] = {}

        def timed(name: str):
            return _Timer(durations, name)

        # vLLM's /metrics is fetched in parallel with the /proc reads: it waits on vLLM's event loop.
        if self._vllm_read is None:
            self._vllm_read = self._pool.submit(self._read_vllm, need_health=self.derived.baseline is None)
            self._vllm_read_started = time.perf_counter()
        tree, discovered = None, True
        with timed("discovery"):
            try:
                tree = self.discovery.find()
            except (OSError, ValueError, IndexError) as exc:
                discovered = False
                self._error("discovery", exc)

        host = None
        if tree is not None:
            with timed("host_memory"):
                host = self.host_memory.read(tree, lambda exc: self._error("host_memory", exc))

        bounds = self._cache_bounds(tree)

        cgroup = None
        if tree is not None:
            with timed("cgroup"):
                try:
                    cgroup = self.cgroup.read(tree.root_pid)
                except ProcessGone:
                    pass
                except (OSError, ValueError, IndexError) as exc:
                    self._error("cgroup", exc)

        gpu, gpu_available = None, False
        with timed("gpu"):
            gpu_available = self.gpu.available
            if gpu_available:
                try:
                    gpu = self.gpu.read(tree, self._vllms_assigned_gpus(tree))
                except GpuReadError as exc:
                    self._error("gpu", exc)

        stats, healthy, durations["vllm"], error = self._vllm_answer(deadline)
        if error is not None:
            self._error("vllm", error)

        now = self.clock()
        sample = Sample(
            time=now,
            identity=tree.identity if tree else None,
            vllm=stats,
            healthy=healthy,
            host=host.anonymous_plus_swap_by_role() if host is not None else None,
            gpu=dict(gpu.used) if gpu else None,
        )
        if discovered:  # a failed discovery says nothing about restarts or baselines
            self.derived.update(sample)
            self._save_state()
        self.last_snapshot_at = now
        return Snapshot(sample, discovered, tree, host, cgroup, gpu_available, gpu, durations, bounds)

    def _cache_bounds(self, tree: VllmTree | None) -> dict[tuple[str, str], int]:
        """Declared cache bounds (cache_bounds.py); a failed read counts as discovery's error."""
        if tree is None:
            return {}
        try:
            return self.cache_bounds.read(tree)
        except (OSError, ValueError) as exc:
            self._error("discovery", exc)
            return {}

    def _vllm_answer(self, deadline: float | None) -> tuple[VllmStats | None, bool, float, Exception | None]:
        """The pending read's answer, or no reading (and an error) if it is not in by the deadline."""
        assert self._vllm_read is not None
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            answer = self._vllm_read.result(timeout=timeout)
        except FutureTimeout:
            waited = time.perf_counter() - self._vllm_read_started
            return None, False, waited, VllmUnreachable(f"no answer after {waited:.1f}s; the next sample takes it")
        self._vllm_read = None
        return answer

    def _read_vllm(self, need_health: bool) -> tuple[VllmStats | None, bool, float, Exception | None]:
        """(stats or None, healthy, seconds, error): /health only matters until the baseline is taken."""
        start = time.perf_counter()
        try:
            stats = self.vllm.metrics()
        except (VllmUnreachable, ValueError) as exc:
            return None, False, time.perf_counter() - start, exc
        healthy = self.vllm.healthy() if need_health else False
        return stats, healthy, time.perf_counter() - start, None

    # -- exposition ----------------------------------------------------------------------------

    def describe(self):
        """Names only, so registering the collector does not read vLLM."""
        return [self.schema.family(name).metric for name in FAMILIES]

    def collect(self):
        timeout = _scrape_timeout.get()
        deadline = None
        if timeout is not None:
            deadline = time.monotonic() + timeout - max(SCRAPE_MARGIN_S, timeout / 10)
            self._last_scrape_timeout_s = timeout
        # Built under the lock: the background sampler must not move the derived state mid-scrape.
        with self._lock:
            return self._families(self._snapshot(deadline))

    def _families(self, snap: Snapshot) -> list:
        families = {name: self.schema.family(name) for name in FAMILIES}
        f = families.__getitem__

        if snap.discovered:
            for role in ROLES:
                f("leakwatch_processes").add(snap.tree.count(role) if snap.tree else 0, role=role)
        if snap.host:
            for name, values in (
                ("leakwatch_process_resident_memory_bytes", snap.host.rss),
                ("leakwatch_process_anonymous_memory_bytes", snap.host.anonymous),
                ("leakwatch_process_unique_memory_bytes", snap.host.uss),
                ("leakwatch_process_proportional_memory_bytes", snap.host.pss),
                ("leakwatch_process_swap_bytes", snap.host.swap),
            ):
                for (role, rank), value in sorted(values.items()):
                    f(name).add(value, role=role, rank=rank)
        if snap.cgroup:
            f("leakwatch_cgroup_memory_usage_bytes").add(snap.cgroup.usage)
            if snap.cgroup.limit is not None:
                f("leakwatch_cgroup_memory_limit_bytes").add(snap.cgroup.limit)

        f("leakwatch_gpu_available").add(1 if snap.gpu_available else 0)
        if snap.gpu:
            for gpu in sorted(snap.gpu.used):
                f("leakwatch_gpu_memory_used_bytes").add(snap.gpu.used[gpu], gpu=gpu)
                f("leakwatch_gpu_memory_total_bytes").add(snap.gpu.total[gpu], gpu=gpu)
            for (gpu, role, rank), value in sorted(snap.gpu.process.items()):
                f("leakwatch_gpu_process_memory_bytes").add(value, gpu=gpu, role=role, rank=rank)

        self._add_derived(snap, f)
        self._add_breakdown(snap, f)

        f("leakwatch_vllm_restarts_total").add(self.derived.restarts)
        f("leakwatch_vllm_up").add(1 if snap.sample.vllm is not None else 0)
        if snap.sample.vllm is not None:
            f("leakwatch_vllm_metrics_series").add(snap.sample.vllm.series)
        for (role, cache), size in sorted(snap.cache_bounds.items()):
            f(CACHE_BOUND_FAMILY).add(size, role=role, cache=cache)
        for name in COLLECTORS:
            f("leakwatch_collector_errors_total").add(self.errors[name], collector=name)
        for name, seconds in snap.durations.items():
            f("leakwatch_collector_duration_seconds").add(seconds, collector=name)

        return [family.metric for family in families.values() if not family.empty]

    def _add_derived(self, snap: Snapshot, f) -> None:
        derived = self.derived
        baseline = derived.baseline
        f("leakwatch_baseline_ready").add(1 if baseline else 0)
        f("leakwatch_retention_bursts_rated_total").add(derived.retention.rated_bursts)
        for (kind, key), ratio in sorted(derived.retention.ratios.items()):
            if kind == "gpu":
                f("leakwatch_vram_retention_ratio").add(ratio, gpu=key)
            else:
                f("leakwatch_host_memory_retention_ratio").add(ratio, role=key)
        if baseline is None:
            return
        f("leakwatch_baseline_timestamp_seconds").add(baseline.time)
        served = derived.requests_since_baseline(snap.sample)
        if served is not None:
            f("leakwatch_requests_since_baseline").add(served)
        for kind, now_values, base_values in (
            ("host", snap.sample.host, baseline.host),
            ("gpu", snap.sample.gpu, baseline.gpu),
        ):
            label = "role" if kind == "host" else "gpu"
            for key, base in sorted(base_values.items()):
                f(f"leakwatch_{kind}_memory_baseline_bytes").add(base, **{label: key})
                if now_values is None or key not in now_values:
                    continue
                growth = now_values[key] - base
                f(f"leakwatch_{kind}_memory_growth_bytes").add(growth, **{label: key})
                if served:  # None or 0: no request since the baseline, no rate yet
                    f(f"leakwatch_{kind}_memory_growth_per_request_bytes").add(growth / served, **{label: key})

    def _add_breakdown(self, snap: Snapshot, f) -> None:
        """Expected parts and the unexplained remainder per model-holding process (breakdown.py)."""
        if self.config.profile is None or snap.tree is None:
            return
        stats = snap.sample.vllm
        for item in breakdowns(
            self.config.profile,
            stats.cache_config if stats is not None else None,
            ((p.role, p.rank) for p in snap.tree.processes),
            _anonymous_plus_swap(snap.host) if snap.host is not None else None,
            snap.gpu.process if snap.gpu is not None else None,
        ):
            for part, value in item.expected.items():
                f("leakwatch_memory_expected_bytes").add(value, role=item.role, rank=item.rank, part=part)
            if item.unexplained is not None:
                f("leakwatch_memory_unexplained_bytes").add(
                    item.unexplained, role=item.role, rank=item.rank, gpu=item.gpu
                )


def _anonymous_plus_swap(host: HostReading) -> dict[tuple[str, str], int]:
    """The leak measure per process, (role, rank) -> bytes: a pool or a leak pushed to swap still counts."""
    return {key: value + host.swap.get(key, 0) for key, value in host.anonymous.items()}


class _Timer:
    def __init__(self, durations: dict[str, float], name: str):
        self.durations, self.name = durations, name

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.durations[self.name] = time.perf_counter() - self.start
        return False
