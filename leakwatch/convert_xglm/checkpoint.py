"""Reading a Hugging Face checkpoint one shard at a time, and writing safetensors one tensor at a time.

Memory stays bounded by the largest single tensor (Janeway: the 50261 x 5120 embedding, ~0.5 GB):
.bin shards are memory-mapped (torch.load(mmap=True)), safetensors shards are read per tensor, and
the writer streams each converted tensor straight to disk, hashing it on the way.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import LeakwatchError

SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")

# torch dtype name -> safetensors dtype tag
SAFETENSORS_DTYPES = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def weight_files(src: Path) -> list[Path]:
    """The checkpoint's weight files, safetensors preferred when both are present."""
    for index in (SAFETENSORS_INDEX, BIN_INDEX):
        if (src / index).is_file():
            try:
                weight_map = json.loads((src / index).read_text())["weight_map"]
            except (ValueError, KeyError) as exc:
                raise LeakwatchError(f"{src / index}: not a valid weight index ({exc})") from None
            files = [src / name for name in sorted(set(weight_map.values()))]
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise LeakwatchError(f"{src}: the index names shards that are missing: {', '.join(missing)}")
            return files
    for name in SINGLE_FILES:
        if (src / name).is_file():
            return [src / name]
    raise LeakwatchError(
        f"{src}: no weights found (looked for {SAFETENSORS_INDEX}, {BIN_INDEX}, {', '.join(SINGLE_FILES)})"
    )


class Shard:
    """One weight file, opened lazily: tensors are read (or paged in) only when asked for."""

    def __init__(self, path: Path):
        self.path = path
        self._tensors = None
        self._safe = None
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            self._safe = safe_open(str(path), framework="pt", device="cpu")
        else:
            self._tensors = _load_bin(path)

    def keys(self) -> list[str]:
        return list(self._safe.keys()) if self._safe is not None else list(self._tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        if self._safe is not None:
            return tuple(self._safe.get_slice(name).get_shape())
        return tuple(self._tensors[name].shape)

    def dtype(self, name: str) -> str:
        if self._safe is not None:
            tag = self._safe.get_slice(name).get_dtype()
            return {v: k for k, v in SAFETENSORS_DTYPES.items()}[tag]
        return str(self._tensors[name].dtype).removeprefix("torch.")

    def get(self, name: str):
        return self._safe.get_tensor(name) if self._safe is not None else self._tensors[name]

    def close(self) -> None:
        self._tensors = None
        self._safe = None


def _load_bin(path: Path) -> dict:
    import torch

    try:
        state = torch.load(str(path), map_location="cpu", mmap=True, weights_only=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc) and "zipfile" not in str(exc):
            raise LeakwatchError(f"{path}: cannot read this checkpoint: {exc}") from None
        # Pre-1.6 (non-zip) .bin files cannot be memory-mapped: they are read whole.
        print(f"convert-xglm: {path.name} is a legacy .bin; reading it whole (needs its size in RAM)", file=sys.stderr)
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - pickle errors, truncated downloads
        raise LeakwatchError(f"{path}: cannot read this checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict):
        raise LeakwatchError(f"{path}: expected a state dict of tensors, found {type(state).__name__}")
    return state


@dataclass(frozen=True)
class OutTensor:
    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name of the written tensor
    produce: Callable[[], Iterator]  # yields the tensor's row blocks, in order, already in `dtype`

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * _itemsize(self.dtype)


def _itemsize(dtype: str) -> int:
    return {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2}.get(dtype, 1)


def shard_plan(tensors: list[OutTensor], max_shard_bytes: int) -> list[list[OutTensor]]:
    """Splits tensors, in order, into shards of at most max_shard_bytes (a bigger tensor gets its own)."""
    shards: list[list[OutTensor]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return [s for s in shards if s]


def write_safetensors(path: Path, tensors: list[OutTensor]) -> str:
    """Writes one safetensors file, producing and writing one tensor at a time; returns its sha256."""
    import torch

    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for t in tensors:
        header[t.name] = {
            "dtype": SAFETENSORS_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data section starts 8-byte aligned, as safetensors writes it
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for chunk in (struct.pack("<Q", len(blob)), blob):
            f.write(chunk)
            digest.update(chunk)
        for t in tensors:
            written = 0
            for block in t.produce():
                if str(block.dtype).removeprefix("torch.") != t.dtype or tuple(block.shape[1:]) != t.shape[1:]:
                    raise LeakwatchError(
                        f"internal error: {t.name} block is {tuple(block.shape)} {block.dtype}, "
                        f"planned {t.shape} {t.dtype}"
                    )
                data = block.contiguous().reshape(-1).view(torch.uint8).numpy()
                f.write(data)
                digest.update(data)
                written += data.nbytes
            if written != t.nbytes:
                raise LeakwatchError(f"internal error: {t.name} produced {written} bytes, planned {t.nbytes}")
    return digest.hexdigest()


def sha256_file(path: Path, chunk: int = 16 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
