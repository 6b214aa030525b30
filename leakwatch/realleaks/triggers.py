"""The request patterns that trigger vLLM's own leaks (config/vllm_leaks.yaml's `trigger`), one
builder per pattern: the i-th triggering request's path, body and client timeout. The screening
(leakwatch.realleaks.screening) sends them with `requests`; loadtest/_real_leaks.py's Locust users
send the very same bodies.

Each request is unique where uniqueness is the trigger (a new response to store, a schema the
grammar cache has not compiled), and deterministic in i, so two runs send the same traffic."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import requests

from ..core import vllm_key
from ..core.errors import LeakwatchError
from .catalogue import TRIGGERS

# Words for unique, tokenizer-friendly text (the demo's byte-level BPE and real models alike).
WORDS = (
    "memory leak server request token cache engine worker batch stream prompt model queue grammar "
    "schema response store client timeout block prefix decode alert heal restart host budget"
).split()


def unique_text(i: int, words: int) -> str:
    rng = random.Random(i)
    return f"request {i}: " + " ".join(rng.choice(WORDS) for _ in range(words))


@dataclass(frozen=True)
class TriggerRequest:
    path: str
    body: dict
    # The client gives up after this long (None: waits for the answer): the pattern of a caller
    # with a short timeout, which makes vLLM abort the request.
    client_timeout_s: float | None = None


def responses_store(i: int, model: str) -> TriggerRequest:
    """POST /v1/responses with a unique input; `store` stays at its default (true), so a vLLM with
    VLLM_ENABLE_RESPONSES_API_STORE=1 keeps the response and its messages for ever."""
    return TriggerRequest("/v1/responses", {"model": model, "input": unique_text(i, 300), "max_output_tokens": 8})


def unique_json_schema(i: int, model: str) -> TriggerRequest:
    """A completion constrained by a JSON schema no earlier request used (unique property names):
    xgrammar compiles it and keeps the compiled grammar in EngineCore's cache."""
    properties = {f"field_{i}_{k}": {"type": "integer" if k % 2 else "string"} for k in range(8)}
    schema = {"type": "object", "properties": properties, "required": sorted(properties)}
    return TriggerRequest(
        "/v1/completions",
        {
            "model": model,
            "prompt": f"record {i}:",
            "max_tokens": 1,
            "response_format": {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}},
        },
    )


def client_timeout(i: int, model: str) -> TriggerRequest:
    """A long generation the client abandons after a fraction of a second (vLLM #57061's and
    vllm-omni #6462's pattern): vLLM must abort it and free its state."""
    return TriggerRequest(
        "/v1/completions",
        {"model": model, "prompt": unique_text(i, 200), "max_tokens": 1024, "ignore_eos": True},
        client_timeout_s=0.3,
    )


def short_decode(i: int, model: str) -> TriggerRequest:
    """A unique prompt with max_tokens=1 under prefix caching (vLLM #44175's load): every request
    allocates new KV blocks and ends after its prefill."""
    return TriggerRequest("/v1/completions", {"model": model, "prompt": unique_text(i, 120), "max_tokens": 1})


BUILDERS: dict[str, Callable[[int, str], TriggerRequest]] = {
    "responses-store": responses_store,
    "unique-json-schema": unique_json_schema,
    "client-timeout": client_timeout,
    "short-decode": short_decode,
}
assert tuple(BUILDERS) == TRIGGERS, "every trigger the catalogue allows has a builder"


# Twins are numbered far from any trigger, so their unique texts are never a trigger's (no prefix
# cache hit that would change a trigger's shapes).
TWIN_OFFSET = 1_000_000


def shape_twin(trigger: str, i: int, model: str) -> TriggerRequest:
    """The i-th request of the same shape as `trigger` that triggers nothing of the leak: same endpoint,
    same input and output sizes. The screening sends these first, so that caches filling with request
    shapes (oneDNN's primitives per batch size in the worker, ~40 MB on the demo) are mostly full
    before its baseline (what still fills shows in the phase's first thirds only). A stored response becomes an unstored
    one, a new schema the one schema already compiled; the controls (which leak nothing on the pinned
    vLLM) are their own twins, on other prompts."""
    request = build(trigger, i + TWIN_OFFSET, model)
    if trigger == "responses-store":
        return TriggerRequest(request.path, {**request.body, "store": False}, request.client_timeout_s)
    if trigger == "unique-json-schema":
        one_schema = build(trigger, 0, model).body["response_format"]
        return TriggerRequest(request.path, {**request.body, "response_format": one_schema}, request.client_timeout_s)
    return request


def build(trigger: str, i: int, model: str) -> TriggerRequest:
    try:
        return BUILDERS[trigger](i, model)
    except KeyError:
        raise LeakwatchError(f"no trigger {trigger!r}; known: {', '.join(BUILDERS)}") from None


def send(session: requests.Session, base_url: str, request: TriggerRequest) -> str:
    """Sends one triggering request: "ok", "abandoned" (the client timed out, as intended) or
    raises LeakwatchError with vLLM's answer (a trigger vLLM rejects triggers nothing)."""
    url = base_url.rstrip("/") + request.path
    try:
        resp = session.post(
            url,
            json=request.body,
            headers=vllm_key.headers_for(base_url),
            timeout=request.client_timeout_s or 120,
        )
    except requests.Timeout:
        if request.client_timeout_s is not None:
            return "abandoned"
        raise LeakwatchError(f"{url} did not answer within 120 s") from None
    except requests.RequestException as exc:
        raise LeakwatchError(f"{url}: {exc}") from None
    if resp.status_code != 200:
        raise LeakwatchError(f"{url} answered HTTP {resp.status_code}: {resp.text[:300]}")
    if request.client_timeout_s is not None:
        return "answered"  # finished before the client's timeout: triggers nothing
    return "ok"
