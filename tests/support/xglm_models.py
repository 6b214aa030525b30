"""Tiny random XGLM checkpoints (fp32) in the layouts the converter must read.

Sizes satisfy vLLM's CPU backend (head_dim 64: d_model 128, 2 heads) so the converted model can be
served by the real server; the tokenizer is the demo model's (leakwatch.demo_model.command.build_tokenizer).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

VOCAB = 512
MAX_POSITIONS = 256
SEED = 1234


def xglm_config(**overrides):
    from transformers import XGLMConfig

    values = dict(
        vocab_size=VOCAB,
        d_model=128,
        ffn_dim=512,
        num_layers=2,
        attention_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        # Janeway's layout: <pad> is id 1, so row 1 of the position table is zeroed.
        pad_token_id=1,
        bos_token_id=1,
        eos_token_id=2,
    )
    values.update(overrides)
    return XGLMConfig(**values)


def random_xglm(tied: bool = True, seed: int = SEED, **overrides):
    from transformers import XGLMForCausalLM

    torch.manual_seed(seed)
    model = XGLMForCausalLM(xglm_config(tie_word_embeddings=tied, **overrides)).eval()
    if not tied:  # a head that is clearly not the embedding
        with torch.no_grad():
            model.lm_head.weight.normal_(0, 0.05)
    return model


def save(model, folder: Path, layout: str = "safetensors") -> Path:
    """layout: safetensors (transformers' own save), bin (one pytorch_model.bin with the head and
    the position table stored, as 2022-era transformers wrote it) or sharded-bin (two .bin shards
    plus an index)."""
    folder.mkdir(parents=True, exist_ok=True)
    if layout == "safetensors":
        model.save_pretrained(folder)
        return folder
    model.config.save_pretrained(folder)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["lm_head.weight"] = model.lm_head.weight.detach().clone()
    state["model.embed_positions.weights"] = model.model.embed_positions.weights.clone()
    if layout == "bin":
        torch.save(state, folder / "pytorch_model.bin")
        return folder
    assert layout == "sharded-bin", layout
    keys = sorted(state)
    halves = {
        "pytorch_model-00001-of-00002.bin": keys[: len(keys) // 2],
        "pytorch_model-00002-of-00002.bin": keys[len(keys) // 2 :],
    }
    weight_map = {}
    for name, part in halves.items():
        torch.save({k: state[k] for k in part}, folder / name)
        weight_map.update({k: name for k in part})
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder
