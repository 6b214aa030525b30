"""The XGLM -> OPT rewrite: which tensor goes where, and the three that change.

XGLM and OPT share the decoder layer (pre-LayerNorm, q/k/v/out projections with biases, fc1 ->
activation -> fc2, a final LayerNorm) and both add position embeddings looked up at position + 2.
Three things differ, each rewritten exactly:

1. Positions: XGLM computes a sinusoidal table (transformers' XGLMSinusoidalPositionalEmbedding:
   half sin, half cos, frequencies exp(-i * ln(10000) / (half - 1)), row `pad_token_id` zeroed,
   max_position_embeddings + 2 rows, looked up at position + 2). OPT learns its table and looks it
   up at the same position + 2, so the table is copied row for row.
2. Embedding scale: XGLM multiplies token embeddings by sqrt(d_model) (scale_embedding); OPT does
   not, so the scale is folded into the embedding matrix.
3. Tied head: with tied weights the LM head is that same (now scaled) matrix, which would scale
   the logits by sqrt(d_model) too; dividing the final LayerNorm's weight and bias by the scale
   undoes it exactly (logits = LN(h) @ E^T = (LN(h) / s) @ (s E)^T). An untied head is copied and
   the final LayerNorm kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import LeakwatchError
from .checkpoint import OutTensor, Shard

LAYER_TENSORS = tuple(
    f"{module}.{param}"
    for module in (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.out_proj",
        "self_attn_layer_norm",
        "fc1",
        "fc2",
        "final_layer_norm",
    )
    for param in ("weight", "bias")
)
# Buffers some XGLM checkpoints carry; XGLM recomputes them, so they are checked, not copied.
POSITION_BUFFERS = ("embed_positions.weights", "embed_positions._float_tensor")
# Rows read, transformed and written per step (Janeway: 4096 x 5120 in fp32 is 80 MB), so memory
# stays bounded by this block, not by the model or even its largest tensor.
BLOCK_ROWS = 4096
SUPPORTED_ACTIVATIONS = ("gelu", "relu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh")


def sinusoidal_table(num_positions: int, dim: int, padding_idx: int | None):
    """XGLM's position table (fp32): max_position_embeddings + 2 rows, as transformers builds it."""
    import torch

    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
    angles = torch.arange(num_positions + 2, dtype=torch.int64).float().unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(num_positions + 2, -1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(num_positions + 2, 1)], dim=1)
    if padding_idx is not None:
        table[padding_idx, :] = 0
    return table


def check_xglm_config(config: dict, where: Path) -> None:
    if config.get("model_type") != "xglm":
        raise LeakwatchError(
            f"{where}: model_type is {config.get('model_type')!r}, not 'xglm'; this converter only rewrites XGLM checkpoints"
        )
    for key in ("vocab_size", "d_model", "ffn_dim", "num_layers", "attention_heads", "max_position_embeddings"):
        if not isinstance(config.get(key), int):
            raise LeakwatchError(f"{where}: config.json lacks {key!r}")
    if config.get("add_cross_attention"):
        raise LeakwatchError(f"{where}: cross-attention XGLM has no OPT equivalent")
    if config.get("activation_function", "gelu") not in SUPPORTED_ACTIVATIONS:
        raise LeakwatchError(
            f"{where}: activation {config.get('activation_function')!r} is not one OPT supports ({', '.join(SUPPORTED_ACTIVATIONS)})"
        )
    if config["d_model"] % config["attention_heads"]:
        raise LeakwatchError(
            f"{where}: d_model {config['d_model']} is not a multiple of {config['attention_heads']} heads"
        )


def opt_config(xglm: dict, tied: bool, dtype: str) -> dict:
    """OPTConfig fields equivalent to the XGLM config (transformers' and vLLM's OPT read these)."""
    return {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "vocab_size": xglm["vocab_size"],
        "hidden_size": xglm["d_model"],
        "word_embed_proj_dim": xglm["d_model"],  # no project_in / project_out
        "num_hidden_layers": xglm["num_layers"],
        "num_attention_heads": xglm["attention_heads"],
        "ffn_dim": xglm["ffn_dim"],
        "max_position_embeddings": xglm["max_position_embeddings"],
        "activation_function": xglm.get("activation_function", "gelu"),
        "do_layer_norm_before": True,  # XGLM is pre-LayerNorm
        "_remove_final_layer_norm": False,
        "enable_bias": True,
        "layer_norm_elementwise_affine": True,
        "dropout": xglm.get("dropout", 0.1),
        "attention_dropout": xglm.get("attention_dropout", 0.0),
        "layerdrop": xglm.get("layerdrop", 0.0),
        "init_std": xglm.get("init_std", 0.02),
        "pad_token_id": xglm.get("pad_token_id", 1),
        "bos_token_id": xglm.get("bos_token_id", 0),
        "eos_token_id": xglm.get("eos_token_id", 2),
        "tie_word_embeddings": tied,
        "use_cache": True,
        "torch_dtype": dtype,
    }


@dataclass
class SourceIndex:
    """Where each source tensor lives, with its shape and dtype, without reading any data."""

    prefix: str  # "model." (XGLMForCausalLM) or "" (XGLMModel)
    location: dict[str, Path]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    order: list[str]  # source keys in file order


