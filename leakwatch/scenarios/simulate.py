"""Turns a Scenario into the samples Prometheus would have scraped: vLLM's /metrics, DCGM, node
exporter and `leakwatch exporter` (its baseline, growth, growth per request, retention and restart
count from the exporter's own leakwatch/exporter/derived.py, fed what it would sample), one scrape
per tick.

Deterministic for a scenario's seed. vLLM's own series vanish while it restarts (Prometheus sees
`up == 0`), its counters restart from zero, and the exporter re-takes its baseline.
"""

from __future__ import annotations

import calendar
import math
import random
import time

from ..core.settings import load as load_settings
from ..core.topology import compose_target

# vLLM's histogram edges: one definition, the load generator's (tests check it against vLLM's /metrics).
from ..exporter.derived import DerivedState, Sample
from ..exporter.vllm_scrape import VllmStats
from ..loadgen.stats import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS
from .memory_model import MemoryModel
from .model import MIB, ROLES, Scenario
from .simulation_result import GPU_OUT_OF_MEMORY, HEALER_RESTART, HOST_OUT_OF_MEMORY, SimulationResult, Sink
from .traffic_model import TrafficModel, poisson

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")

# Each exporter's series labelled as Prometheus labels them under compose.
_SETTINGS = load_settings()
VLLM = compose_target(_SETTINGS, "vllm")
NODE = compose_target(_SETTINGS, "node_exporter")
DCGM = compose_target(_SETTINGS, "dcgm_exporter")
EXPORTER = compose_target(_SETTINGS, "leakwatch_exporter")
HOSTNAME = "gpu-host"
# Resident file pages (libraries, mmapped weights) per process: RSS minus them is the anonymous part.
FILE_BACKED_BYTES = 240 * MIB
SAMPLE_CAP = 64  # per tick, latencies of at most this many requests are drawn; counts are scaled


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


class Histogram:
    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.reset()

    def reset(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)  # cumulative at output time; +Inf last
        self.total = 0.0

    def observe(self, values: list[float], weight: float = 1.0) -> None:
        for v in values:
            for i, b in enumerate(self.bounds):
                if v <= b:
                    self.counts[i] += weight
                    break
            else:
                self.counts[-1] += weight
            self.total += v * weight

    def samples(self, name: str, labels: dict) -> list[tuple[str, float]]:
        cache_key = (name, tuple(labels.items()))
        texts = _HISTOGRAM_TEXTS.get(cache_key)
        if texts is None:
            les = [repr(float(b)) for b in self.bounds] + ["+Inf"]
            texts = [series(f"{name}_bucket", {**labels, "le": le}) for le in les]
            texts += [series(f"{name}_sum", labels), series(f"{name}_count", labels)]
            _HISTOGRAM_TEXTS[cache_key] = texts
        out: list[tuple[str, float]] = []
        running = 0.0
        for text, c in zip(texts, self.counts):
            running += c
            out.append((text, round(running)))
        out.append((texts[-2], round(self.total, 3)))
        out.append((texts[-1], round(running)))
        return out


