"""Per-workload streaming statistics of one load process, or of all of them merged on the master.

Workers record into a delta that goes to the master with every Locust stats report and is then
cleared; the master (or a local runner) keeps the totals that the web UI tab, the CSV, the HTML report,
the JSON summary and the Prometheus exporter read.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections import Counter

from .histogram import Distribution
from .outcomes import OK, StreamResult

# vLLM's own histogram edges (vllm/v1/metrics/buckets.py, release in config/stack.yaml), so client and
# server histograms compare bucket for bucket; tests/stack/test_loadgen_live.py checks them against a live /metrics.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)

# metric key -> (label in tables, bucket edges)
METRICS = {
    "ttft": ("time to first token", TTFT_BUCKETS),
    "itl": ("inter-token latency", ITL_BUCKETS),
    "tpot": ("time per output token", ITL_BUCKETS),
    "e2e": ("end-to-end latency", E2E_BUCKETS),
    "queue_delay": ("client queue delay", TTFT_BUCKETS),
}
QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)


class WorkloadStats:
    __slots__ = ("dists", "outcomes", "output_tokens", "prompt_tokens")

    def __init__(self):
        self.dists = {key: Distribution(edges) for key, (_, edges) in METRICS.items()}
        self.outcomes: Counter[str] = Counter()
        self.prompt_tokens = 0
        self.output_tokens = 0

    def record(self, result: StreamResult, queue_delay: float) -> None:
        self.outcomes[result.outcome] += 1
        if result.prompt_tokens:
            self.prompt_tokens += result.prompt_tokens
        if result.output_tokens:
            self.output_tokens += result.output_tokens
        if result.outcome != OK:
            return
        d = self.dists
        d["ttft"].record(result.ttft)
        itl = d["itl"].record
        for gap in result.itls:
            itl(gap)
        if result.tpot is not None:
            d["tpot"].record(result.tpot)
        d["e2e"].record(result.e2e)
        d["queue_delay"].record(queue_delay)

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())

    def to_wire(self) -> dict:
        return {
            "dists": {k: v.to_wire() for k, v in self.dists.items()},
            "outcomes": dict(self.outcomes),
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        }

    def merge_wire(self, wire: dict) -> None:
        for key, dist in wire["dists"].items():
            self.dists[key].merge_wire(dist)
        self.outcomes.update(wire["outcomes"])
        self.prompt_tokens += wire["prompt_tokens"]
        self.output_tokens += wire["output_tokens"]


class RunStats:
    def __init__(self):
        self.workloads: dict[str, WorkloadStats] = {}
        self.started = time.time()
        self.stopped: float | None = None
        self.in_flight = 0  # streams open now (this process, or the sum the workers reported)
        self.max_in_flight = 0
        self.worker_in_flight: dict[str, int] = {}
        self.cpu_seconds: dict[str, float] = {}  # process -> CPU seconds during the test

    def workload(self, name: str) -> WorkloadStats:
        stats = self.workloads.get(name)
        if stats is None:
            stats = self.workloads[name] = WorkloadStats()
        return stats

    def record(self, workload: str, result: StreamResult, queue_delay: float) -> None:
        self.workload(workload).record(result, queue_delay)

    def stream_opened(self) -> None:
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight

    def stream_closed(self) -> None:
        self.in_flight -= 1

    # -- worker -> master ---------------------------------------------------------------------------

    def take_delta(self) -> dict:
        """What a worker sends with a stats report; its counters start again from zero."""
        wire = {
            "workloads": {name: w.to_wire() for name, w in self.workloads.items()},
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "cpu_seconds": self.cpu_seconds,
        }
        self.workloads = {}
        self.max_in_flight = self.in_flight
        return wire

    def merge_delta(self, client_id: str, wire: dict) -> None:
        for name, w in wire["workloads"].items():
            self.workload(name).merge_wire(w)
        self.worker_in_flight[client_id] = wire["in_flight"]
        self.in_flight = sum(self.worker_in_flight.values())
        # Per-worker peaks may not coincide: the sum is an upper bound, the current sum a lower one.
        self.max_in_flight = max(self.max_in_flight, self.in_flight, wire["max_in_flight"])
        self.cpu_seconds.update(wire["cpu_seconds"])

    def reset(self) -> None:
        self.__init__()

    # -- reports ------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return max(1e-9, (self.stopped or time.time()) - self.started)

    def rows(self) -> list[dict]:
        """One row per workload and metric: count, mean and quantiles in milliseconds (3 decimals)."""
        rows = []
        for name in sorted(self.workloads):
            w = self.workloads[name]
            for key, (label, _) in METRICS.items():
                d = w.dists[key]
                row = {
                    "workload": name,
                    "metric": label,
                    "count": d.count,
                    "mean": _ms(d.mean),
                    "min": _ms(d.min if d.count else math.nan),
                }
                for q in QUANTILES:
                    row[_qkey(q)] = _ms(d.quantile(q))
                row["max"] = _ms(d.max if d.count else math.nan)
                rows.append(row)
        return rows

    def totals(self) -> list[dict]:
        """One row per workload: requests, failures, tokens and throughput."""
        out = []
        elapsed = self.elapsed()
        for name in sorted(self.workloads):
            w = self.workloads[name]
            failures = {k: v for k, v in w.outcomes.items() if k not in (OK, "cancelled")}
            out.append(
                {
                    "workload": name,
                    "requests": w.requests,
                    "ok": w.outcomes.get(OK, 0),
                    "failed": sum(failures.values()),
                    "cancelled": w.outcomes.get("cancelled", 0),
                    "failures": ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "-",
                    "prompt_tokens": w.prompt_tokens,
                    "output_tokens": w.output_tokens,
                    "requests_per_s": round(w.outcomes.get(OK, 0) / elapsed, 3),
                    "output_tokens_per_s": round(w.output_tokens / elapsed, 1),
                }
            )
        return out

    def csv_text(self) -> str:
        buf = io.StringIO()
        rows = self.rows()
        if rows:
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        buf.write("\n")
        totals = self.totals()
        if totals:
            writer = csv.DictWriter(buf, fieldnames=list(totals[0]))
            writer.writeheader()
            writer.writerows(totals)
        return buf.getvalue()

    def summary(self) -> dict:
        """Everything at full precision (seconds), for --loadgen-summary and the benchmark."""
        out = {
            "elapsed_s": self.elapsed(),
            "max_in_flight": self.max_in_flight,
            "cpu_seconds": dict(self.cpu_seconds),
            "workloads": {},
        }
        for name, w in self.workloads.items():
            entry = {"outcomes": dict(w.outcomes), "prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens}
            for key, d in w.dists.items():
                entry[key] = {
                    "count": d.count,
                    "mean": _num(d.mean),
                    "min": _num(d.min),
                    "max": _num(d.max),
                    **{_qkey(q): _num(d.quantile(q)) for q in QUANTILES},
                }
            out["workloads"][name] = entry
        return out


def _qkey(q: float) -> str:
    return "p" + f"{q * 100:g}".replace(".", "")


def _ms(seconds: float) -> float | None:
    return None if seconds is None or not math.isfinite(seconds) else round(seconds * 1000, 3)


def _num(value: float) -> float | None:
    return value if value is not None and math.isfinite(value) else None
