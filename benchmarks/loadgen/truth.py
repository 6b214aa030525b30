"""Clients judged against the truth: each client's TTFT and ITL next to what the reference server did.

The reference server (benchmarks.loadgen.reference_server) records, per request key, when it read the
request and when it wrote each token. A client's request is paired with that record by the key: the
load generator's request log holds the x-request-id it sent; vLLM's benchmark client keeps the
generated text, whose first word the server wrote as the key. Error = the client's quantile minus
the truth's quantile over the same requests (ms, and % of the truth).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import requests

from leakwatch.core.settings import ready_path

MODEL = "reference"
# The scripted timings (known distributions): log-normal TTFT, gamma ITL.
TTFT_MEDIAN_MS = 200.0
TTFT_SIGMA = 0.5
ITL_MEAN_MS = 50.0
ITL_SHAPE = 4.0
# Acceptance: an error within 2 ms or 5 % of the truth, whichever is larger.
ABS_TOLERANCE_S = 0.002
REL_TOLERANCE = 0.05


def start(
    port: int,
    log_path: Path,
    seed: int = 0,
    ttft_median_ms: float = TTFT_MEDIAN_MS,
    itl_mean_ms: float = ITL_MEAN_MS,
) -> subprocess.Popen:
    """The reference server on 127.0.0.1:port, once it answers (faster scripts for tests that only
    need a real streaming server, not the benchmark's timings)."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.loadgen.reference_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        MODEL,
        "--ttft-median-ms",
        str(ttft_median_ms),
        "--ttft-sigma",
        str(TTFT_SIGMA),
        "--itl-mean-ms",
        str(itl_mean_ms),
        "--itl-shape",
        str(ITL_SHAPE),
        "--seed",
        str(seed),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=open(log_path, "w"),  # noqa: SIM115 - the child owns the log file for its whole life
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the reference server exited ({proc.returncode}); see {log_path}")
        try:
            if requests.get(f"{url}{ready_path('vllm')}", timeout=2).status_code == 200:
                return proc
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the reference server did not answer within 60 s; see {log_path}")


def take_record(url: str) -> dict:
    """The server's record since the last call (and a fresh one for the next run)."""
    record = requests.get(f"{url}/truth", timeout=60).json()
    requests.post(f"{url}/truth/reset", timeout=60)
    return record


def truth_of(entry: dict) -> tuple[float, list[float]]:
    tokens = entry["tokens"]
    return tokens[0] - entry["received"], [b - a for a, b in itertools.pairwise(tokens)]


def pairs_loadgen(run: dict, record: dict) -> list[tuple[float, float]]:
    out = []
    for row in run["rows"]:
        entry = record.get(row.get("request_id", ""))
        if entry and entry["tokens"]:
            out.append((float(row["ttft_s"]), truth_of(entry)[0]))
    return out


def pairs_vllm(run: dict, record: dict) -> list[tuple[float, float]]:
    out = []
    for req in run["requests"]:
        entry = record.get(req["key"])
        if entry and entry["tokens"]:
            out.append((float(req["ttft"]), truth_of(entry)[0]))
    return out


def judge(run: dict, record: dict) -> dict:
    """One client's run against the server's record: TTFT and ITL quantiles, client vs truth."""
    pairs = pairs_loadgen(run, record) if run["client"] == "loadgen" else pairs_vllm(run, record)
    if not pairs:
        raise SystemExit(f"no request of the {run['client']} run could be paired with the reference server's record")
    client = np.array([c for c, _ in pairs])
    truth = np.array([t for _, t in pairs])
    truth_itls = np.array([g for e in record.values() if len(e["tokens"]) > 1 for g in truth_of(e)[1]])
    if run["client"] == "loadgen":
        itl_p50, itl_p90 = run["itl_p50"], run["itl_p90"]
    else:
        itls = np.array(run["itls"])
        itl_p50, itl_p90 = float(np.percentile(itls, 50)), float(np.percentile(itls, 90))
    # How late the server itself was against its script (its truth stays what it did, but a late
    # server means a loaded machine).
    late = [truth_of(e)[0] - e["scripted_ttft"] for e in record.values() if e["tokens"] and "scripted_ttft" in e]
    out = {
        "client": run["client"],
        "paired": len(pairs),
        "completed": run["completed"],
        "records": len(record),
        "per_request_err_p50": float(np.median(client - truth)),
        "server_late_p90": float(np.percentile(late, 90)) if late else float("nan"),
    }
    for q in (50, 90):
        c, t = float(np.percentile(client, q)), float(np.percentile(truth, q))
        out[f"ttft_p{q}"], out[f"truth_ttft_p{q}"], out[f"ttft_p{q}_err"] = c, t, c - t
    out["itl_p50"], out["itl_p90"] = itl_p50, itl_p90
    out["truth_itl_p50"], out["truth_itl_p90"] = (
        float(np.percentile(truth_itls, 50)),
        float(np.percentile(truth_itls, 90)),
    )
    out["itl_p50_err"], out["itl_p90_err"] = itl_p50 - out["truth_itl_p50"], itl_p90 - out["truth_itl_p90"]
    return out


def within_tolerance(err_s: float, truth_s: float) -> bool:
    return abs(err_s) <= max(ABS_TOLERANCE_S, REL_TOLERANCE * truth_s)


def line(label: str, runs: list[dict]) -> str:
    """A client's figures at one level over its runs: the median error, and the run-to-run spread."""

    def ms(key):
        values = [r[key] * 1000 for r in runs]
        return f"{np.median(values):+7.2f} ms (spread {max(values) - min(values):5.2f})"

    t50 = np.median([r["truth_ttft_p50"] for r in runs]) * 1000
    t90 = np.median([r["truth_ttft_p90"] for r in runs]) * 1000
    return (
        f"  {label:<8} ttft p50 err {ms('ttft_p50_err')} of {t50:6.1f}, p90 err {ms('ttft_p90_err')} of {t90:6.1f}; "
        f"itl p50 err {ms('itl_p50_err')}, p90 err {ms('itl_p90_err')}; "
        f"paired {sum(r['paired'] for r in runs)}/{sum(r['completed'] for r in runs)}; "
        f"server behind its script p90 {np.median([r['server_late_p90'] for r in runs]) * 1000:.1f} ms"
    )


def median_err(runs: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in runs]))