class Simulator:
    def __init__(self, scenario: Scenario, resolution_s: float = 60.0):
        self.sc = scenario
        self.dt = float(resolution_s)
        self.rng = random.Random(scenario.seed)
        midnight = calendar.timegm(time.strptime(scenario.start_date, "%Y-%m-%d"))
        self.start = midnight + scenario.start_hour * 3600
        self.end = self.start + scenario.days * 86400
        self.result = SimulationResult(scenario.name, self.start, self.end, self.dt)
        self.model_labels = {**VLLM, "engine": "0", "model_name": scenario.model_name}
        self._labels: dict = {}
        self._texts: dict = {}
        self.ranks = [str(i) for i in range(scenario.gpu.count if scenario.gpu else 1)]
        self.restarts = 0
        # One random stream for every model: the order of their draws is part of what a seed gives.
        self.traffic = TrafficModel(scenario, self.rng, self.start)
        self.memory = MemoryModel(scenario, self.rng, self.dt, self.start, self.ranks, self.result.events)
        self.total_served = 0.0
        # The exporter's own derived-state code (baseline, retention, restarts), fed what it would
        # sample, so the backtester judges the rules against the exporter we ship.
        self.derived = DerivedState(warmup_requests=scenario.warmup_requests)
        self._start_process(self.start, "vLLM starts")
        self.restarts = 0

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
                i = key[0]
                found = {
                    **DCGM,
                    "gpu": str(i),
                    "UUID": f"GPU-5f1c2b7e-0000-4000-8000-{i:012d}",
                    "device": f"nvidia{i}",
                    "modelName": self.sc.gpu.model_name,
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

    # -- lifecycle -------------------------------------------------------------------------------

    def _start_process(self, t: float, why: str) -> None:
        sc = self.sc
        self.result.events.append((t, why))
        self.process_start = t
        self.ready_at = t + sc.restart_downtime_s
        self.restarts += 1
        self.served = 0  # requests since this process started
        self.counters = {reason: 0.0 for reason in FINISHED_REASONS}
        self.http = {"2xx": 0.0}
        self.gc = [0.0, 0.0, 0.0]
        self.preemptions = 0.0
        self.kv = 0.0
        self.hist = {
            "vllm:time_to_first_token_seconds": Histogram(TTFT_BUCKETS),
            "vllm:inter_token_latency_seconds": Histogram(ITL_BUCKETS),
            "vllm:e2e_request_latency_seconds": Histogram(E2E_BUCKETS),
        }
        self.memory.restart()

    # -- one scrape --------------------------------------------------------------------------------

    def run(self, sink: Sink) -> SimulationResult:
        t = self.start
        while t < self.end - 1e-9:
            sink.tick(t, self.step(t))
            t += self.dt
        return self.result

    def step(self, t: float) -> list[tuple[str, float]]:
        sc, dt = self.sc, self.dt
        if sc.daily_restart_hour is not None:
            boundary = (math.floor((t - sc.daily_restart_hour * 3600) / 86400) * 86400) + sc.daily_restart_hour * 3600
            if t - dt < boundary <= t and t - self.process_start > 3600:
                self._start_process(t, "planned daily restart")
        for at_s in sc.healer_restarts_s:
            if t - dt < self.start + at_s <= t:
                self._start_process(t, HEALER_RESTART)
        ready = t >= self.ready_at
        starting_share = 1.0 if ready else max(0.0, (t - self.process_start) / sc.restart_downtime_s)

        traffic = self.traffic.tick(t, dt, ready)
        n, long, running, waiting = traffic.n, traffic.long, traffic.running, traffic.waiting
        samples: list[tuple[str, float]] = []
        add = samples.append
        leak_started = False
        gpu_used: list[float] = []
        if ready:
            self.memory.sawtooth_step(t, n)
        self.total_served += n
        self.result.requests_served.append((t, self.total_served))
        if sc.gpu:
            gpu_used, leaked = self.memory.gpu_step(t, ready, n, running, long, starting_share)
            leak_started |= leaked
            if ready and any(u >= sc.gpu.total_mib for u in gpu_used):
                self.result.events.append((t, GPU_OUT_OF_MEMORY))
                self._start_process(t, "vLLM restarts after the crash")
                return self.step(t)
        if ready:
            leak_started |= self.memory.host_step(t, n, long)
        self.memory.count_long_requests(long)
        mem = self.memory.host_state(t, ready, starting_share, running, self.ready_at)
        rss_now, swap_now, pss_now, cgroup_usage = mem.rss, mem.swap, mem.pss, mem.cgroup_usage
        if ready and mem.out_of_memory:
            self.result.events.append((t, HOST_OUT_OF_MEMORY))
            self._start_process(t, "vLLM restarts after the OOM kill")
            return self.step(t)

        if leak_started and self.result.leak_start is None:
            self.result.leak_start = t
            self.result.events.append((t, "leak starts"))
            if sc.gpu:
                self.result.gpu_headroom_bytes = (sc.gpu.total_mib - gpu_used[0]) * MIB
        if gpu_used:
            self.result.gpu_used_bytes.append((t, gpu_used[0] * MIB))

        # vLLM's /metrics (only once it answers).
        add((self.tx("up", VLLM), 1.0 if ready else 0.0))
        if ready:
            self._serve(t, n, running, waiting, traffic.in_burst)
            labels = self.model_labels
            for reason in FINISHED_REASONS:
                add((self.tx("vllm:request_success_total", labels, "finished_reason", reason), self.counters[reason]))
            for status, value in self.http.items():
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
            add((self.tx("vllm:num_requests_running", labels), running))
            add((self.tx("vllm:num_requests_waiting", labels), waiting))
            add((self.tx("vllm:kv_cache_usage_perc", labels), round(self.kv, 4)))
            add((self.tx("vllm:num_preemptions_total", labels), self.preemptions))
            for name, hist in self.hist.items():
                samples.extend(hist.samples(name, labels))
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
            add((self.tx("process_start_time_seconds", VLLM), round(self.process_start, 2)))
            add((self.tx("process_resident_memory_bytes", VLLM), round(rss_now[("api_server", "")])))
            for gen in range(3):
                add((self.tx("python_gc_collections_total", VLLM, "generation", str(gen)), self.gc[gen]))

        # DCGM, per card (MiB, integers).
        if sc.gpu:
            add((self.tx("up", DCGM), 1.0))
            for i, used in enumerate(gpu_used):
                labels = self.labels("dcgm", i)
                add((self.tx("DCGM_FI_DEV_FB_USED", labels), used))
                add((self.tx("DCGM_FI_DEV_FB_FREE", labels), sc.gpu.total_mib - used))

        # node exporter.
        add((self.tx("up", NODE), 1.0))
        add((self.tx("node_memory_MemTotal_bytes", NODE), sc.host.mem_total_bytes))
        add((self.tx("node_memory_MemAvailable_bytes", NODE), round(mem.available)))
        add((self.tx("node_memory_SwapTotal_bytes", NODE), sc.host.swap_total_bytes))
        add((self.tx("node_memory_SwapFree_bytes", NODE), round(mem.swap_free)))

        self._exporter(t, add, ready, running + waiting, rss_now, swap_now, pss_now, cgroup_usage, gpu_used)
        return samples

    def _serve(self, t: float, n: int, running: float, waiting: float, in_burst: bool) -> None:
        """Counters and histograms for the n requests that finished during this tick."""
        sc, rng, tr = self.sc, self.rng, self.sc.traffic
        self.served += n
        errors = min(n, poisson(rng, n * tr.error_share))
        ok = n - errors
        if errors:
            self.http["5xx"] = self.http.get("5xx", 0.0) + errors
        self.http["2xx"] += ok
        length = round(ok * 0.3)
        self.counters["length"] += length
        self.counters["stop"] += ok - length
        self.counters["error"] += errors
        tokens_per_seq = sum(tr.prompt_tokens) / 2 + sum(tr.output_tokens) / 4
        demand = (running - (tr.burst_concurrency if in_burst else 0)) * tokens_per_seq
        if in_burst:
            demand += tr.burst_concurrency * (tr.burst_prompt_tokens + sum(tr.output_tokens) / 4)
        capacity = sc.gpu.kv_capacity_tokens if sc.gpu else 2_000_000
        self.kv = min(1.0, demand / capacity)
        if demand > 0.97 * capacity:
            self.preemptions += max(1, round((demand - 0.97 * capacity) / tokens_per_seq))
        # Gen-0 collections follow allocations (per request), plus the scrapes' own.
        self.gc[0] += n * 30 + 2
        self.gc[1] = math.floor(self.gc[0] / 11)
        self.gc[2] = math.floor(self.gc[1] / 12)
        if n == 0:
            return
        load = 1 + running / 128  # decoding a few more sequences per step costs little
        drawn = min(n, SAMPLE_CAP)
        weight = n / drawn
        ttft: list[float] = []
        e2e: list[float] = []
        itl: list[float] = []
        out_tokens = 0
        for _ in range(drawn):
            first = rng.lognormvariate(math.log(tr.ttft_median_s * (1 + running / 32)), tr.ttft_sigma)
            tokens = rng.randint(*tr.output_tokens)
            step = rng.lognormvariate(math.log(tr.itl_median_s * load), tr.itl_sigma)
            ttft.append(first)
            e2e.append(first + tokens * step)
            itl.extend(rng.lognormvariate(math.log(step), 0.15) for _ in range(4))
            out_tokens += tokens
        self.hist["vllm:time_to_first_token_seconds"].observe(ttft, weight)
        self.hist["vllm:e2e_request_latency_seconds"].observe(e2e, weight)
        self.hist["vllm:inter_token_latency_seconds"].observe(itl, out_tokens * weight / len(itl))

    def _exporter(self, t, add, ready, in_flight, rss_now, swap_now, pss_now, cgroup_usage, gpu_used) -> None:
        """`leakwatch exporter`'s series, computed as its contract describes."""
        sc = self.sc
        add((self.tx("up", EXPORTER), 1.0))
        alive = True  # the processes exist while vLLM starts; they are replaced in one tick
        for role in ROLES:
            count = len(self.ranks) if role == "worker" else 1
            add((self.tx("leakwatch_processes", EXPORTER, "role", role), count if alive else 0))
        for (role, rank), value in rss_now.items():
            labels = self.labels("process", role, rank)
            add((self.tx("leakwatch_process_resident_memory_bytes", labels), round(value)))
            anonymous = max(0.0, value - FILE_BACKED_BYTES)
            add((self.tx("leakwatch_process_anonymous_memory_bytes", labels), round(anonymous)))
            add((self.tx("leakwatch_process_unique_memory_bytes", labels), round(max(0.0, value - 250 * MIB))))
            add((self.tx("leakwatch_process_proportional_memory_bytes", labels), round(pss_now[(role, rank)])))
            add((self.tx("leakwatch_process_swap_bytes", labels), round(swap_now[(role, rank)])))
        add((self.tx("leakwatch_cgroup_memory_usage_bytes", EXPORTER), round(cgroup_usage)))
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
            hours = (t - self.ready_at) / 3600
            grown = 40 if self.served else 0
            add(
                (
                    self.tx("leakwatch_vllm_metrics_series", EXPORTER),
                    sc.metrics_series + grown + math.floor(hours * sc.metrics_series_per_hour),
                )
            )

        host_by_role = {role: round(sum(rss_now[k] + swap_now[k] for k in rss_now if k[0] == role)) for role in ROLES}
        gpu_bytes = {str(i): round(u * MIB) for i, u in enumerate(gpu_used)}
        self.derived.update(
            Sample(
                time=t,
                # A new API server process each start: the exporter's restart signal.
                identity=(1000 + self.restarts, round(self.process_start)),
                vllm=VllmStats(series=0, requests_served=float(self.served), in_flight=float(in_flight))
                if ready
                else None,
                healthy=ready,
                host=host_by_role,
                gpu=gpu_bytes or None,
            )
        )
        add((self.tx("leakwatch_vllm_restarts_total", EXPORTER), float(self.derived.restarts)))
        b = self.derived.baseline
        add((self.tx("leakwatch_baseline_ready", EXPORTER), 1.0 if (ready and b) else 0.0))
        if not (ready and b):
            return
        since = self.served - b.requests
        add((self.tx("leakwatch_baseline_timestamp_seconds", EXPORTER), round(b.time)))
        add((self.tx("leakwatch_requests_since_baseline", EXPORTER), float(since)))
        ratios = self.derived.retention.ratios
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


def simulate(scenario: Scenario, sink: Sink, resolution_s: float = 60.0) -> SimulationResult:
    return Simulator(scenario, resolution_s).run(sink)
