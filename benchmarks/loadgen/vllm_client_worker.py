"""vLLM's own benchmark client (`vllm.benchmarks.serve`) as a long-lived worker for `make bench-loadgen`.

Importing vLLM takes seconds, so the benchmark starts this once and sends it one JSON argument list
per run on stdin; each run answers one JSON line on stdout with the per-request TTFTs and ITLs and
the CPU time this process spent inside the run. vLLM's own printout goes to stderr.

    python -m benchmarks.loadgen.vllm_client_worker
"""

from __future__ import annotations

import contextlib
import json
import resource
import sys
import time
import traceback


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    from vllm.benchmarks.serve import add_cli_args, main as serve_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    out = sys.stdout
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        cpu0, wall0 = _cpu(), time.perf_counter()
        try:
            args = parser.parse_args(json.loads(line))
            with contextlib.redirect_stdout(sys.stderr):
                result = serve_main(args)
        except (Exception, SystemExit):  # noqa: BLE001 - reported to the benchmark, which stops
            print(json.dumps({"error": traceback.format_exc()}), file=out, flush=True)
            continue
        cpu1, wall1 = _cpu(), time.perf_counter()
        # Per request, for pairing with a reference server's record: its first generated word is the
        # request's key there (benchmarks.loadgen.reference_server).
        paired = [
            {"key": (text or "").split()[0], "ttft": ttft, "itls": itl}
            for text, ttft, itl in zip(result["generated_texts"], result["ttfts"], result["itls"])
            if ttft and (text or "").split()
        ]
        print(
            json.dumps(
                {
                    "requests": paired,
                    "duration": result["duration"],
                    "completed": result["completed"],
                    "output_tokens": sum(n for n in result["output_lens"] if n),
                    "ttfts": [t for t in result["ttfts"] if t],
                    "itls": [g for itl in result["itls"] for g in itl],
                    "errors": [e for e in result["errors"] if e][:5],
                    "cpu_seconds": cpu1 - cpu0,
                    "wall_s": wall1 - wall0,
                }
            ),
            file=out,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
