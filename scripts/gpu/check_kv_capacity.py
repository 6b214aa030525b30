#!/usr/bin/env python3
"""Compare the capacity planner with the KV cache vLLM really allocates, on a machine with vLLM.

For each named profile (default: every GPU profile) it starts vLLM's OpenAI server with exactly the
arguments the stack renders, waits until it is healthy, reads vLLM's own figures and stops it:

  * KV tokens: vllm:cache_config_info's kv_cache_size_tokens (num_gpu_blocks x block_size on
    releases without it), against `leakwatch plan`'s kv_tokens;
  * KV memory: the "Available KV cache memory: X GiB" start-up line, against the planner's
    kv_cache_bytes_per_gpu;
  * the card's memory as CUDA reports it, against the profile's hardware.gpu_memory_gib.

It prints one line per profile with the ratios and exits 1 when a KV ratio is off by more than
--tolerance, so a profile whose numbers have drifted (a new vLLM, another card) is noticed. Fix it
by correcting hardware.gpu_memory_gib, or by setting the profile's capacity.cuda_graph_gib /
capacity.non_torch_gib to what vLLM logged. Not run in CI (no GPU there); see docs/capacity.md.

  python scripts/gpu/check_kv_capacity.py                       # every GPU profile, one by one
  python scripts/gpu/check_kv_capacity.py janeway-13b-4090d --models-dir /srv/models
  python scripts/gpu/check_kv_capacity.py demo --url http://127.0.0.1:8000   # a running server
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from leakwatch.capacity import planner
from leakwatch.core import profiles
from leakwatch.core.errors import LeakwatchError
from tests.support import vllm_server

GIB = 1024**3
CACHE_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')
AVAILABLE_KV = re.compile(r"Available KV cache memory: ([\d.]+) GiB")


def kv_tokens_from_metrics(text: str) -> int:
    """vLLM's KV cache size in tokens, from its /metrics text."""
    match = CACHE_INFO.search(text)
    if not match:
        raise LeakwatchError("the server's /metrics has no vllm:cache_config_info")
    labels = dict(LABEL.findall(match.group("labels")))
    if labels.get("kv_cache_size_tokens", "None") not in ("None", ""):
        return int(labels["kv_cache_size_tokens"])
    return int(labels["num_gpu_blocks"]) * int(labels["block_size"])


def fetch(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def cuda_total_gib() -> float | None:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.mem_get_info()[1] / GIB
    except Exception:  # noqa: BLE001 - no usable CUDA torch: the caller asks for --gpu-gib
        pass
    return None


def model_path(profile: profiles.Profile, models_dir: Path) -> str:
    path = profiles.model_path(profile, str(models_dir))
    if profile.source == "converted" and not Path(path).is_dir():
        raise LeakwatchError(
            f"{path} does not exist; convert first: leakwatch convert-xglm {profile.model['id']} {path} "
            f"--revision {profile.model['revision']}"
        )
    if profile.source == "demo" and not Path(path).is_dir():
        from leakwatch.demo_model.command import build

        build(Path(path))
    return path


def compare(
    profile: profiles.Profile, plan: planner.Plan, url: str, log: Path | None, card_gib: float | None
) -> tuple[str, float]:
    tokens = kv_tokens_from_metrics(fetch(f"{url}/metrics"))
    ratio = tokens / plan.kv_tokens
    parts = [f"{profile.name}: KV tokens vLLM {tokens} / planner {plan.kv_tokens} = {ratio:.3f}"]
    if log is not None and (m := AVAILABLE_KV.search(log.read_text())):
        parts.append(
            f"KV memory vLLM {float(m.group(1)):.2f} / planner {plan.kv_cache_bytes_per_gpu / GIB:.2f} GiB "
            f"= {float(m.group(1)) * GIB / plan.kv_cache_bytes_per_gpu:.3f}"
        )
    if card_gib is not None and profile.needs_gpu:
        parts.append(f"card {card_gib:.2f} GiB (CUDA) / profile {profile.hardware['gpu_memory_gib']} GiB")
    return "; ".join(parts), ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="*", help="profiles to check (default: every GPU profile)")
    parser.add_argument("--url", help="compare with an already running server instead of starting one")
    parser.add_argument(
        "--models-dir",
        type=Path,
        default=Path("models"),
        help="where converted and demo models live (compose's `models` volume)",
    )
    parser.add_argument("--tolerance", type=float, default=0.10, help="largest accepted |ratio - 1| (default 0.10)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for each server")
    args = parser.parse_args(argv)
    names = args.profiles or [n for n in profiles.available() if profiles.load(n).needs_gpu]
    if args.url and len(names) != 1:
        parser.error("--url compares one running server: name exactly one profile")
    card = cuda_total_gib()
    failed = 0
    try:
        for name in names:
            profile = profiles.load(name)
            plan = planner.plan(profile)
            if args.url:
                line, ratio = compare(profile, plan, args.url.rstrip("/"), None, card)
            else:
                log = Path(tempfile.mkdtemp(prefix="kvcheck-")) / f"{name}.log"
                engine_args = profiles.vllm_engine_args(profile, model_path(profile, args.models_dir))
                with vllm_server.running(engine_args, log, profiles.vllm_environment(profile), args.timeout) as url:
                    line, ratio = compare(profile, plan, url, log, card)
            ok = abs(ratio - 1) <= args.tolerance
            failed += not ok
            print(("ok   " if ok else "OFF  ") + line, flush=True)
    except LeakwatchError as exc:
        print(f"check_kv_capacity: error: {exc}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
