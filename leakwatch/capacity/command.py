"""Plan a model profile's capacity: weights and KV cache per GPU, KV tokens, full-length sequences.

Reads only the profile (serving/profiles/PROFILE.yaml), so it answers before any weights are
downloaded. Exits 2 with every reason when the profile cannot work. Try a change without editing
the file with --set, e.g. --set vllm.quantization=null or --set vllm.tensor_parallel_size=2.
"""

from __future__ import annotations

import json

from ..core import profiles as model_profiles
from . import planner

GIB = planner.GIB


def add_arguments(parser) -> None:
    parser.add_argument("profile", help=f"one of {', '.join(model_profiles.available())}")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        dest="overrides",
        help="override a profile setting for this plan (repeatable), e.g. vllm.max_model_len=4096",
    )


def size(n: int) -> str:
    """Right-aligned, in the largest unit that keeps two meaningful decimals."""
    for unit, factor in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= factor / 10:
            return f"{n / factor:8.2f} {unit}"
    return f"{n:8d} B  "


def render(plan: planner.Plan) -> str:
    gib = size

    p = plan
    if p.device == "cuda":
        where = f"{p.gpu_count}x {p.gpu}, TP {p.tensor_parallel_size}"
        budget = f"{p.gpu_memory_utilization:.2f} x {p.memory_bytes_per_gpu / GIB:.2f} GiB"
    else:
        where, budget = "CPU backend", "VLLM_CPU_KVCACHE_SPACE"
    lines = [
        f"{p.profile} ({where})",
        f"  budget per device      {gib(p.budget_bytes_per_gpu)}   {budget}",
        f"  weights per device     {gib(p.weights_bytes_per_gpu)}   of {size(p.weights_bytes).strip()} in all"
        + ("   (host RAM on the CPU backend)" if p.device == "cpu" else ""),
        f"  activations (peak)     {gib(p.activation_bytes_per_gpu)}",
        f"  CUDA graphs            {gib(p.cuda_graph_bytes_per_gpu)}",
        f"  non-torch memory       {gib(p.non_torch_bytes_per_gpu)}",
        f"  KV cache per device    {gib(p.kv_cache_bytes_per_gpu)}",
        f"  KV per token           {p.kv_bytes_per_token / 1024:8.4g} KiB   "
        f"({p.kv_bytes_per_token_per_gpu / 1024:.4g} KiB per device)",
        f"  KV tokens              {p.kv_tokens:8d}       {p.kv_blocks} blocks of {p.block_size}",
        f"  full-length sequences  {p.max_full_length_sequences:8.2f}       of {p.max_model_len} tokens",
    ]
    return "\n".join(lines)


def run(args) -> int:
    profile = model_profiles.load(args.profile, overrides=args.overrides)
    plan = planner.plan(profile)
    print(json.dumps(plan.as_dict(), indent=1) if args.json else render(plan))
    return 0
