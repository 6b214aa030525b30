#!/usr/bin/env python3
"""GPU check for `leakwatch exporter` (needs an NVIDIA GPU; not part of CI, which has none).

A child process allocates a known amount of CUDA memory per step and keeps it (a GPU leak at a
known rate). After each step the exporter's own GPU collector (leakwatch.exporter.nvml, NVML) reads
the child's per-process GPU memory and the device's used memory. The check passes when, against the
reading before the first step,

  - the per-process growth per step is within +-5 % of the truth (--step-mib),
  - the per-process figure equals NVML's own per-process figure for that pid (the same read path
    nvidia-smi uses) and grows by steps x step size (+-5 %),
  - the device's used memory grows by the same amount (+-5 %; other tenants on the card add noise).

Run it from the repository root on the GPU host (torch with CUDA and nvidia-ml-py installed):

    python scripts/gpu/check_exporter.py --step-mib 64 --steps 10 [--device 0]

It prints one line per step and ends with `gpu-check: ok ...` (exit 0) or `gpu-check: FAILED ...`
(exit 1); exit 2 when there is no CUDA GPU to check against.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from leakwatch.exporter.nvml import Gpu
from leakwatch.exporter.process_tree import VllmProcess, VllmTree

MIB = 1 << 20
TOLERANCE = 0.05

# The leaking process: one block of step_mib per "step" line on stdin, kept until it exits. Sizes
# that are multiples of 2 MiB map 1:1 onto PyTorch's caching allocator segments.
CHILD = textwrap.dedent("""
    import sys, torch
    device, step = int(sys.argv[1]), int(sys.argv[2]) << 20
    torch.cuda.set_device(device)
    torch.zeros(1, device="cuda")            # create the CUDA context before the first reading
    torch.cuda.synchronize()
    kept = []
    print("ready", flush=True)
    for line in sys.stdin:
        kept.append(torch.ones(step, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        print(f"step {len(kept)} reserved {torch.cuda.memory_reserved()}", flush=True)
""")


def main() -> int:
    parser = argparse.ArgumentParser(description="check the exporter's GPU figures against a known CUDA leak")
    parser.add_argument("--step-mib", type=int, default=64, help="CUDA memory kept per step (MiB, default 64)")
    parser.add_argument("--steps", type=int, default=10, help="number of steps (default 10)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index = NVML index (default 0)")
    args = parser.parse_args()
    if args.step_mib <= 0 or args.steps <= 0:
        parser.error("--step-mib and --steps must be > 0")

    try:
        import torch
    except ImportError:
        print("gpu-check: needs PyTorch with CUDA on this host", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU here; run this on a GPU host", file=sys.stderr)
        return 2
    gpu = Gpu()
    if not gpu.available:
        print(f"gpu-check: NVML unavailable: {gpu.unavailable_reason}", file=sys.stderr)
        return 2

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(args.device), str(args.step_mib)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    key = (str(args.device), "worker", "0")
    tree = VllmTree(child.pid, 0, (VllmProcess(child.pid, "worker", "0", 0),))
    failures = []
    try:
        assert child.stdout.readline().strip() == "ready", "the CUDA child did not start"
        first = gpu.read(tree)
        base_proc, base_used = first.process.get(key), first.used[str(args.device)]
        if base_proc is None:
            print(
                "gpu-check: NVML reports no memory for the child process (driver without per-process "
                "accounting, or PIDs from another namespace)",
                file=sys.stderr,
            )
            return 1
        print(f"before: process {base_proc / MIB:.0f} MiB (CUDA context), device used {base_used / MIB:.0f} MiB")
        truth = args.step_mib * MIB
        for step in range(1, args.steps + 1):
            child.stdin.write("step\n")
            child.stdin.flush()
            reported = child.stdout.readline().strip()
            reading = gpu.read(tree)
            growth = reading.process[key] - base_proc
            device_growth = reading.used[str(args.device)] - base_used
            per_step = growth / step
            nvml_own = _nvml_process_memory(args.device, child.pid)
            print(
                f"step {step:>3}: process {reading.process[key] / MIB:.0f} MiB (+{growth / MIB:.0f}), "
                f"per step {per_step / MIB:.2f} MiB (truth {args.step_mib}), device +{device_growth / MIB:.0f} MiB"
                f"  [{reported}]"
            )
            if abs(per_step / truth - 1) > TOLERANCE:
                failures.append(f"step {step}: growth per step {per_step / MIB:.2f} MiB vs {args.step_mib}")
            if reading.process[key] != nvml_own:
                failures.append(f"step {step}: per-process figure {reading.process[key]} != NVML's {nvml_own}")
            if abs(device_growth / (step * truth) - 1) > TOLERANCE:
                failures.append(f"step {step}: device grew {device_growth / MIB:.0f} MiB vs {step * args.step_mib}")
    finally:
        child.stdin.close()
        child.terminate()
        child.wait(timeout=60)
    if failures:
        print("gpu-check: FAILED\n  " + "\n  ".join(failures))
        return 1
    print(
        f"gpu-check: ok: {args.steps} steps of {args.step_mib} MiB, per-process and device growth within "
        f"{TOLERANCE:.0%}"
    )
    return 0


def _nvml_process_memory(device: int, pid: int) -> int | None:
    """NVML's per-process figure read directly (not through leakwatch), to compare with the collector."""
    import pynvml as nvml

    handle = nvml.nvmlDeviceGetHandleByIndex(device)
    return next((int(p.usedGpuMemory) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == pid), None)


if __name__ == "__main__":
    raise SystemExit(main())
