"""The converted tiny XGLM served by the real vLLM (CPU backend): its greedy output equals HF OPT's
(and so XGLM's), Janeway's `</s>`-as-newline client settings work against the real server, and the
load generator applies them to every request it sends."""

from __future__ import annotations

import json
import os
import re

import pytest
import requests
import torch

from leakwatch.convert_xglm.conversion import convert
from leakwatch.core import model_text, profiles
from leakwatch.demo_model.command import build_tokenizer
from tests.support.locust_run import run_locust
from tests.support.native_stack import assert_no_vllm_running
from tests.support.vllm_server import running
from tests.support.xglm_models import MAX_POSITIONS, VOCAB, random_xglm, save

pytestmark = [pytest.mark.slow]
GREEDY_TOKENS = 32
PROMPT = "the dragon ship sails past the star\nand the engine"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("xglm-vllm")
    tokenizer = build_tokenizer(root / "src", VOCAB, MAX_POSITIONS)
    xglm = random_xglm(tied=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    save(xglm, root / "src")
    convert(str(root / "src"), root / "opt", out=open(os.devnull, "w"))
    args = [
        "--model",
        str(root / "opt"),
        "--dtype",
        "float32",
        "--max-model-len",
        str(MAX_POSITIONS),
        "--served-model-name",
        "tiny-opt",
        "--enable-log-requests",
    ]
    # DEBUG: vLLM logs each request's prompt and prompt token ids, which shows what reached the model.
    env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "DEBUG"}
    assert_no_vllm_running("the converted model's vLLM")
    with running(args, root / "vllm.log", env) as url:
        yield url, root, tokenizer


def complete(url: str, **body) -> dict:
    response = requests.post(f"{url}/v1/completions", json={"model": "tiny-opt", **body}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def test_vllm_greedy_output_equals_hf_opt(served):
    from transformers import OPTForCausalLM

    url, root, tokenizer = served
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    opt = OPTForCausalLM.from_pretrained(root / "opt", dtype=torch.float32).eval()
    expected = opt.generate(
        torch.tensor([prompt_ids]),
        max_new_tokens=GREEDY_TOKENS,
        min_new_tokens=GREEDY_TOKENS,
        do_sample=False,
        pad_token_id=1,
    )[0, len(prompt_ids) :].tolist()
    # Token ids in and out, so detokenisation cannot hide or invent a difference.
    choice = complete(
        url, prompt=prompt_ids, max_tokens=GREEDY_TOKENS, temperature=0, ignore_eos=True, return_token_ids=True
    )
    assert choice["prompt_token_ids"] == prompt_ids
    assert choice["token_ids"] == expected
    print(f"vLLM greedy == HF OPT greedy for {GREEDY_TOKENS} tokens: {expected[:8]}...")


def test_janeway_newline_convention_against_the_real_server(served):
    url, _, tokenizer = served
    janeway = profiles.load("janeway-13b-4090d")
    eos = tokenizer.eos_token_id  # `</s>`, as in Janeway's vocabulary
    prompt = model_text.to_model_text(janeway, "line one\nline two")
    assert "\n" not in prompt
    tokens = requests.post(f"{url}/tokenize", json={"model": "tiny-opt", "prompt": prompt}, timeout=60).json()["tokens"]
    assert eos in tokens, "the server must read `</s>` in a prompt as the token, not as characters"
    # Make the model want `</s>` at every step, as Janeway does at each line end.
    nudge = {"logit_bias": {str(eos): 100}, "max_tokens": 6, "temperature": 0}
    plain = complete(url, prompt=prompt, **nudge)
    assert plain["text"] == "" and plain["finish_reason"] == "stop", "without the client settings it stops at once"
    choice = complete(url, prompt=prompt, **nudge, **model_text.request_fields(janeway))
    assert choice["finish_reason"] == "length"
    assert model_text.from_model_text(janeway, choice["text"]) == "\n" * 6


def _logged_prompts(log_path) -> dict[str, tuple[str, list[int]]]:
    """request id -> (prompt, prompt token ids) from vLLM's DEBUG request log."""
    found = {}
    pattern = re.compile(r"Request (\S+) details: prompt: '(.*?)', prompt_token_ids: \[([0-9, ]*)\]")
    for match in pattern.finditer(log_path.read_text(errors="replace")):
        found[match.group(1)] = (match.group(2), [int(x) for x in match.group(3).split(",") if x.strip()])
    return found


@pytest.mark.parametrize("profile", ["janeway-13b-4090d", "none"])
def test_the_load_generator_applies_janeway_conventions_end_to_end(served, tmp_path, profile):
    """`locust -f loadtest/` with Janeway's profile: a prompt with line breaks reaches the model with
    `</s>`, and completions made of `</s>` are measured to max_tokens and shown as line breaks.
    Without the conventions the same request reaches the model with "\n" and stops at the first `</s>`."""
    url, root, tokenizer = served
    eos = tokenizer.eos_token_id
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "line one\nline two", "output_tokens": 6}) + "\n")
    # The nudge makes the model want `</s>` at every step, as Janeway does at each line end.
    run = run_locust(
        tmp_path / "run",
        url,
        "--model",
        "tiny-opt",
        "--api",
        "completions",
        "--client-profile",
        profile,
        "--ignore-eos",
        "false",
        "--prompts-file",
        str(prompts),
        "--load-shape",
        "steady",
        "-u",
        "1",
        "-r",
        "1",
        "--request-limit",
        "2",
        "--extra-body",
        json.dumps({"logit_bias": {str(eos): 100}, "temperature": 0}),
        "CreativeWritingUser",
        timeout=300,
    )
    rows = run.requests
    assert len(rows) == 2, run.output
    logged = _logged_prompts(root / "vllm.log")
    for row in rows:
        # vLLM takes the x-request-id as its request id (with a suffix of its own).
        prompt, ids = next(v for k, v in logged.items() if row["request_id"] in k)
        if profile == "none":
            assert prompt == "line one\\nline two" and eos not in ids
            assert row["output_tokens"] != "6", row  # stopped at the first `</s>`
        else:
            assert prompt == "line one</s>line two" and eos in ids
            assert row["outcome"] == "ok" and row["output_tokens"] == "6", row
    if profile != "none":
        assert run.returncode == 0, run.output
        samples = run.summary["completion_samples"]
        assert [s["completion"] for s in samples] == ["\n" * 6] * 2
        # Shown with line breaks at the end of the run.
        assert f"completion {samples[0]['request_id']}:\n" + "\n" * 6 in run.output