def index_source(files: list[Path]) -> SourceIndex:
    location, shapes, dtypes, order = {}, {}, {}, []
    for path in files:
        shard = Shard(path)
        try:
            for key in shard.keys():  # noqa: SIM118 - a safetensors handle, not a dict
                location[key], shapes[key], dtypes[key] = path, shard.shape(key), shard.dtype(key)
                order.append(key)
        finally:
            shard.close()
    if "model.embed_tokens.weight" in location:
        prefix = "model."
    elif "embed_tokens.weight" in location:
        prefix = ""
    else:
        raise LeakwatchError(f"{files[0].parent}: no embed_tokens.weight; not an XGLM state dict")
    return SourceIndex(prefix, location, shapes, dtypes, order)


class ShardReader:
    """Reads tensors by name, keeping one shard open: outputs follow source order, so each opens once."""

    def __init__(self, index: SourceIndex):
        self.index = index
        self._open: Shard | None = None

    def get(self, key: str):
        path = self.index.location[key]
        if self._open is None or self._open.path != path:
            self.close()
            self._open = Shard(path)
        return self._open.get(key)

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None


def _same(a, b) -> bool:
    """torch.equal in row blocks (a whole-tensor comparison allocates a vocab x d_model mask)."""
    import torch

    if a.shape != b.shape:
        return False
    if a.data_ptr() == b.data_ptr() and a.stride() == b.stride():
        return True  # one storage, saved once (how transformers writes tied weights)
    return all(torch.equal(a[i : i + BLOCK_ROWS], b[i : i + BLOCK_ROWS]) for i in range(0, a.shape[0], BLOCK_ROWS))


@dataclass
class Conversion:
    config: dict
    tensors: list[OutTensor]
    tied: bool
    embed_scale: float


def plan_conversion(xglm: dict, index: SourceIndex, reader: ShardReader, dtype: str | None, where: Path) -> Conversion:
    """Checks the source tensors against the config and lists every output tensor, in source order."""
    import torch

    p = index.prefix
    d, layers = xglm["d_model"], xglm["num_layers"]
    expected = {f"{p}embed_tokens.weight", f"{p}layer_norm.weight", f"{p}layer_norm.bias"}
    expected |= {f"{p}layers.{i}.{t}" for i in range(layers) for t in LAYER_TENSORS}
    optional = {f"{p}{b}" for b in POSITION_BUFFERS} | {"lm_head.weight"}
    present = set(index.location)
    if missing := sorted(expected - present):
        raise LeakwatchError(f"{where}: checkpoint lacks {len(missing)} tensors XGLM needs, e.g. {missing[0]}")
    if unexpected := sorted(present - expected - optional):
        raise LeakwatchError(f"{where}: checkpoint has tensors this converter does not know, e.g. {unexpected[0]}")
    embed_key = f"{p}embed_tokens.weight"
    if index.shapes[embed_key] != (xglm["vocab_size"], d):
        raise LeakwatchError(
            f"{where}: embed_tokens is {index.shapes[embed_key]}, config says ({xglm['vocab_size']}, {d})"
        )

    out_dtype = dtype or index.dtypes[embed_key]
    out = getattr(torch, out_dtype)
    scale = math.sqrt(d) if xglm.get("scale_embedding", True) else 1.0
    table = sinusoidal_table(xglm["max_position_embeddings"], d, xglm.get("pad_token_id"))
    stored_key = f"{p}{POSITION_BUFFERS[0]}"
    if stored_key in present:  # a stored table must be the one XGLM would compute
        stored = reader.get(stored_key).float()
        rows = min(stored.shape[0], table.shape[0])
        if stored.shape[1] != d or not torch.allclose(stored[:rows], table[:rows], atol=2e-3):
            raise LeakwatchError(f"{where}: {stored_key} is not XGLM's sinusoidal table; refusing to guess")

    tied = True
    if "lm_head.weight" in present:
        tied = _same(reader.get("lm_head.weight"), reader.get(embed_key))

    def blocks(key: str, factor: float | None = None):
        """Row blocks of the output tensor: nothing model-sized is ever allocated."""

        def produce():
            source = reader.get(key)
            for start in range(0, source.shape[0], BLOCK_ROWS):
                block = source[start : start + BLOCK_ROWS]
                yield (block.float() * factor).to(out) if factor is not None else block.to(out)

        return produce

    renamed = {embed_key: ("model.decoder.embed_tokens.weight", blocks(embed_key, scale))}
    ln_factor = 1.0 / scale if tied else 1.0
    for param in ("weight", "bias"):
        key = f"{p}layer_norm.{param}"
        renamed[key] = (f"model.decoder.final_layer_norm.{param}", blocks(key, ln_factor))
    for i in range(layers):
        for t in LAYER_TENSORS:
            key = f"{p}layers.{i}.{t}"
            renamed[key] = (f"model.decoder.layers.{i}.{t}", blocks(key))
    if not tied:
        renamed["lm_head.weight"] = ("lm_head.weight", blocks("lm_head.weight"))

    tensors = [
        OutTensor(name, index.shapes[key], out_dtype, produce)
        for key in index.order
        if key in renamed
        for name, produce in [renamed[key]]
    ]
    tensors.append(
        OutTensor("model.decoder.embed_positions.weight", tuple(table.shape), out_dtype, lambda: iter([table.to(out)]))
    )
    return Conversion(opt_config(xglm, tied, out_dtype), tensors, tied, scale)
