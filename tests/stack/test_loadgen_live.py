"""The load generator's client against the real vLLM CPU server of the shared stack: code prompts fit
the demo model's context by the server's own tokenizer, a wrong model name is a classified 404, and
the client's histograms use the server's bucket edges. The load shapes at full size (256 streams held,
a production day of Poisson arrivals) are in tests/soak/test_load_shapes_live.py."""

from __future__ import annotations

import numpy as np
import requests
from scipy import stats

from benchmarks.loadgen import server_metrics
from leakwatch.loadgen.client import StreamingClient, request_body
from leakwatch.loadgen.corpus_builder import CorpusBuilder
from leakwatch.loadgen.stats import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS
from leakwatch.loadgen.tokens import ServerTokenizer, probe
from leakwatch.loadgen.workloads import WORKLOADS
from tests.support.locust_run import run_locust


def test_code_prompts_fit_the_demo_context_with_the_server_tokenizer(native_stack, tmp_path):
    url = native_stack.vllm_url
    info = probe(url)
    assert info.max_model_len == 2048
    counter = ServerTokenizer(url, native_stack.model)
    builder = CorpusBuilder(WORKLOADS["code"], counter, seed=5, scale=0.1, max_model_len=info.max_model_len)
    corpus = builder.build(150)
    targets = np.array([p.target_tokens for p in corpus])
    kind, args = WORKLOADS["code"].input.scipy_args(0.1)
    assert stats.kstest(targets, kind, args=args).pvalue > 0.01  # log-normal, median 500, p99 4500
    base = min(p.prompt_tokens for p in corpus)  # the fixed part: system prompt, header, question
    for p in corpus:
        assert p.prompt_tokens + p.output_tokens <= 2048
        room = 2048 - p.output_tokens
        goal = min(p.target_tokens, room)
        if goal > base + 50:
            assert abs(p.prompt_tokens - goal) <= max(60, 0.03 * goal), p  # whole lines of code
    print(f"\ncode corpus on the demo model: {builder.stats.summary('code', counter, 2048)}")
    # The server agrees with the corpus on every prompt it serves.
    run = run_locust(
        tmp_path,
        url,
        "--load-shape",
        "steady",
        "-u",
        "4",
        "-r",
        "4",
        "--request-limit",
        "24",
        "--prompt-scale",
        "code=0.1",
        "--max-output-tokens",
        "16",
        "--corpus-size",
        "24",
        "CodeAssistanceUser",
        timeout=300,
    )
    assert run.returncode == 0, run.output[-3000:]
    rows = run.requests
    assert len(rows) == 24 and all(r["prompt_tokens"] == r["corpus_prompt_tokens"] for r in rows)
    assert len({r["repo"] for r in rows}) < 24  # repositories repeat: shared prefixes


def test_a_wrong_model_name_is_a_classified_http_404(native_stack, tmp_path):
    client = StreamingClient(native_stack.vllm_url, request_timeout=60)
    result = client.stream("chat", request_body("chat", "no-such-model", [{"role": "user", "content": "hi"}], 4, True))
    client.close()
    assert result.outcome == "http_404" and "does not exist" in result.message
    run = run_locust(
        tmp_path,
        native_stack.vllm_url,
        "--model",
        "no-such-model",
        "--load-shape",
        "steady",
        "-u",
        "2",
        "--request-limit",
        "6",
        "--corpus-size",
        "3",
        "--tokenizer",
        "estimate",
        timeout=180,
    )
    assert run.returncode == 1 and run.csv("exceptions") == []
    assert run.outcomes() == {"http_404": 6}
    assert "is not served by" in run.output and "fix --model" in run.output


def test_client_histograms_use_the_server_s_bucket_edges(native_stack):
    requests.post(
        f"{native_stack.vllm_url}/v1/completions",
        timeout=60,
        json={"model": native_stack.model, "prompt": "edges", "max_tokens": 4},
    )
    snap = server_metrics.scrape(native_stack.vllm_url)
    for name, ours in (
        (server_metrics.TTFT, TTFT_BUCKETS),
        (server_metrics.ITL, ITL_BUCKETS),
        ("vllm:e2e_request_latency_seconds", E2E_BUCKETS),
    ):
        assert sorted(snap.histogram(name))[:-1] == list(ours), name
