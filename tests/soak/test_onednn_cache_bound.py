"""vLLM's CPU GEMM (`onednn_mm`, the kernel the demo model's linear layers run on) keeps memory
bounded under the demo profile's environment, and does not without it.

oneDNN compiles one primitive per (linear layer, batch size) and keeps up to
ONEDNN_PRIMITIVE_CACHE_CAPACITY of them (1024 by default). A server meets new batch sizes for hours,
so its worker's anonymous memory climbs by ~64 kB per new size and layer: the signature a leak rule
must flag. This test drives the installed vLLM's kernel in a child process with as many linear layers
as the demo model has, one batch size after another, and reads the child's RssAnon."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from leakwatch.core import profiles

pytestmark = [pytest.mark.slow]

MIB = 1024 * 1024
BATCH_SIZES = 600

# One child run: the demo model's linear layers (q/k/v fused, o, gate/up fused, down per layer, and the
# LM head) on vLLM's oneDNN handler, batch sizes 1..N in turn; RssAnon growth after each stretch.
SWEEP = r"""
import json, sys, torch
from vllm import _custom_ops as ops
hidden, layers, batch_sizes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def anon_kib():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon"))
handlers = [ops.create_onednn_mm(torch.randn(4 * hidden, hidden, dtype=torch.bfloat16).t(), 32)
            for _ in range(4 * layers + 1)]
# The largest batch first: the allocator's high-water mark for activations and scratch is then
# reached before the base reading, so what grows afterwards is the primitive cache alone.
for h in handlers:
    ops.onednn_mm(h, torch.randn(batch_sizes, hidden, dtype=torch.bfloat16), None)
base, growth = anon_kib(), {}
for m in range(1, batch_sizes + 1):
    x = torch.randn(m, hidden, dtype=torch.bfloat16)
    for h in handlers:
        ops.onednn_mm(h, x, None)
    if m % 100 == 0:
        growth[m] = (anon_kib() - base) * 1024
print(json.dumps(growth))
"""


PROBE = r"""
import torch
from vllm import _custom_ops as ops
handler = ops.create_onednn_mm(torch.randn(256, 64, dtype=torch.bfloat16).t(), 32)
ops.onednn_mm(handler, torch.randn(3, 64, dtype=torch.bfloat16), None)
"""


def growth_by_batch_size(env: dict[str, str]) -> dict[int, int]:
    demo = profiles.load("demo")
    arch = demo.architecture
    child_env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    out = subprocess.run(
        [sys.executable, "-c", SWEEP, str(arch["hidden_size"]), str(arch["num_layers"]), str(BATCH_SIZES)],
        env={**child_env, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def test_the_demo_profiles_cache_bound_keeps_the_worker_flat_and_the_default_does_not():
    # Probed in a child like the sweeps (loading vLLM's CPU kernels into this process after the soak
    # tier's other modules had loaded torch killed the whole run with SIGILL), with the sweep's own
    # op: vLLM picks its kernel build for the CPU (_C_AVX2, _C_AVX512, _C), and a CPU without bf16
    # instructions has no oneDNN bf16 matmul, so vLLM serves the demo profile without this cache.
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(
            f"this CPU has no oneDNN bf16 matmul through vLLM's kernels (exit {probe.returncode}), so no "
            f"primitive cache to bound: {probe.stderr.strip().splitlines()[-1][-300:] if probe.stderr.strip() else ''}"
        )
    bounded = growth_by_batch_size(profiles.vllm_environment(profiles.load("demo")))
    unbounded = growth_by_batch_size({})
    # The second half of the sweep: the bounded cache is full by then (its first ~100 sizes fill it).
    half, last = BATCH_SIZES // 2, BATCH_SIZES
    late_bounded = bounded[last] - bounded[half]
    late_unbounded = unbounded[last] - unbounded[half]
    print(
        f"oneDNN cache: batch sizes {half}..{last} grew {late_unbounded / MIB:.0f} MiB by default, "
        f"{late_bounded / MIB:.1f} MiB bounded; {bounded[last] / MIB:.0f} MiB in all"
    )
    # Without the bound, every new batch size costs memory (~64 kB per linear layer): a leak's signature.
    assert late_unbounded > 100 * MIB, unbounded
    # With it, memory stops growing once the cache is full.
    assert late_bounded < 10 * MIB, bounded
    assert bounded[last] < 80 * MIB, bounded
