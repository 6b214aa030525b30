"""What the healer asks vLLM before and after a restart: requests in flight, and /health."""

from __future__ import annotations

import time

import requests

from ..core.settings import ready_path

IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


class VllmProbe:
    def __init__(self, base_url: str, timeout_s: float = 5.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def in_flight(self) -> float | None:
        """Requests running plus queued, from vLLM's /metrics; None when vLLM does not answer."""
        try:
            resp = requests.get(f"{self.base_url}/metrics", timeout=self.timeout_s)
            resp.raise_for_status()
        except requests.RequestException:
            return None
        total, found = 0.0, False
        for line in resp.text.splitlines():
            if line.startswith(IN_FLIGHT):
                name = line.split("{", 1)[0].split(" ", 1)[0]
                if name in IN_FLIGHT:
                    try:
                        total += float(line.rsplit(" ", 1)[1])
                        found = True
                    except ValueError:
                        pass
        return total if found else None

    def wait_idle(self, timeout_s: float, interval_s: float = 0.5) -> float | None:
        """Waits up to timeout_s for nothing in flight; returns the last count seen."""
        deadline = time.monotonic() + timeout_s
        count = self.in_flight()
        while count and time.monotonic() < deadline:
            time.sleep(interval_s)
            count = self.in_flight()
        return count

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.base_url}{ready_path('vllm')}", timeout=self.timeout_s).status_code == 200
        except requests.RequestException:
            return False

    def wait_healthy(self, timeout_s: float, interval_s: float = 1.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy():
                return True
            time.sleep(interval_s)
        return self.healthy()
