"""What one streamed request produced: timings, token counts, or a classified failure.

Failure classes are a fixed set, so they can be Prometheus label values and Locust error rows
without unbounded growth; the free-text detail goes to the request log and the error message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OK = "ok"

# class -> what it means (shown in the README's table and the web UI's help)
FAILURES = {
    "connect_error": "could not connect (refused, unreachable, DNS)",
    "response_timeout": "no response headers within the request timeout",
    "no_response": "the connection closed before any response",
    "http_400": "HTTP 400 (bad request, e.g. prompt longer than max_model_len)",
    "http_401": "HTTP 401 (missing or wrong API key)",
    "http_403": "HTTP 403",
    "http_404": "HTTP 404 (wrong model name or path)",
    "http_408": "HTTP 408",
    "http_413": "HTTP 413 (request too large)",
    "http_422": "HTTP 422 (invalid request fields)",
    "http_429": "HTTP 429 (rate limited)",
    "http_500": "HTTP 500",
    "http_502": "HTTP 502",
    "http_503": "HTTP 503 (server overloaded or starting)",
    "http_504": "HTTP 504",
    "http_4xx": "another HTTP 4xx status",
    "http_5xx": "another HTTP 5xx status",
    "http_other": "an unexpected HTTP status",
    "not_streaming": "HTTP 200 but not an event stream (the server ignored stream=true)",
    "malformed_sse": "a line or payload that is not valid SSE / JSON",
    "stream_error": "the server reported an error inside the stream",
    "stream_timeout": "the stream stalled for longer than the request timeout",
    "stream_cut": "the stream ended before [DONE]",
    "no_tokens": "the stream finished without any generated token",
    "no_usage": "the stream finished without a usage report (stream_options.include_usage)",
    "client_error": "an unexpected error in the load generator itself",
}
CANCELLED = "cancelled"  # Locust stopped the user mid-stream (ramp-down, end of test): not a failure

OUTCOMES = (OK, *FAILURES, CANCELLED)


def http_failure(status: int) -> str:
    name = f"http_{status}"
    if name in FAILURES:
        return name
    if 400 <= status < 500:
        return "http_4xx"
    if 500 <= status < 600:
        return "http_5xx"
    return "http_other"


@dataclass
class StreamResult:
    outcome: str = OK
    detail: str = ""
    status: int = 0
    start: float = 0.0  # perf_counter when the request was sent
    connect: float = 0.0  # seconds getting a connection before it: opening a new one, or checking a kept one
    ttft: float | None = None  # seconds to the first chunk carrying output
    e2e: float = 0.0  # seconds to the end of the stream (or the failure)
    itls: list[float] = field(default_factory=list)  # gaps between output chunks
    chunks: int = 0  # output chunks seen
    output_tokens: int | None = None  # from the server's usage report
    prompt_tokens: int | None = None
    response_bytes: int = 0
    retried: bool = False  # sent again after a kept-alive connection closed under it
    text: str | None = None  # the generated text, when the sender asked to keep it

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (vLLM's definition), from the server's token count."""
        if self.ttft is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    @property
    def message(self) -> str:
        """Locust's error text: the class first, then the detail (stable per cause, so rows group)."""
        return f"{self.outcome}: {self.detail}" if self.detail else self.outcome
