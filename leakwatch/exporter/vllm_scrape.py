"""vLLM's own /metrics and /health: requests served, requests in flight, series count, health.

Only three families are read, so a line scan replaces a full exposition parser: vLLM's /metrics runs
to thousands of histogram lines and this runs on every scrape.
"""

from __future__ import annotations

from dataclasses import dataclass

import requests

REQUESTS_SERVED = "vllm:request_success_total"
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


@dataclass(frozen=True)
class VllmStats:
    series: int              # sample lines: the cardinality of vLLM's /metrics
    requests_served: float   # sum over engines, models and finish reasons
    in_flight: float         # running + waiting


def parse_metrics(text: str) -> VllmStats:
    series = 0
    served = 0.0
    in_flight = 0.0
    seen_served = False
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        series += 1
        if not line.startswith("vllm:"):
            continue
        end = len(line.split("{", 1)[0].split(" ", 1)[0])
        name = line[:end]
        if name != REQUESTS_SERVED and name not in IN_FLIGHT:
            continue
        # The value follows the label set (whose values may contain spaces); a timestamp may follow it.
        rest = line[line.rindex("}") + 1:] if "{" in line else line[end:]
        value = float(rest.split()[0])
        if name == REQUESTS_SERVED:
            served += value
            seen_served = True
        else:
            in_flight += value
    if not seen_served:
        raise ValueError(f"no {REQUESTS_SERVED} in vLLM's /metrics: not a vLLM server, or a vLLM without it")
    return VllmStats(series=series, requests_served=served, in_flight=in_flight)


class VllmScraper:
    def __init__(self, base_url: str, timeout_s: float = 5.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()  # keep-alive: no new connection per scrape

    def metrics(self) -> VllmStats:
        resp = self._session.get(f"{self.base_url}/metrics", timeout=self.timeout_s)
        resp.raise_for_status()
        return parse_metrics(resp.text)

    def healthy(self) -> bool:
        """vLLM's /health: 200 only while its engine is alive (the API server alone is not enough)."""
        try:
            return self._session.get(f"{self.base_url}/health", timeout=self.timeout_s).status_code == 200
        except requests.RequestException:
            return False
