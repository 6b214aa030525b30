"""Synthetic vLLM memory histories with a known leak: for the estimator's unit tests and, written as
OpenMetrics and backfilled into a real Prometheus, for `leakwatch check` and `leakwatch report`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from leakwatch.leakcheck.series import MemorySeries, Timeline

MB = 1_000_000


@dataclass
class Scenario:
    t: np.ndarray
    requests: np.ndarray  # vllm:request_success_total (resets at restarts)
    start_time: np.ndarray  # process_start_time_seconds of the API server
    memory: dict[str, np.ndarray] = field(default_factory=dict)  # role -> bytes
    baseline_ready: np.ndarray | None = None
    # handler -> successful POSTs so far (vLLM's http_requests_total), for per-endpoint attribution
    endpoints: dict[str, np.ndarray] = field(default_factory=dict)

    def timeline(self, with_start_time: bool = True) -> Timeline:
        return Timeline.build(self.t, self.requests, self.start_time if with_start_time else None, self.baseline_ready)

    def series(self, headroom: float | None = None) -> list[MemorySeries]:
        return [
            MemorySeries(f"host/{role}", "host", {"role": role}, "synthetic", self.t, values, headroom)
            for role, values in self.memory.items()
        ]

    def drop(self, start: float, end: float) -> Scenario:
        """A hole in the data (Prometheus down, scrape failures) between two times."""
        keep = (self.t < start) | (self.t >= end)
        return Scenario(
            self.t[keep],
            self.requests[keep],
            self.start_time[keep],
            {k: v[keep] for k, v in self.memory.items()},
            None if self.baseline_ready is None else self.baseline_ready[keep],
        )


def make(
    *,
    hours: float = 6.0,
    step: float = 15.0,
    requests_per_s: float = 1000 / 86400,
    bytes_per_request: float = 6 * MB,
    noise: float = 20 * MB,
    ar: float = 0.0,
    restarts_at: tuple[float, ...] = (),
    warmup_s: float = 0.0,
    warmup_bytes: float = 0.0,
    step_at: float | None = None,
    step_bytes: float = 0.0,
    base: float = 2_000 * MB,
    t0: float = 1_700_000_000.0,
    lead_in: float = 3600.0,
    bursts: tuple[int, float] | None = None,
    burst_jitter: float = 0.1,
    idle: tuple[tuple[float, float], ...] = (),
    role: str = "api_server",
    seed: int = 0,
) -> Scenario:
    """One vLLM API server: Poisson requests, `bytes_per_request` retained per request, noise (AR(1)
    when ar > 0), restarts at the given offsets (memory back to base, counter to 0), a warm-up ramp of
    warmup_bytes over warmup_s after every start, and optionally a one-time step (then a plateau).
    The process started `lead_in` seconds before the first sample.
    Traffic: Poisson at requests_per_s, or `bursts` (size, period_s): `size` requests at once every
    period (as a load test's bursts land, the measured shape behind issue 19); no requests at all
    during the `idle` (from, to) offsets."""
    rng = np.random.default_rng(seed)
    t = t0 + np.arange(0.0, hours * 3600.0 + step / 2, step)
    n = len(t)
    arrivals = rng.poisson(requests_per_s * step, size=n)
    if bursts is not None:
        size, period = bursts
        # Gaps between bursts drawn from period * (1 +- burst_jitter): a loaded machine serves some
        # bursts late and a few back to back. Each burst counts at the first sample after it.
        gaps = period * rng.uniform(1 - burst_jitter, 1 + burst_jitter, int(hours * 3600 / period * 3) + 2)
        at = np.cumsum(gaps)
        at = at[at < hours * 3600.0]
        arrivals = np.histogram(t0 + at, bins=np.r_[t, t[-1] + step] - step / 2)[0] * size
    for begin, end in idle:
        arrivals[(t >= t0 + begin) & (t < t0 + end)] = 0
    starts = [t0 - lead_in] + [t0 + r for r in restarts_at]
    start_time = np.empty(n)
    requests = np.empty(n)
    memory = np.empty(n)
    eps = np.empty(n)
    e = 0.0
    for i in range(n):
        e = ar * e + rng.normal(0.0, noise * np.sqrt(1 - ar * ar))
        eps[i] = e
    count = 0.0
    current_start = None
    for i in range(n):
        st = max(s for s in starts if s <= t[i])
        if st != current_start:
            # A restart: counter back to zero (served before the first sample of a later process
            # are ignored; the lead-in process has served lead_in * rate).
            count = rng.poisson(requests_per_s * (t[i] - st)) if current_start is None else 0.0
            current_start = st
        else:
            count += arrivals[i]
        start_time[i] = st
        requests[i] = count
        age = t[i] - st
        ramp = warmup_bytes * min(age / warmup_s, 1.0) if warmup_s > 0 else warmup_bytes
        plateau = step_bytes if step_at is not None and t[i] >= t0 + step_at else 0.0
        memory[i] = base + ramp + plateau + bytes_per_request * count + eps[i]
    return Scenario(t, requests, start_time, {role: memory})


def to_openmetrics(
    s: Scenario,
    job: str = "vllm",
    instance: str = "127.0.0.1:8000",
    alerts: tuple[tuple[str, float, float], ...] = (),
    sides: dict[str, Scenario] | None = None,
    side_label: str = "deployment",
) -> str:
    """The scenario as vLLM and exporter series (timestamps in seconds, `# EOF` last), for
    `promtool tsdb create-blocks-from openmetrics`; `alerts` (name, from, to) become ALERTS series.
    With `sides` ({"stable": s, "canary": s2}), each scenario's vLLM and exporter series carry
    `side_label="<name>"` (a stable and a canary deployment scraped by one Prometheus) and `s` is
    not written."""
    parts = [("", s)] if sides is None else [(f',{side_label}="{name}"', side) for name, side in sides.items()]
    out = [
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
    ]
    for extra, sc in parts:
        lab = f'job="{job}",instance="{instance}"{extra}'
        out += [
            f'vllm:request_success_total{{{lab},model_name="demo",finished_reason="length"}} {r:.0f} {t:.3f}'
            for t, r in zip(sc.t, sc.requests)
        ]
    out += ["# HELP process_start_time_seconds Start time of the process.", "# TYPE process_start_time_seconds gauge"]
    for extra, sc in parts:
        lab = f'job="{job}",instance="{instance}"{extra}'
        out += [f"process_start_time_seconds{{{lab}}} {st:.3f} {t:.3f}" for t, st in zip(sc.t, sc.start_time)]
    out += [
        "# HELP leakwatch_process_resident_memory_bytes RSS per role.",
        "# TYPE leakwatch_process_resident_memory_bytes gauge",
    ]
    for extra, sc in parts:
        exp = f'job="leakwatch",instance="127.0.0.1:9405"{extra}'
        for role, values in sc.memory.items():
            out += [
                f'leakwatch_process_resident_memory_bytes{{{exp},role="{role}",rank=""}} {v:.0f} {t:.3f}'
                for t, v in zip(sc.t, values)
            ]
    out += ["# HELP leakwatch_process_swap_bytes Swap per role.", "# TYPE leakwatch_process_swap_bytes gauge"]
    for extra, sc in parts:
        exp = f'job="leakwatch",instance="127.0.0.1:9405"{extra}'
        for role in sc.memory:
            out += [f'leakwatch_process_swap_bytes{{{exp},role="{role}",rank=""}} 0 {t:.3f}' for t in sc.t]
    if s.endpoints:
        out += [
            "# HELP http_requests_total Total number of requests by method, status and handler.",
            "# TYPE http_requests_total counter",
        ]
        lab = f'job="{job}",instance="{instance}"'
        for handler, counts in s.endpoints.items():
            out += [
                f'http_requests_total{{{lab},handler="{handler}",method="POST",status="2xx"}} {c:.0f} {t:.3f}'
                for t, c in zip(s.t, counts)
            ]
    out += ["# HELP node_memory_MemAvailable_bytes Memory available.", "# TYPE node_memory_MemAvailable_bytes gauge"]
    out += [f'node_memory_MemAvailable_bytes{{job="node",instance="127.0.0.1:9100"}} {8e9:.0f} {t:.3f}' for t in s.t]
    if alerts:
        out += ["# HELP ALERTS Alerts as Prometheus records them.", "# TYPE ALERTS gauge"]
        for name, start, end in alerts:
            out += [
                f'ALERTS{{alertname="{name}",alertstate="firing",severity="critical"}} 1 {t:.3f}'
                for t in s.t
                if start <= t <= end
            ]
    out.append("# EOF")
    return "\n".join(out) + "\n"
