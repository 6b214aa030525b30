"""Warm a vLLM server's per-batch-size caches before memory is measured.

A server keeps state per batch size it has met: oneDNN's GEMM primitives on the CPU backend (one per
linear layer and size, tens of kB each, up to the cache's capacity), and on GPUs the CUDA graphs and
allocator blocks of each captured size. Until those caches are full, every new size adds memory
that a leak rule reads as growth per request. Ordinary traffic meets new sizes only slowly (a
sequential warm-up of identical prompts meets two or three), so a measurement that starts after it
sees the caches fill during the measurement.

The sweep below meets them on purpose: sequential chat requests whose prompts grow word by word
(each prefill is a batch of a new size; one output token each, so it is quick), then a concurrent
burst whose decode batches take every size from the burst's width down to one. Chat completions,
not completions: the leak drill's injector keeps memory on /v1/completions only.
"""

from __future__ import annotations

import concurrent.futures

import requests

from ..core import vllm_key
from ..loadgen import conventions

# Prompt lengths of the sequential stretch: one more word each, so the prefill batches take ~this
# many sizes, past the 32 vLLM's oneDNN handler keeps per layer plus the demo profile's bound of 64
# that oneDNN keeps beside them (serving/profiles/demo.yaml).
SWEEP_PROMPTS = 128
# Width of the concurrent burst: decode batches of every size up to it.
BURST_WIDTH = 16
BURST_OUTPUT_TOKENS = 16
SWEEP_REQUESTS = SWEEP_PROMPTS + BURST_WIDTH


def sweep_batch_sizes(url: str, model: str, profile: str = "demo", timeout_s: float = 120) -> int:
    """Sends the sweep to the vLLM at `url` and returns how many requests it sent; raises on an error."""
    rules = conventions.for_profile(profile)
    headers = vllm_key.headers_for(url)

    def chat(content: str, max_tokens: int) -> None:
        resp = requests.post(
            f"{url}/v1/chat/completions",
            timeout=timeout_s,
            headers=headers,
            json={
                "model": model,
                "max_tokens": max_tokens,
                **rules.request_fields(),
                "messages": rules.prompt([{"role": "user", "content": content}]),
            },
        )
        resp.raise_for_status()

    for n in range(SWEEP_PROMPTS):
        # A distinct first word: prefix caching would otherwise skip the shared start of each prompt.
        chat(f"sweep{n} " + "word " * n, 1)
    with concurrent.futures.ThreadPoolExecutor(BURST_WIDTH) as pool:
        list(pool.map(lambda i: chat(f"burst {i} " + "word " * (4 * i), BURST_OUTPUT_TOKENS), range(BURST_WIDTH)))
    return SWEEP_REQUESTS
