"""The XGLM -> OPT converter: logits parity with transformers' XGLM, greedy decoding parity, every
input layout, and the idempotent / atomic / refuse-partial contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from leakwatch.convert_xglm import mapping
from leakwatch.convert_xglm.conversion import convert
from leakwatch.convert_xglm.output import MANIFEST
from leakwatch.core.errors import LeakwatchError
from leakwatch.core.paths import REPO_ROOT
from tests.support.native_stack import VENV_BIN
from tests.support.xglm_models import MAX_POSITIONS, VOCAB, random_xglm, save

LOGITS_TOLERANCE = 1e-4
GREEDY_TOKENS = 32


def opt_from(folder):
    from transformers import OPTForCausalLM

    return OPTForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def max_logit_diff(xglm, opt, ids) -> float:
    with torch.no_grad():
        return (xglm(ids).logits - opt(ids).logits).abs().max().item()


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    """A tiny tied XGLM (Janeway's layout) and its conversion."""
    root = tmp_path_factory.mktemp("xglm")
    model = random_xglm(tied=True)
    save(model, root / "src")
    assert convert(str(root / "src"), root / "opt", out=open(os.devnull, "w")) == "converted"
    return model, root


def test_logits_match_xglm_on_random_inputs(tied):
    xglm, root = tied
    opt = opt_from(root / "opt")
    generator = torch.Generator().manual_seed(7)
    batch = torch.randint(0, VOCAB, (4, 64), generator=generator)
    full = torch.randint(0, VOCAB, (1, MAX_POSITIONS), generator=generator)  # every position
    for ids in (batch, full):
        diff = max_logit_diff(xglm, opt, ids)
        assert diff < LOGITS_TOLERANCE, f"max |logit difference| {diff:.2e} for inputs {tuple(ids.shape)}"
    print(f"parity: max |logit difference| {max_logit_diff(xglm, opt, batch):.2e} (fp32, 4x64 tokens)")


def test_greedy_continuations_are_identical(tied):
    xglm, root = tied
    opt = opt_from(root / "opt")
    prompt = torch.randint(3, VOCAB, (1, 12), generator=torch.Generator().manual_seed(11))
    kwargs = dict(
        max_new_tokens=GREEDY_TOKENS,
        min_new_tokens=GREEDY_TOKENS,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=1,
    )
    ours, theirs = opt.generate(prompt, **kwargs), xglm.generate(prompt, **kwargs)
    assert ours.sequences[0, 12:].tolist() == theirs.sequences[0, 12:].tolist()
    # The comparison means something only if no step was a near-tie that float noise could flip.
    margins = [float(s.topk(2).values[0, 0] - s.topk(2).values[0, 1]) for s in theirs.scores]
    assert min(margins) > 1e-3


def test_converted_folder_is_an_opt_checkpoint(tied):
    xglm, root = tied
    config = json.loads((root / "opt" / "config.json").read_text())
    assert config["architectures"] == ["OPTForCausalLM"] and config["tie_word_embeddings"] is True
    assert config["do_layer_norm_before"] is True and config["activation_function"] == "gelu"
    manifest = json.loads((root / "opt" / MANIFEST).read_text())
    assert manifest["tied_head"] is True and manifest["embed_scale"] == pytest.approx(128**0.5)
    assert set(manifest["files"]) == {p.name for p in (root / "opt").iterdir()} - {MANIFEST}
    opt = opt_from(root / "opt")
    # Positions are XGLM's sinusoidal rows, looked up at the same offset of 2.
    table = xglm.model.embed_positions.weights
    assert torch.equal(opt.model.decoder.embed_positions.weight[: table.shape[0]], table)
    assert torch.allclose(mapping.sinusoidal_table(MAX_POSITIONS, 128, 1), table)


@pytest.mark.parametrize("layout", ["bin", "sharded-bin"])
@pytest.mark.parametrize("head", ["tied", "untied"])
def test_every_layout_and_head_converts_exactly(tmp_path, layout, head):
    xglm = random_xglm(tied=head == "tied")
    save(xglm, tmp_path / "src", layout)
    convert(str(tmp_path / "src"), tmp_path / "opt", max_shard_bytes=400_000, out=open(os.devnull, "w"))
    shards = sorted(p.name for p in (tmp_path / "opt").glob("*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "opt" / "model.safetensors.index.json").is_file()
    config = json.loads((tmp_path / "opt" / "config.json").read_text())
    assert config["tie_word_embeddings"] is (head == "tied")
    ids = torch.randint(0, VOCAB, (2, 48), generator=torch.Generator().manual_seed(3))
    assert max_logit_diff(xglm, opt_from(tmp_path / "opt"), ids) < LOGITS_TOLERANCE


def test_second_run_verifies_and_touches_nothing(tied, capsys):
    _, root = tied
    before = {p.name: p.stat().st_mtime_ns for p in (root / "opt").iterdir()}
    assert convert(str(root / "src"), root / "opt") == "verified"
    assert "already holds a verified conversion" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in (root / "opt").iterdir()} == before


def _converted(tmp_path):
    save(random_xglm(), tmp_path / "src")
    convert(str(tmp_path / "src"), tmp_path / "opt", out=open(os.devnull, "w"))
    return tmp_path / "src", tmp_path / "opt"


def test_damaged_output_is_refused_and_kept_until_forced(tmp_path):
    src, dst = _converted(tmp_path)
    weights = dst / "model.safetensors"
    with open(weights, "r+b") as f:  # same size, different bytes: only the hash can tell
        f.seek(weights.stat().st_size // 2)
        f.write(b"\x00\x01\x02\x03")
    damaged = weights.read_bytes()
    with pytest.raises(LeakwatchError, match=r"model.safetensors does not match its sha256.*--force"):
        convert(str(src), dst)
    assert weights.read_bytes() == damaged, "a refused run must not touch the folder"
    os.truncate(weights, 100)
    with pytest.raises(LeakwatchError, match=r"model.safetensors has 100 bytes"):
        convert(str(src), dst, full_verify=False)
    assert convert(str(src), dst, force=True, out=open(os.devnull, "w")) == "converted"
    assert convert(str(src), dst, out=open(os.devnull, "w")) == "verified"


def test_folder_without_manifest_is_refused(tmp_path):
    save(random_xglm(), tmp_path / "src")
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "model.safetensors").write_bytes(b"half a file")
    with pytest.raises(LeakwatchError, match=r"no readable leakwatch-conversion.json"):
        convert(str(tmp_path / "src"), tmp_path / "opt")
    assert (tmp_path / "opt" / "model.safetensors").read_bytes() == b"half a file"


def test_conversion_of_another_source_is_refused(tmp_path):
    _src, dst = _converted(tmp_path)
    save(random_xglm(seed=99), tmp_path / "other")
    with pytest.raises(LeakwatchError, match=r"it was converted from .*src, not .*other"):
        convert(str(tmp_path / "other"), dst)


def test_interrupted_run_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    save(random_xglm(), tmp_path / "src")
    from leakwatch.convert_xglm import checkpoint

    real = checkpoint.write_safetensors
    calls = []

    def dies_on_second_shard(path, tensors):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what a killed container looks like from inside
        return real(path, tensors)

    monkeypatch.setattr(checkpoint, "write_safetensors", dies_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        convert(str(tmp_path / "src"), tmp_path / "opt", max_shard_bytes=400_000, out=open(os.devnull, "w"))
    assert not (tmp_path / "opt").exists()
    (tmp_path / ".opt.partial-killed").mkdir()  # what SIGKILL would have left behind
    monkeypatch.setattr(checkpoint, "write_safetensors", real)
    assert convert(str(tmp_path / "src"), tmp_path / "opt", out=open(os.devnull, "w")) == "converted"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".opt")) == [".opt.lock"]


def test_not_an_xglm_checkpoint(tmp_path):
    from transformers import OPTConfig, OPTForCausalLM

    OPTForCausalLM(
        OPTConfig(
            hidden_size=64,
            num_attention_heads=2,
            ffn_dim=128,
            num_hidden_layers=1,
            vocab_size=64,
            word_embed_proj_dim=64,
        )
    ).save_pretrained(tmp_path / "src")
    with pytest.raises(LeakwatchError, match=r"model_type is 'opt', not 'xglm'"):
        convert(str(tmp_path / "src"), tmp_path / "opt")
    assert not (tmp_path / "opt").exists()


def test_missing_and_unknown_tensors_are_named(tmp_path):
    model = random_xglm()
    state = {k: v for k, v in model.state_dict().items() if k != "model.layers.1.fc2.bias"}
    model.config.save_pretrained(tmp_path / "a")
    torch.save(state, tmp_path / "a" / "pytorch_model.bin")
    with pytest.raises(LeakwatchError, match=r"lacks 1 tensors XGLM needs, e.g. model.layers.1.fc2.bias"):
        convert(str(tmp_path / "a"), tmp_path / "opt")
    state = {**model.state_dict(), "model.layers.0.adapter.weight": torch.zeros(2)}
    model.config.save_pretrained(tmp_path / "b")
    torch.save(state, tmp_path / "b" / "pytorch_model.bin")
    with pytest.raises(LeakwatchError, match=r"does not know, e.g. model.layers.0.adapter.weight"):
        convert(str(tmp_path / "b"), tmp_path / "opt")


def test_command_line_exit_codes(tmp_path):
    save(random_xglm(), tmp_path / "src")
    cli = [str(VENV_BIN / "leakwatch"), "convert-xglm", str(tmp_path / "src"), str(tmp_path / "opt")]
    first = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert first.returncode == 0, first.stderr
    assert "ready" in first.stdout
    (tmp_path / "opt" / "config.json").write_text("{}")
    # The module entry point compose runs inside the vLLM image.
    module = [
        sys.executable,
        "-m",
        "leakwatch.convert_xglm",
        str(tmp_path / "src"),
        str(tmp_path / "opt"),
        "--quick-verify",
    ]
    refused = subprocess.run(module, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert refused.returncode == 2
    assert "config.json has 2 bytes" in refused.stderr and "--force" in refused.stderr
    not_found = subprocess.run(
        cli[:2] + ["no/such-folder/here", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert not_found.returncode == 2 and "neither a folder nor a Hugging Face repo id" in not_found.stderr
    offline = subprocess.run(
        cli[:2] + ["KoboldAI/fairseq-dense-13B-Janeway", str(tmp_path / "y")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert offline.returncode == 2 and "cannot download KoboldAI/fairseq-dense-13B-Janeway@main" in offline.stderr
    assert not (tmp_path / "y").exists()
