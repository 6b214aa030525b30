"""bench-convert: the XGLM converter's memory stays bounded by one tensor, not by the checkpoint.

Builds random fp16 XGLM checkpoints shaped like Janeway in miniature (one zip-format
pytorch_model.bin with Janeway's 50261-token vocabulary), then converts it twice in fresh child
processes, side by side: with `leakwatch convert-xglm` (memory-mapped input, tensor-by-tensor
safetensors output) and the naive way (torch.load the whole file, transform, safetensors
save_file). Each child samples its anonymous resident memory (RssAnon: what cannot be paged back
to the file) every 5 ms. The last line is the summary.

  .venv/bin/python benchmarks/convert_xglm.py [--layers 12 24] [--d-model 1024]

Two depths show the point: the converter's peak stays flat as the checkpoint grows (it is set by
BLOCK_ROWS, not the model), while loading everything grows with it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, threading, time
from pathlib import Path

def anon_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

mode, src, dst = sys.argv[1:4]
import torch, safetensors.torch  # imports are not the converter's memory
from leakwatch.convert_xglm import mapping
from leakwatch.convert_xglm.conversion import convert
base = anon_kib()
peak = [base]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anon_kib())
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
started = time.monotonic()
if mode == "streaming":
    convert(src, Path(dst), out=open("/dev/null", "w"))
else:
    config = json.loads((Path(src) / "config.json").read_text())
    state = torch.load(str(Path(src) / "pytorch_model.bin"), map_location="cpu", weights_only=True)
    scale = config["d_model"] ** 0.5
    out = {("model.decoder." + k[len("model."):]): v for k, v in state.items() if k.startswith("model.layers.")}
    out["model.decoder.embed_tokens.weight"] = (state["model.embed_tokens.weight"].float() * scale).half()
    for p in ("weight", "bias"):
        out[f"model.decoder.final_layer_norm.{p}"] = (state[f"model.layer_norm.{p}"].float() / scale).half()
    out["model.decoder.embed_positions.weight"] = mapping.sinusoidal_table(
        config["max_position_embeddings"], config["d_model"], config["pad_token_id"]).half()
    Path(dst).mkdir()
    safetensors.torch.save_file(out, str(Path(dst) / "model.safetensors"))
elapsed = time.monotonic() - started
done.set()
print(json.dumps({"peak_anon_mb": (peak[0] - base) / 1024, "seconds": elapsed}))
"""


def build_checkpoint(folder: Path, layers: int, d_model: int) -> tuple[int, int]:
    import torch
    from transformers import XGLMConfig, XGLMForCausalLM

    config = XGLMConfig(
        vocab_size=50261,
        d_model=d_model,
        ffn_dim=4 * d_model,
        num_layers=layers,
        attention_heads=d_model // 128,
        max_position_embeddings=2048,
    )
    torch.manual_seed(0)
    model = XGLMForCausalLM(config).half()
    folder.mkdir(parents=True)
    config.save_pretrained(folder)
    state = model.state_dict()
    torch.save(state, folder / "pytorch_model.bin")
    largest = max(t.numel() * t.element_size() for t in state.values())
    return (folder / "pytorch_model.bin").stat().st_size, largest


def run_child(mode: str, src: Path, dst: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(src), str(dst)], capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        raise SystemExit(f"{mode} conversion failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(root: Path, layers: int, d_model: int) -> dict:
    started = time.monotonic()
    size, largest = build_checkpoint(root / f"src-{layers}", layers, d_model)
    print(
        f"built a {size / 1e6:.0f} MB fp16 XGLM checkpoint ({layers} layers) in {time.monotonic() - started:.0f} s "
        f"(largest tensor {largest / 1e6:.0f} MB)",
        flush=True,
    )
    result = {"size": size, "largest": largest}
    for mode in ("streaming", "naive"):
        result[mode] = run_child(mode, root / f"src-{layers}", root / f"{mode}-{layers}")
        print(
            f"  {mode:9s} peak anon +{result[mode]['peak_anon_mb']:.0f} MB, {result[mode]['seconds']:.1f} s", flush=True
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs=2, default=[12, 24], help="two model depths (default 12 24)")
    parser.add_argument("--d-model", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp:
        small, big = (measure(Path(tmp), layers, args.d_model) for layers in args.layers)

    def mb(r, mode):
        return f"{r[mode]['peak_anon_mb']:.0f}"

    rate = big["size"] / 1e6 / big["streaming"]["seconds"]
    print(
        f"bench-convert: peak anon memory, checkpoint {small['size'] / 1e6:.0f} -> {big['size'] / 1e6:.0f} MB: "
        f"convert-xglm {mb(small, 'streaming')} -> {mb(big, 'streaming')} MB, load-all {mb(small, 'naive')} -> "
        f"{mb(big, 'naive')} MB ({big['streaming']['peak_anon_mb'] / big['naive']['peak_anon_mb']:.2f}x); "
        f"{rate:.0f} MB/s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
