"""Reads what a leak check needs from Prometheus: one range query per signal on a common grid.

Memory comes from our exporter's per-role and per-GPU series (config/metrics/leakwatch-exporter.csv)
and DCGM's framebuffer counters; without the exporter, vLLM's own process_resident_memory_bytes
(the API server only) is the fallback so a check still works on a bare vLLM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core import alert_config
from ..core.errors import LeakwatchError
from ..core.metric_catalogue import host_leak_measure, with_matcher
from ..core.promapi import Prometheus
from .series import MemorySeries, Timeline
from .window import iso as _iso

# vLLM's process_* series, by the selector the rules use (config/alerts.yaml): a renamed scrape job
# is renamed there once, for the rules, dashboards, check, report and drill alike.
VLLM_PROCESS = alert_config.load().selector("vllm")
# What counts a finished request, restarts and the exporter's warm-up; one series each.
REQUESTS = "sum(vllm:request_success_total)"
START_TIME = f"max(process_start_time_seconds{{{VLLM_PROCESS}}})"
BASELINE_READY = "max(leakwatch_baseline_ready)"


@dataclass(frozen=True)
class MemoryQuery:
    kind: str
    key_labels: tuple[str, ...]
    expr: str
    source: str
    # Instant query at the window's end: bytes left before the limit, by the same key labels.
    headroom: str
    limit_source: str


MiB = 1048576
HOST_EXPORTER = MemoryQuery(
    "host",
    ("role", "rank"),
    f"sum by (role, rank) ({host_leak_measure()})"
    " or sum by (role, rank) (leakwatch_process_resident_memory_bytes + leakwatch_process_swap_bytes)"
    " or sum by (role, rank) (leakwatch_process_resident_memory_bytes)",
    "leakwatch exporter: anonymous memory + swap per role (RSS + swap from exporters before it)",
    "max(leakwatch_cgroup_memory_limit_bytes - leakwatch_cgroup_memory_usage_bytes)"
    " or max(node_memory_MemAvailable_bytes)",
    "cgroup limit, else host MemAvailable",
)
HOST_VLLM = MemoryQuery(
    "host",
    ("role",),
    f'label_replace(sum(process_resident_memory_bytes{{{VLLM_PROCESS}}}), "role", "api_server", "", "")',
    "vLLM process_resident_memory_bytes (API server process only)",
    "max(node_memory_MemAvailable_bytes)",
    "host MemAvailable",
)
GPU_EXPORTER = MemoryQuery(
    "gpu",
    ("gpu",),
    "sum by (gpu) (leakwatch_gpu_memory_used_bytes)",
    "leakwatch exporter: GPU memory used (NVML)",
    "sum by (gpu) (leakwatch_gpu_memory_total_bytes - leakwatch_gpu_memory_used_bytes)",
    "card memory",
)
GPU_DCGM = MemoryQuery(
    "gpu",
    ("gpu",),
    f"sum by (gpu) (DCGM_FI_DEV_FB_USED) * {MiB}",
    "DCGM framebuffer used",
    f"sum by (gpu) (DCGM_FI_DEV_FB_FREE) * {MiB}",
    "card memory (DCGM free)",
)
GPU_PROCESS = MemoryQuery(
    "gpu_process",
    ("gpu", "role", "rank"),
    "sum by (gpu, role, rank) (leakwatch_gpu_process_memory_bytes)",
    "leakwatch exporter: GPU memory per vLLM process role",
    "sum by (gpu) (leakwatch_gpu_memory_total_bytes - leakwatch_gpu_memory_used_bytes)",
    "card memory",
)
# Each group: the first query that returns data is used (exporter before the fallbacks).
MEMORY_GROUPS = ((HOST_EXPORTER, HOST_VLLM), (GPU_EXPORTER, GPU_DCGM), (GPU_PROCESS,))


def all_queries() -> list[str]:
    """Every PromQL expression a check may run (the metric-name contract test reads this)."""
    exprs = [REQUESTS, START_TIME, BASELINE_READY]
    for group in MEMORY_GROUPS:
        for q in group:
            exprs += [q.expr, q.headroom]
    from . import attribution, bounded  # what LEAK series are explained with (command.explain_leaks)

    return exprs + attribution.queries() + bounded.queries()


def choose_step(start: float, end: float, min_step: float, max_points: int) -> float:
    return float(max(min_step, math.ceil((end - start) / max(max_points - 1, 1))))


def _one(result: list[dict]) -> dict[float, float]:
    if not result:
        return {}
    return {float(t): float(v) for t, v in result[0]["values"]}


def _key(kind: str, labels: dict, key_labels: tuple[str, ...]) -> str:
    parts = [kind] + [labels.get(name, "") for name in key_labels]
    return "/".join(p for p in parts if p != "")


def collect(
    prom: Prometheus, start: float, end: float, step: float, matcher: str = ""
) -> tuple[Timeline, list[MemorySeries]]:
    """The check's samples; `matcher` (e.g. `deployment="canary"`) narrows every query to one side."""

    def query_range(expr: str) -> list[dict]:
        return prom.query_range(with_matcher(expr, matcher), start, end, step)

    only = f" with {{{matcher}}}" if matcher else ""
    requests = _one(query_range(REQUESTS))
    if not requests:
        raise LeakwatchError(
            f"Prometheus at {prom.base_url} has no vllm:request_success_total{only} between {_iso(start)} and "
            f"{_iso(end)}; is it the stack's Prometheus, and did vLLM serve requests in that window?"
        )
    started = _one(query_range(START_TIME))
    ready = _one(query_range(BASELINE_READY))
    grid = sorted(requests)
    timeline = Timeline.build(
        grid,
        [requests[t] for t in grid],
        [started.get(t, np.nan) for t in grid],
        [ready.get(t, np.nan) for t in grid],
    )

    series: list[MemorySeries] = []
    for group in MEMORY_GROUPS:
        for query in group:
            found = query_range(query.expr)
            if not found:
                continue
            headroom = _headroom(prom, query, end, matcher)
            for item in found:
                labels = {k: v for k, v in item["metric"].items() if k in query.key_labels}
                values = np.array([[float(t), float(v)] for t, v in item["values"]])
                room = headroom.get(labels.get("gpu", ""), headroom.get("", None))
                series.append(
                    MemorySeries(
                        key=_key(query.kind, labels, query.key_labels),
                        kind=query.kind,
                        labels=labels,
                        source=query.source,
                        t=values[:, 0],
                        values=values[:, 1],
                        headroom_bytes=room,
                        limit_source=query.limit_source if room is not None else "",
                    )
                )
            break
    if not series:
        raise LeakwatchError(
            f"Prometheus at {prom.base_url} has no vLLM memory series{only} between {_iso(start)} "
            f"and {_iso(end)} (neither leakwatch exporter, DCGM nor vLLM's process_* metrics)"
        )
    series.sort(key=lambda s: s.key)
    return timeline, series


def _headroom(prom: Prometheus, query: MemoryQuery, at: float, matcher: str = "") -> dict[str, float]:
    """Bytes left at `at`, keyed by GPU index ("" for host memory)."""
    out = {}
    for item in prom.query(with_matcher(query.headroom, matcher), at=at):
        value = float(item["value"][1])
        if math.isfinite(value):
            out[item["metric"].get("gpu", "")] = value
    return out
