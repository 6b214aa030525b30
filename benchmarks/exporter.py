"""`make bench-exporter`: what a scrape of `leakwatch exporter` costs, next to node exporter's.

Needs a real vLLM process tree: `--vllm-url` of a running server, or (default) the native stack
started on free ports in a private state directory. The bench starts its own `leakwatch exporter`
and node exporter (Debian's prometheus-node-exporter), sends some traffic, then scrapes both every
5 s for a minute, plus a run of back-to-back scrapes for the latency distribution.

- scrape_ms: median wall time of one scrape, as the client sees it;
- cpu_pct: the exporter process's CPU time over the paced minute divided by its wall time: the share
  of one core at a 5 s scrape interval, background sampling included.

The last line reads `exporter: scrape_ms=X cpu_pct=Y` (targets: < 50 ms, < 1 %).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from leakwatch.core.ports import free_port  # noqa: E402
from leakwatch.core.settings import load as load_settings  # noqa: E402
from leakwatch.core.shutdown import unwind_on_sigterm  # noqa: E402
from leakwatch.exporter.host_memory import HostMemory  # noqa: E402
from leakwatch.exporter.process_tree import Discovery  # noqa: E402
from leakwatch.exporter.procfs import ProcFS  # noqa: E402
from leakwatch.native.programs import binary  # noqa: E402
from leakwatch.native.runner import NativeStack  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


VLLM_WAIT = 'leakwatch_collector_duration_seconds{collector="vllm"} '


def scrape(session: requests.Session, url: str, vllm_waits: list[float] | None = None) -> float:
    start = time.perf_counter()
    resp = session.get(url, timeout=30)
    resp.raise_for_status()
    elapsed = (time.perf_counter() - start) * 1000
    if vllm_waits is not None:  # our exporter: how much of it was waiting for vLLM's /metrics
        line = next(line for line in resp.text.splitlines() if line.startswith(VLLM_WAIT))
        vllm_waits.append(float(line.split()[-1]) * 1000)
    return elapsed


def smaps_cost(vllm_port: int, rounds: int = 10) -> tuple[float, float]:
    """(ms per scrape reading smaps_rollup of every vLLM process, ms with the cached values)."""
    procfs = ProcFS()
    tree = Discovery(procfs, vllm_port).find()
    uncached, cached = HostMemory(procfs, smaps_interval_s=0), HostMemory(procfs, smaps_interval_s=3600)
    cached.read(tree, print)
    timings = []
    for memory in (uncached, cached):
        start = time.process_time()
        for _ in range(rounds):
            memory.read(tree, print)
        timings.append((time.process_time() - start) * 1000 / rounds)
    return timings[0], timings[1]


@contextlib.contextmanager
def vllm_server(url: str | None):
    """(vLLM base URL, served model name): the given server, or a native stack started for the run."""
    if url:
        yield url.rstrip("/"), requests.get(f"{url.rstrip('/')}/v1/models", timeout=30).json()["data"][0]["id"]
        return
    state = Path(tempfile.mkdtemp(prefix="lw-bench-", dir="/tmp"))
    os.environ.update({svc.port_env: str(free_port()) for svc in load_settings().services.values()})
    os.environ["LEAKWATCH_STATE_DIR"] = str(state)
    stack = NativeStack()
    try:
        print("starting the native stack for its vLLM CPU server ...", flush=True)
        stack.up("demo", out=io.StringIO())
        yield stack.urls()["vllm"], stack.info()["served_model_name"]
    finally:
        stack.down(out=io.StringIO())
        shutil.rmtree(state, ignore_errors=True)


@contextlib.contextmanager
def exporters(vllm_url: str):
    """Our exporter (default settings) and node exporter on free ports: name -> (metrics URL, pid)."""
    ours, node = free_port(), free_port()
    procs = {
        "exporter": (
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "leakwatch",
                    "exporter",
                    "--vllm-url",
                    vllm_url,
                    "--listen-address",
                    "127.0.0.1",
                    "--port",
                    str(ours),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            ),
            ours,
        ),
        "node": (
            subprocess.Popen(
                [binary("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{node}"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            ),
            node,
        ),
    }
    try:
        targets = {}
        for name, (proc, port) in procs.items():
            url = f"http://127.0.0.1:{port}/metrics"
            deadline = time.monotonic() + 60
            while True:
                try:
                    requests.get(url, timeout=10).raise_for_status()
                    break
                except requests.RequestException:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"{name} did not start") from None
                    time.sleep(0.2)
            targets[name] = (url, proc.pid)
        yield targets
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-url", help="a running vLLM server (default: start the native stack)")
    parser.add_argument("--interval", type=float, default=5.0, help="scrape interval of the paced run (s)")
    parser.add_argument("--paced", type=int, default=12, help="paced scrapes per exporter")
    parser.add_argument("--burst", type=int, default=50, help="back-to-back scrapes per exporter")
    args = parser.parse_args()
    unwind_on_sigterm()  # the stack and exporters it starts are stopped on the way out

    with vllm_server(args.vllm_url) as (vllm_url, model), exporters(vllm_url) as running:
        targets = {name: url for name, (url, _) in running.items()}
        pids = {name: pid for name, (_, pid) in running.items()}
        for i in range(20):  # populate vLLM's histograms and counters
            requests.post(
                f"{vllm_url}/v1/completions",
                timeout=60,
                json={"model": model, "prompt": f"bench {i}", "max_tokens": 16},
            ).raise_for_status()
        sessions = {name: requests.Session() for name in targets}
        for name, url in targets.items():
            scrape(sessions[name], url)  # first scrape: connection, NVML probe, smaps cache filled

        latencies: dict[str, list[float]] = {name: [] for name in targets}
        waits = {"exporter": [], "node": None}
        cpu_start = {name: cpu_seconds(pid) for name, pid in pids.items()}
        wall_start = time.monotonic()
        for i in range(args.paced):
            tick = wall_start + i * args.interval
            time.sleep(max(0.0, tick - time.monotonic()))
            for name, url in targets.items():
                latencies[name].append(scrape(sessions[name], url, waits[name]))
        time.sleep(max(0.0, wall_start + args.paced * args.interval - time.monotonic()))
        wall = time.monotonic() - wall_start
        cpu_pct = {name: (cpu_seconds(pid) - cpu_start[name]) / wall * 100 for name, pid in pids.items()}
        for _ in range(args.burst):
            for name, url in targets.items():
                latencies[name].append(scrape(sessions[name], url, waits[name]))

        uncached, cached = smaps_cost(int(vllm_url.rsplit(":", 1)[1]))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs during the run")
        print(
            f"exporter: waiting for vLLM's own /metrics (fetched in parallel with /proc): median "
            f"{statistics.median(waits['exporter']):.1f} ms per scrape"
        )
        results = {}
        for name in targets:
            values = sorted(latencies[name])
            results[name] = (statistics.median(values), values[int(0.9 * (len(values) - 1))])
            print(
                f"{name:<9} scrapes={len(values)} median_ms={results[name][0]:.1f} p90_ms={results[name][1]:.1f} "
                f"cpu_pct={cpu_pct[name]:.3f} (paced every {args.interval:g}s for {wall:.0f}s)"
            )
        print(
            f"smaps_rollup of vLLM's processes: {uncached:.1f} ms CPU per scrape when read every time, "
            f"{cached:.2f} ms cached (the exporter re-reads it every 60 s per process)"
        )
        print(f"exporter: scrape_ms={results['exporter'][0]:.1f} cpu_pct={cpu_pct['exporter']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
