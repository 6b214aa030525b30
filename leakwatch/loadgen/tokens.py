"""Counting prompt tokens the way the server will: its `/tokenize` endpoint, or the model's own tokenizer.

Prompt lengths are fitted in tokens, not characters, and with the chat template applied, so the
`usage.prompt_tokens` the server reports matches what the corpus asked for. When the server cannot be
reached the counter falls back to an estimate (and says so); requests then fail as classified errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import requests

# A rough ratio for the fallback estimate when no tokenizer answers (English text and code with
# BPE vocabularies of 32K-150K tokens).
ESTIMATED_CHARS_PER_TOKEN = 4.0


class TokenCounter(Protocol):
    exact: bool
    description: str

    def count(self, content) -> int:
        """Tokens of a chat message list (template and generation prompt applied) or a prompt string."""


@dataclass(frozen=True)
class ServerInfo:
    models: tuple[str, ...]
    max_model_len: int | None
    root: str | None  # where the server loaded the first model from (a folder or a hub id)


class ServerUnavailable(RuntimeError):
    pass


def _root_url(base_url: str) -> str:
    """The server root (where /tokenize lives) from the host URL, dropping a trailing /v1."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def probe(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> ServerInfo:
    """The served models and their context length, from GET /v1/models."""
    url = _root_url(base_url) + "/v1/models"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = requests.get(url, headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        raise ServerUnavailable(f"cannot reach {url}: {exc}") from None
    if resp.status_code != 200:
        raise ServerUnavailable(f"{url} answered HTTP {resp.status_code}: {resp.text[:200]}")
    try:
        data = resp.json()["data"]
    except (ValueError, KeyError, TypeError):
        raise ServerUnavailable(f"{url} did not answer an OpenAI model list: {resp.text[:200]}") from None
    models = tuple(str(m.get("id")) for m in data if isinstance(m, dict))
    first = data[0] if data and isinstance(data[0], dict) else {}
    max_len = first.get("max_model_len")
    return ServerInfo(models, int(max_len) if max_len else None, first.get("root"))


class ServerTokenizer:
    """vLLM's /tokenize: the server's own tokenizer and chat template."""

    exact = True

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0):
        self.url = _root_url(base_url) + "/tokenize"
        self.model = model
        self.timeout = timeout
        self.session = requests.Session()
        if api_key:
            self.session.headers["authorization"] = f"Bearer {api_key}"
        self.description = f"the server's tokenizer ({self.url})"

    def count(self, content) -> int:
        body = {"model": self.model}
        if isinstance(content, str):
            body["prompt"] = content
        else:
            body.update(messages=content, add_generation_prompt=True)
        try:
            resp = self.session.post(self.url, json=body, timeout=self.timeout)
        except requests.RequestException as exc:
            raise ServerUnavailable(f"cannot reach {self.url}: {exc}") from None
        if resp.status_code != 200:
            raise ServerUnavailable(f"{self.url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        return int(resp.json()["count"])


class LocalTokenizer:
    """The model folder's tokenizer (Hugging Face format), for building corpora without a server."""

    exact = True

    def __init__(self, path: str):
        from transformers import AutoTokenizer  # heavy: only when asked for

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.description = f"the tokenizer in {path}"

    def count(self, content) -> int:
        if isinstance(content, str):
            return len(self.tokenizer(content).input_ids)
        ids = self.tokenizer.apply_chat_template(content, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return len(ids)


class EstimatedTokenizer:
    """Characters / 4: only so a run against an unreachable server still starts and reports failures."""

    exact = False
    description = f"an estimate of {ESTIMATED_CHARS_PER_TOKEN:g} characters per token (no tokenizer reachable)"

    def count(self, content) -> int:
        if isinstance(content, str):
            chars = len(content)
        else:
            chars = sum(len(str(m.get("content", ""))) + 8 for m in content)
        return max(1, round(chars / ESTIMATED_CHARS_PER_TOKEN))
