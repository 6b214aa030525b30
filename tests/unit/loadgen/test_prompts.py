"""Prompt corpora: lengths follow the brief's distributions, prompts are fitted to their targets,
clamped to the context, deterministic, and code prompts share repository prefixes."""

from __future__ import annotations

import itertools
import os
import random

import numpy as np
import pytest
from scipy import stats

from leakwatch.loadgen import code_context
from leakwatch.loadgen.corpus_builder import CorpusBuilder
from leakwatch.loadgen.prompt_record import load_prompts_file
from leakwatch.loadgen.tokens import EstimatedTokenizer
from leakwatch.loadgen.workloads import WORKLOADS, LengthDistribution


@pytest.mark.parametrize(
    "name, part", [("creative", "input"), ("creative", "output"), ("code", "input"), ("code", "output")]
)
def test_sampled_lengths_follow_the_configured_distributions(name, part):
    dist = getattr(WORKLOADS[name], part)
    rng = random.Random(11)
    samples = np.array([dist.sample(rng) for _ in range(4000)])
    kind, args = dist.scipy_args()
    assert stats.kstest(samples, kind, args=args).pvalue > 0.001


def test_the_brief_s_numbers():
    code = WORKLOADS["code"].input
    assert code.median == 5000 and 30000 <= code.p99 <= 60000
    rng = random.Random(5)
    samples = np.array([code.sample(rng) for _ in range(20000)])
    assert np.median(samples) == pytest.approx(5000, rel=0.05)
    assert np.percentile(samples, 99) == pytest.approx(45000, rel=0.1)
    assert WORKLOADS["code"].output.median == 500
    creative = WORKLOADS["creative"]
    assert (creative.input.low, creative.input.high, creative.output.low, creative.output.high) == (200, 800, 200, 500)
    assert LengthDistribution.lognormal(5000, 45000).describe(0.1) == "log-normal median 500, p99 4500"


def test_creative_prompts_are_fitted_to_their_targets():
    counter = EstimatedTokenizer()
    corpus = CorpusBuilder(WORKLOADS["creative"], counter, seed=1).build(40)
    for p in corpus:
        assert p.prompt_tokens == counter.count(p.content)
        assert abs(p.prompt_tokens - p.target_tokens) <= max(2, 0.01 * p.target_tokens), p
        assert 200 <= p.output_tokens <= 500
        assert p.content[0]["role"] == "system" and "story so far" in p.content[1]["content"]


def test_corpora_are_deterministic_per_seed():
    counter = EstimatedTokenizer()
    a = CorpusBuilder(WORKLOADS["creative"], counter, seed=3).build(5)
    b = CorpusBuilder(WORKLOADS["creative"], counter, seed=3).build(5)
    c = CorpusBuilder(WORKLOADS["creative"], counter, seed=4).build(5)
    assert [p.content for p in a] == [p.content for p in b]
    assert [p.content for p in a] != [p.content for p in c]


def test_code_prompts_paste_real_source_and_share_repository_prefixes():
    counter = EstimatedTokenizer()
    corpus = CorpusBuilder(WORKLOADS["code"], counter, seed=2, scale=0.2).build(40)
    repos = [p.repo for p in corpus]
    assert len(set(repos)) > 3 and max(repos.count(r) for r in set(repos)) >= 5  # some repositories repeat
    by_repo: dict[str, list[str]] = {}
    for p in corpus:
        text = p.content[1]["content"]
        assert "```python" in text and "Question:" in text
        by_repo.setdefault(p.repo, []).append(text.split("\nQuestion:")[0])
    for texts in by_repo.values():
        texts.sort(key=len)
        for shorter, longer in itertools.pairwise(texts):
            # the same repository context, cut at different lengths: one is a prefix of the other
            assert longer.startswith(shorter.rstrip("\n").rsplit("\n", 1)[0])
    first = corpus[0].content[1]["content"]
    path = first.split("### ", 1)[1].split("\n", 1)[0]
    assert os.path.isfile(code_context.stdlib_dir() / path)  # real files of this interpreter's stdlib


def test_targets_are_clamped_to_the_context_and_counted():
    counter = EstimatedTokenizer()
    builder = CorpusBuilder(WORKLOADS["code"], counter, seed=0, max_model_len=2048)
    corpus = builder.build(30)
    assert builder.max_output_tokens == 1024
    for p in corpus:
        assert p.output_tokens <= 1024
        assert p.prompt_tokens + p.output_tokens <= 2048
    assert builder.stats.input_clamped == sum(p.input_clamped for p in corpus) > 20  # median 5000 > 2048
    summary = builder.stats.summary("code", counter, 2048)
    assert "shortened" in summary and "estimate" in summary


def test_a_prompts_file_round_trips_and_reads_vllm_custom_rows(tmp_path):
    counter = EstimatedTokenizer()
    corpus = CorpusBuilder(WORKLOADS["creative"], counter, seed=1).build(3)
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(p.to_json() for p in corpus) + '\n{"prompt": "plain", "output_tokens": 9}\n')
    chat = load_prompts_file(path, "chat")
    assert [p.content for p in chat[:3]] == [p.content for p in corpus]
    assert chat[3].content == [{"role": "user", "content": "plain"}] and chat[3].output_tokens == 9
    completions = load_prompts_file(path, "completions")
    assert completions[3].content == "plain"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no prompt field"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1"):
        load_prompts_file(bad, "chat")
