"""Builds the offline demo model: a byte-level BPE tokenizer and a tiny random Llama.

Nothing is downloaded, so `make up` works on machines with no Hugging Face access. The output is
random text, which is all the stack needs: real tokens, real KV cache, real metrics.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

# The model's sizes live in the demo profile's `architecture:` section (serving/profiles/demo.yaml),
# which the capacity planner reads too.
PROFILE = "demo"
SEED = 1234

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)

COMPLETE_MARKER = "leakwatch-demo-model.json"


def _training_text() -> list[str]:
    """Deterministic English-ish and code-ish lines so the tokenizer learns useful merges."""
    rng = random.Random(SEED)
    words = (
        "the model serves requests memory leak cache token prompt story dragon ship star "
        "def class return import self value list dict for while if else print function "
        "gpu vram host swap engine worker latency alert grafana prometheus"
    ).split()
    lines = []
    for _ in range(2000):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 16))))
    return lines


def is_complete(out_dir: Path) -> bool:
    marker = out_dir / COMPLETE_MARKER
    if not marker.is_file():
        return False
    try:
        expected = json.loads(marker.read_text())["files"]
    except (ValueError, KeyError):
        return False
    return all((out_dir / name).is_file() for name in expected)


def build_tokenizer(out_dir: Path, vocab_size: int, max_length: int):
    """Trains the byte-level BPE tokenizer (<unk>=0, <s>=1, </s>=2, a chat template) and saves it.

    Also used by tests that need a real tokenizer for another tiny model (the XGLM converter's).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=max_length,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def build(out_dir: Path, force: bool = False) -> Path:
    """Writes the model to out_dir (atomically: a half-written folder is never left as complete)."""
    out_dir = Path(out_dir)
    if is_complete(out_dir) and not force:
        return out_dir

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..core.profiles import load as load_profile

    arch = load_profile(PROFILE).architecture
    tmp_dir = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)

    fast = build_tokenizer(tmp_dir, arch["vocab_size"], arch["max_position_embeddings"])

    torch.manual_seed(SEED)
    dtype = getattr(torch, arch["dtype"])
    config = LlamaConfig(
        vocab_size=arch["vocab_size"],
        hidden_size=arch["hidden_size"],
        intermediate_size=arch["intermediate_size"],
        num_hidden_layers=arch["num_layers"],
        num_attention_heads=arch["num_attention_heads"],
        num_key_value_heads=arch["num_kv_heads"],
        head_dim=arch["head_dim"],
        max_position_embeddings=arch["max_position_embeddings"],
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype=arch["dtype"],
    )
    model = LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(tmp_dir)

    files = sorted(p.name for p in tmp_dir.iterdir())
    (tmp_dir / COMPLETE_MARKER).write_text(json.dumps({"files": files, "seed": SEED}, indent=1))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp_dir.rename(out_dir)
    return out_dir


def add_arguments(parser) -> None:
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--force", action="store_true", help="rebuild even if a complete model exists")


def run(args) -> int:
    print(build(args.out_dir, force=args.force))
    return 0


if __name__ == "__main__":
    # `python -m leakwatch.demo_model.command OUT_DIR`: compose's one-shot demo-model service runs this in
    # the vLLM image, which has torch and transformers but not leakwatch's own dependencies.
    import argparse

    _parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(_parser)
    raise SystemExit(run(_parser.parse_args()))
