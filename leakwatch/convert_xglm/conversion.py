"""The conversion behind `leakwatch convert-xglm`: resolve the source (a folder or a Hub repo id),
map XGLM's tensors onto OPT's (mapping), write safetensors shards and a manifest (output), and keep a
destination that verifies against its manifest (checkpoint)."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

from ..core.errors import LeakwatchError
from . import checkpoint, mapping, output

# Files copied next to the weights so vLLM finds the source's tokenizer and generation defaults.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
    "spiece.model",
    "tokenizer.model",
    "generation_config.json",
)
DTYPES = ("auto", "float16", "bfloat16", "float32")
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?$", re.I)
DEFAULT_SHARD_SIZE = "2GiB"


def parse_size(text: str) -> int:
    match = SIZE.match(text.strip())
    if not match:
        raise LeakwatchError(f"--max-shard-size {text!r}: expected e.g. 2GiB, 500MB or a byte count")
    number, unit = float(match.group(1)), (match.group(2) or "B").upper()
    factor = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}[unit]
    return int(number * factor)


def resolve_source(src: str, revision: str | None) -> tuple[Path, dict]:
    """A local folder as is; a repo id downloaded (weights, config and tokenizer only)."""
    path = Path(src)
    if path.is_dir():
        return path, {"path": str(path.resolve())}
    if not REPO_ID.match(src):
        raise LeakwatchError(f"SRC {src!r} is neither a folder nor a Hugging Face repo id (owner/name)")
    from huggingface_hub import list_repo_files, snapshot_download

    try:
        names = list_repo_files(src, revision=revision)
        weights = ["*.safetensors"] if any(n.endswith(".safetensors") for n in names) else ["*.bin"]
        folder = snapshot_download(src, revision=revision, allow_patterns=["*.json", "*.txt", "*.model", *weights])
    except Exception as exc:  # noqa: BLE001 - offline, unknown repo, gated without HF_TOKEN, disk full
        raise LeakwatchError(
            f"cannot download {src}@{revision or 'main'}: {type(exc).__name__}: {exc} "
            "(a gated repo needs HF_TOKEN; HF_HUB_OFFLINE=1 forbids downloads)"
        ) from None
    return Path(folder), {"repo": src, "revision": revision or "main", "commit": Path(folder).name}


def _source_identity(src: str, revision: str | None) -> dict:
    """What the manifest must record to reuse DST, worked out without downloading anything."""
    path = Path(src)
    if path.is_dir():
        files = checkpoint.weight_files(path)
        return {"path": str(path.resolve()), "weights": {f.name: f.stat().st_size for f in files}}
    return {"repo": src, "revision": revision or "main"}


def convert(
    src: str,
    dst: Path,
    *,
    revision: str | None = None,
    dtype: str = "auto",
    max_shard_bytes: int = parse_size(DEFAULT_SHARD_SIZE),
    force: bool = False,
    full_verify: bool = True,
    out=None,
) -> str:
    """Converts src into dst; returns "converted" or "verified" (dst already held this conversion)."""
    dst, out = Path(dst), out or sys.stdout
    wanted = _source_identity(src, revision)
    with output.locked(dst):
        output.clear_leftovers(dst)
        if dst.exists() and not force:
            manifest = output.read_manifest(dst)
            problem = output.problem(dst, full=full_verify)
            if problem is None and not output.same_source(manifest["source"], wanted):
                problem = f"it was converted from {_describe(manifest['source'])}, not {_describe(wanted)}"
            if problem:
                raise LeakwatchError(
                    f"{dst} exists but is not a usable conversion: {problem}. Nothing was changed; "
                    f"remove it or pass --force to replace it"
                )
            print(f"convert-xglm: {dst} already holds a verified conversion of {_describe(wanted)}", file=out)
            return "verified"
        _convert_into(src, dst, revision, dtype, max_shard_bytes, wanted, out)
        return "converted"


def _describe(source: dict) -> str:
    return f"{source['repo']}@{source['revision']}" if "repo" in source else source.get("path", "?")


def _convert_into(src, dst, revision, dtype, max_shard_bytes, wanted, out) -> None:
    started = time.monotonic()
    src_dir, source = resolve_source(src, revision)
    source = {**wanted, **source}
    config_path = src_dir / "config.json"
    try:
        xglm = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise LeakwatchError(f"{config_path}: cannot read the model config ({exc})") from None
    mapping.check_xglm_config(xglm, config_path)
    index = mapping.index_source(checkpoint.weight_files(src_dir))
    reader = mapping.ShardReader(index)
    work = None
    try:
        conversion = mapping.plan_conversion(xglm, index, reader, None if dtype == "auto" else dtype, src_dir)
        total = sum(t.nbytes for t in conversion.tensors)
        output.check_free_space(dst.parent, total)
        work = output.work_folder(dst)
        shards = checkpoint.shard_plan(conversion.tensors, max_shard_bytes)
        digests: dict[str, str] = {}
        weight_map: dict[str, str] = {}
        written = 0
        for n, shard in enumerate(shards, 1):
            name = "model.safetensors" if len(shards) == 1 else f"model-{n:05d}-of-{len(shards):05d}.safetensors"
            digests[name] = checkpoint.write_safetensors(work / name, shard)
            weight_map.update({t.name: name for t in shard})
            written += sum(t.nbytes for t in shard)
            print(f"convert-xglm: wrote {name} ({written / 1e9:.2f}/{total / 1e9:.2f} GB)", file=out, flush=True)
        reader.close()
        small = {"config.json": json.dumps(conversion.config, indent=2, sort_keys=True) + "\n"}
        if len(shards) > 1:
            small[checkpoint.SAFETENSORS_INDEX] = (
                json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1, sort_keys=True)
                + "\n"
            )
        for name, text in small.items():
            (work / name).write_text(text)
        for name in TOKENIZER_FILES:
            if (src_dir / name).is_file():
                shutil.copyfile(src_dir / name, work / name)
        for path in work.iterdir():
            if path.name not in digests:
                digests[path.name] = checkpoint.sha256_file(path)
        output.write_manifest(
            work,
            source,
            digests,
            {
                "dtype": conversion.config["torch_dtype"],
                "tied_head": conversion.tied,
                "embed_scale": conversion.embed_scale,
            },
        )
        output.publish(work, dst)
        work = None
    finally:
        reader.close()
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"convert-xglm: {dst} ready ({total / 1e9:.2f} GB, {time.monotonic() - started:.0f} s)", file=out)
