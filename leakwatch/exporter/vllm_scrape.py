"""vLLM's own /metrics and /health: requests served, requests in flight, tokens processed, series
count, its cache configuration (the KV pool's size), health.

Only six families are read, so a line scan replaces a full exposition parser: vLLM's /metrics runs
to thousands of histogram lines and this runs on every scrape.
"""

from __future__ import annotations

import http.client
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..core.settings import ready_path

VLLM_HEALTH_PATH = ready_path("vllm")  # 200 only while its engine is alive

REQUESTS_SERVED = "vllm:request_success_total"
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# Advance at every engine step with work, so they show a busy server between two finished requests.
TOKENS_PROCESSED = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")
# An info gauge whose labels are vLLM's CacheConfig (num_gpu_blocks, block_size, cache_dtype, ...).
CACHE_CONFIG = "vllm:cache_config_info"
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class VllmStats:
    series: int  # sample lines: the cardinality of vLLM's /metrics
    requests_served: float  # sum over engines, models and finish reasons
    in_flight: float  # running + waiting
    tokens_processed: float = 0.0  # prompt + generated tokens, sum over engines and models
    # vllm:cache_config_info's labels (engine 0's with data parallelism); None when vLLM has none.
    cache_config: dict[str, str] | None = None


def parse_labels(text: str) -> dict[str, str]:
    """`a="1",b="x\\"y"` -> {"a": "1", "b": 'x"y'} (the exposition format's escapes)."""
    labels, pos, text = {}, 0, text.strip()
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if not match:
            raise ValueError(f"unreadable label set at {text[pos : pos + 40]!r}")
        labels[match.group(1)] = re.sub(r"\\.", lambda m: _UNESCAPE.get(m.group(0), m.group(0)), match.group(2))
        pos = match.end()
    return labels


def parse_metrics(text: str) -> VllmStats:
    series = 0
    served = 0.0
    in_flight = 0.0
    tokens = 0.0
    seen_served = False
    cache_config: dict[str, str] | None = None
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        series += 1
        if not line.startswith("vllm:"):
            continue
        end = len(line.split("{", 1)[0].split(" ", 1)[0])
        name = line[:end]
        if name == CACHE_CONFIG and "{" in line:
            try:
                labels = parse_labels(line[end + 1 : line.rindex("}")])
            except ValueError:
                continue  # one unreadable info line costs the breakdown, not the scrape
            if cache_config is None or labels.get("engine") == "0":
                cache_config = labels
            continue
        if name != REQUESTS_SERVED and name not in IN_FLIGHT and name not in TOKENS_PROCESSED:
            continue
        # The value follows the label set (whose values may contain spaces); a timestamp may follow it.
        rest = line[line.rindex("}") + 1 :] if "{" in line else line[end:]
        value = float(rest.split()[0])
        if name == REQUESTS_SERVED:
            served += value
            seen_served = True
        elif name in IN_FLIGHT:
            in_flight += value
        else:
            tokens += value
    if not seen_served:
        raise ValueError(f"no {REQUESTS_SERVED} in vLLM's /metrics: not a vLLM server, or a vLLM without it")
    return VllmStats(
        series=series, requests_served=served, in_flight=in_flight, tokens_processed=tokens, cache_config=cache_config
    )


class VllmUnreachable(Exception):
    """vLLM's endpoint did not answer 200 (refused, timed out, HTTP error)."""


class VllmScraper:
    """One kept-alive connection to vLLM (http.client: a third of `requests`' CPU per call, which
    counts at one call per scrape)."""

    def __init__(self, base_url: str, timeout_s: float = 5.0):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http(s) URL")
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port  # .port raises ValueError on a bad port
        self._prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _get(self, path: str) -> tuple[int, bytes]:
        for attempt in (1, 2):  # a kept-alive connection vLLM closed meanwhile gets one fresh retry
            if self._conn is None:
                kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                self._conn = kind(self._host, self._port, timeout=self.timeout_s)
            try:
                self._conn.request("GET", self._prefix + path, headers={"Accept-Encoding": "identity"})
                resp = self._conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self._conn.close()
                self._conn = None
                if attempt == 2 or isinstance(exc, (ConnectionRefusedError, TimeoutError)):
                    raise VllmUnreachable(f"{self._prefix + path}: {exc}") from None
        raise AssertionError("unreachable")

    def metrics(self) -> VllmStats:
        status, body = self._get("/metrics")
        if status != 200:
            raise VllmUnreachable(f"/metrics: HTTP {status}")
        return parse_metrics(body.decode("utf-8", errors="replace"))

    def healthy(self) -> bool:
        """vLLM's /health: 200 only while its engine is alive (the API server alone is not enough)."""
        try:
            return self._get(VLLM_HEALTH_PATH)[0] == 200
        except VllmUnreachable:
            return False
