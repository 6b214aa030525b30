"""The scrape targets' series as Prometheus labels them under compose, and the writers of each
target's samples at a tick: vLLM's /metrics, DCGM, node exporter and `leakwatch exporter`.

Formatting series texts is most of a simulation's cost, so each text is built once and cached (by
name and label set). A `SeriesWriter` holds the label sets of one scenario (its model, card model
and ranks) and turns the state of the traffic, memory and request models at a scrape into
(series, value) samples, in the order each target lists them; it names and rounds numbers, it does
not make them.
"""

from __future__ import annotations

import math

from ..core.settings import load as load_settings
from ..core.topology import compose_target
from ..exporter.derived import DerivedState
from .memory_model import HostMemory
from .model import MIB, ROLES, Scenario
from .request_metrics import FINISHED_REASONS, Histogram, RequestMetrics
from .traffic_model import TickTraffic

# Each exporter's series labelled as Prometheus labels them under compose.
_SETTINGS = load_settings()
VLLM = compose_target(_SETTINGS, "vllm")
NODE = compose_target(_SETTINGS, "node_exporter")
DCGM = compose_target(_SETTINGS, "dcgm_exporter")
EXPORTER = compose_target(_SETTINGS, "leakwatch_exporter")
HOSTNAME = "gpu-host"
# Resident file pages (libraries, mmapped weights) per process: RSS minus them is the anonymous part.
FILE_BACKED_BYTES = 240 * MIB

_series_cache: dict = {}
_HISTOGRAM_TEXTS: dict = {}


def series(name: str, labels: dict) -> str:
    key = (name, tuple(labels.items()))
    text = _series_cache.get(key)
    if text is None:
        body = ",".join(f'{k}="{v}"' for k, v in labels.items())
        text = f"{name}{{{body}}}" if body else name
        _series_cache[key] = text
    return text


def histogram_samples(hist: Histogram, name: str, labels: dict) -> list[tuple[str, float]]:
    """A histogram's _bucket (cumulative), _sum and _count samples."""
    cache_key = (name, tuple(labels.items()))
    texts = _HISTOGRAM_TEXTS.get(cache_key)
    if texts is None:
        les = [repr(float(b)) for b in hist.bounds] + ["+Inf"]
        texts = [series(f"{name}_bucket", {**labels, "le": le}) for le in les]
        texts += [series(f"{name}_sum", labels), series(f"{name}_count", labels)]
        _HISTOGRAM_TEXTS[cache_key] = texts
    out: list[tuple[str, float]] = []
    running = 0.0
    for text, c in zip(texts, hist.counts):
        running += c
        out.append((text, round(running)))
    out.append((texts[-2], round(hist.total, 3)))
    out.append((texts[-1], round(running)))
    return out


