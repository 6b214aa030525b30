"""Server-sent events as OpenAI-compatible servers stream them, line by line.

The parser is strict on purpose: a load test that silently skips garbage from a broken proxy or
server reports latencies for tokens that never arrived. Lines follow the SSE spec (`data:`,
`event:`, `id:`, `retry:`, comments starting with `:`, a blank line ends an event); anything else,
or a `data:` payload that is neither JSON nor `[DONE]`, is a `MalformedStream`.
"""

from __future__ import annotations

import json

DONE = object()  # the `data: [DONE]` sentinel that ends an OpenAI stream
KNOWN_FIELDS = (b"event", b"id", b"retry")


class MalformedStream(ValueError):
    """A line or payload that is not valid SSE / OpenAI streaming JSON."""


class EventParser:
    """Feed lines (with or without their line ending); get back complete event payloads."""

    __slots__ = ("_data",)

    def __init__(self):
        self._data: list[bytes] = []

    def feed(self, line: bytes):
        """Returns None while an event is incomplete, else the parsed JSON object or DONE."""
        line = line.rstrip(b"\r\n")
        if not line:
            if not self._data:
                return None
            payload = b"\n".join(self._data)
            self._data = []
            return parse_payload(payload)
        if line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
            return None
        if line.startswith(b":"):
            return None  # comment / keep-alive ping
        field = line.split(b":", 1)[0]
        if field in KNOWN_FIELDS:
            return None
        raise MalformedStream(f"not an SSE line: {line[:80]!r}")

    @property
    def pending(self) -> bool:
        """True while data lines wait for the blank line that ends their event."""
        return bool(self._data)

    def flush(self):
        """At the end of the body: the last event if the server omitted the final blank line."""
        if not self._data:
            return None
        return self.feed(b"")


def parse_payload(payload: bytes):
    if payload.strip() == b"[DONE]":
        return DONE
    try:
        value = json.loads(payload)
    except ValueError:
        raise MalformedStream(f"data is not JSON: {payload[:80]!r}") from None
    if not isinstance(value, dict):
        raise MalformedStream(f"data is not a JSON object: {payload[:80]!r}")
    return value


def chunk_has_token(chunk: dict, chat: bool) -> bool:
    """Whether a streamed chunk carries a step of generated output (what TTFT and ITL measure).

    vLLM sends one chunk per output token, with empty text when a token ends inside a multi-byte
    character, so a chunk counts even when its text is empty (vLLM's benchmark client does the same).
    Chat streams open with a chunk that only announces the assistant role; that one is no token.
    """
    choices = chunk.get("choices")
    if not choices:
        return False
    choice = choices[0]
    if not chat:
        return "text" in choice
    delta = choice.get("delta")
    if not delta:
        return False
    if "role" in delta and not delta.get("content") and not delta.get("tool_calls"):
        return False
    return any(key in delta for key in TOKEN_FIELDS)


TOKEN_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls")


def chunk_text(chunk: dict, chat: bool) -> str:
    """The generated text a token chunk carries (completions: text; chat: the delta's content)."""
    choice = chunk["choices"][0]
    if not chat:
        return str(choice.get("text") or "")
    return str((choice.get("delta") or {}).get("content") or "")