class SeriesWriter:
    """One scenario's series texts and label sets, and each target's samples at a scrape."""

    def __init__(self, scenario: Scenario, ranks: list[str]):
        self.sc = scenario
        self.ranks = ranks
        self.model_labels = {**VLLM, "engine": "0", "model_name": scenario.model_name}
        self._labels: dict = {}
        self._texts: dict = {}

    # -- series texts (built once: formatting them is most of the simulation's cost) --------------

    def labels(self, kind: str, *key) -> dict:
        found = self._labels.get((kind, key))
        if found is None:
            if kind == "process":
                role, rank = key
                found = {**EXPORTER, "role": role, **({"rank": rank} if rank else {})}
            elif kind == "role":
                found = {**EXPORTER, "role": key[0]}
            elif kind == "exporter_gpu":
                found = {**EXPORTER, "gpu": str(key[0])}
            else:
                i, gpu = key[0], self.sc.gpu
                assert gpu is not None  # DCGM's labels: a scenario with cards
                found = {
                    **DCGM,
                    "gpu": str(i),
                    "UUID": f"GPU-5f1c2b7e-0000-4000-8000-{i:012d}",
                    "device": f"nvidia{i}",
                    "modelName": gpu.model_name,
                    "Hostname": HOSTNAME,
                }
            self._labels[(kind, key)] = found
        return found

    def tx(self, name: str, base: dict, *extra: str) -> str:
        key = (name, id(base), extra)
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = series(name, {**base, **dict(zip(extra[::2], extra[1::2]))})
        return text

    # -- each target's samples -------------------------------------------------------------------

    def vllm(
        self,
        samples: list[tuple[str, float]],
        ready: bool,
        traffic: TickTraffic,
        requests: RequestMetrics,
        process_start: float,
        mem: HostMemory,
    ) -> None:
        """vLLM's /metrics: `up`, and the rest only once it answers."""
        sc = self.sc
        add = samples.append
        add((self.tx("up", VLLM), 1.0 if ready else 0.0))
        if not ready:
            return
        labels = self.model_labels
        for reason in FINISHED_REASONS:
            add((self.tx("vllm:request_success_total", labels, "finished_reason", reason), requests.counters[reason]))
        for status, value in requests.http.items():
            add(
                (
                    self.tx(
                        "http_requests_total",
                        VLLM,
                        "handler",
                        "/v1/completions",
                        "method",
                        "POST",
                        "status",
                        status,
                    ),
                    value,
                )
            )
        add((self.tx("vllm:num_requests_running", labels), traffic.running))
        add((self.tx("vllm:num_requests_waiting", labels), traffic.waiting))
        add((self.tx("vllm:kv_cache_usage_perc", labels), round(requests.kv, 4)))
        add((self.tx("vllm:num_preemptions_total", labels), requests.preemptions))
        for name, hist in requests.hist.items():
            samples.extend(histogram_samples(hist, name, labels))
        if sc.gpu and sc.gpu.gpu_memory_utilization is not None:
            # vLLM's CacheConfig as an info gauge (the labels are str() of its fields).
            add(
                (
                    self.tx(
                        "vllm:cache_config_info",
                        VLLM,
                        "engine",
                        "0",
                        "gpu_memory_utilization",
                        str(float(sc.gpu.gpu_memory_utilization)),
                    ),
                    1.0,
                )
            )
        add((self.tx("process_start_time_seconds", VLLM), round(process_start, 2)))
        add((self.tx("process_resident_memory_bytes", VLLM), round(mem.rss[("api_server", "")])))
        for gen in range(3):
            add((self.tx("python_gc_collections_total", VLLM, "generation", str(gen)), requests.gc[gen]))

    def dcgm(self, samples: list[tuple[str, float]], gpu_used: list[float]) -> None:
        """DCGM, per card (MiB, integers)."""
        gpu = self.sc.gpu
        add = samples.append
        if gpu:
            add((self.tx("up", DCGM), 1.0))
            for i, used in enumerate(gpu_used):
                labels = self.labels("dcgm", i)
                add((self.tx("DCGM_FI_DEV_FB_USED", labels), used))
                add((self.tx("DCGM_FI_DEV_FB_FREE", labels), gpu.total_mib - used))

    def node(self, samples: list[tuple[str, float]], mem: HostMemory) -> None:
        """node exporter's memory series."""
        host = self.sc.host
        add = samples.append
        add((self.tx("up", NODE), 1.0))
        add((self.tx("node_memory_MemTotal_bytes", NODE), host.mem_total_bytes))
        add((self.tx("node_memory_MemAvailable_bytes", NODE), round(mem.available)))
        add((self.tx("node_memory_SwapTotal_bytes", NODE), host.swap_total_bytes))
        add((self.tx("node_memory_SwapFree_bytes", NODE), round(mem.swap_free)))

    def exporter(
        self,
        samples: list[tuple[str, float]],
        t: float,
        ready: bool,
        ready_at: float,
        served: int,
        mem: HostMemory,
        gpu_used: list[float],
        derived: DerivedState,
        host_by_role: dict[str, int],
        gpu_bytes: dict[str, int],
    ) -> None:
        """`leakwatch exporter`'s series, computed as its contract describes; what it derives
        (baseline, growth, retention, restarts) comes from its own code, fed by the simulator."""
        sc = self.sc
        add = samples.append
        add((self.tx("up", EXPORTER), 1.0))
        alive = True  # the processes exist while vLLM starts; they are replaced in one tick
        for role in ROLES:
            count = len(self.ranks) if role == "worker" else 1
            add((self.tx("leakwatch_processes", EXPORTER, "role", role), count if alive else 0))
        for (role, rank), value in mem.rss.items():
            labels = self.labels("process", role, rank)
            add((self.tx("leakwatch_process_resident_memory_bytes", labels), round(value)))
            anonymous = max(0.0, value - FILE_BACKED_BYTES)
            add((self.tx("leakwatch_process_anonymous_memory_bytes", labels), round(anonymous)))
            add((self.tx("leakwatch_process_unique_memory_bytes", labels), round(max(0.0, value - 250 * MIB))))
            add((self.tx("leakwatch_process_proportional_memory_bytes", labels), round(mem.pss[(role, rank)])))
            add((self.tx("leakwatch_process_swap_bytes", labels), round(mem.swap[(role, rank)])))
        add((self.tx("leakwatch_cgroup_memory_usage_bytes", EXPORTER), round(mem.cgroup_usage)))
        if sc.host.cgroup_limit_bytes:
            add((self.tx("leakwatch_cgroup_memory_limit_bytes", EXPORTER), sc.host.cgroup_limit_bytes))
        add((self.tx("leakwatch_gpu_available", EXPORTER), 1.0 if sc.gpu else 0.0))
        if sc.gpu:
            for i, used in enumerate(gpu_used):
                g = self.labels("exporter_gpu", i)
                add((self.tx("leakwatch_gpu_memory_used_bytes", g), used * MIB))
                add((self.tx("leakwatch_gpu_memory_total_bytes", g), sc.gpu.total_mib * MIB))
                add(
                    (
                        self.tx("leakwatch_gpu_process_memory_bytes", g, "role", "worker", "rank", str(i)),
                        max(0.0, used - sc.gpu.idle_mib) * MIB,
                    )
                )
        add((self.tx("leakwatch_vllm_up", EXPORTER), 1.0 if ready else 0.0))
        for role, cache, size in sc.cache_bounds:  # read from the processes' environment: always there
            add((self.tx("leakwatch_vllm_cache_bound_bytes", EXPORTER, "role", role, "cache", cache), size))
        if ready:
            hours = (t - ready_at) / 3600
            grown = 40 if served else 0
            add(
                (
                    self.tx("leakwatch_vllm_metrics_series", EXPORTER),
                    sc.metrics_series + grown + math.floor(hours * sc.metrics_series_per_hour),
                )
            )
        # What the exporter derives from its samples.
        add((self.tx("leakwatch_vllm_restarts_total", EXPORTER), float(derived.restarts)))
        b = derived.baseline
        add((self.tx("leakwatch_baseline_ready", EXPORTER), 1.0 if (ready and b) else 0.0))
        if not (ready and b):
            return
        since = served - b.requests
        add((self.tx("leakwatch_baseline_timestamp_seconds", EXPORTER), round(b.time)))
        add((self.tx("leakwatch_requests_since_baseline", EXPORTER), float(since)))
        ratios = derived.retention.ratios
        for role in ROLES:
            labels = self.labels("role", role)
            growth = host_by_role[role] - b.host[role]
            add((self.tx("leakwatch_host_memory_baseline_bytes", labels), b.host[role]))
            add((self.tx("leakwatch_host_memory_growth_bytes", labels), growth))
            if since:
                add((self.tx("leakwatch_host_memory_growth_per_request_bytes", labels), round(growth / since, 1)))
            if ("host", role) in ratios:
                add((self.tx("leakwatch_host_memory_retention_ratio", labels), round(ratios[("host", role)], 3)))
        for gpu, used in gpu_bytes.items():
            labels = self.labels("exporter_gpu", int(gpu))
            growth = used - b.gpu[gpu]
            add((self.tx("leakwatch_gpu_memory_baseline_bytes", labels), b.gpu[gpu]))
            add((self.tx("leakwatch_gpu_memory_growth_bytes", labels), growth))
            if since:
                add((self.tx("leakwatch_gpu_memory_growth_per_request_bytes", labels), round(growth / since, 1)))
            if ("gpu", gpu) in ratios:
                add((self.tx("leakwatch_vram_retention_ratio", labels), round(ratios[("gpu", gpu)], 3)))
