"""A small client for Prometheus's HTTP API (instant and range queries, targets, rules, alerts)."""

from __future__ import annotations

import time

import requests

from . import webauth
from .errors import LeakwatchError


class PrometheusError(LeakwatchError):
    pass


class Prometheus:
    def __init__(self, base_url: str, timeout: float = 30.0, auth: tuple[str, str] | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        # Our stacks' Prometheus asks for basic auth (leakwatch/core/webauth.py); found, not configured.
        self.session.auth = auth or webauth.auth_for(self.base_url)

    def _get(self, path: str, **params):
        url = f"{self.base_url}{path}"
        try:
            resp = self.session.get(url, params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise PrometheusError(f"cannot reach Prometheus at {self.base_url}: {exc}") from None
        try:
            body = resp.json()
        except ValueError:
            raise PrometheusError(f"{url}: HTTP {resp.status_code}, not JSON: {resp.text[:200]}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{url} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params: dict[str, str | float] = {"query": expr}
        if at is not None:
            params["time"] = at
        return self._get("/api/v1/query", **params)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self._get("/api/v1/query_range", query=expr, start=start, end=end, step=step)["result"]

    def scalar(self, expr: str) -> float | None:
        """The value of a query that returns one series (None when it returns none)."""
        result = self.query(expr)
        if not result:
            return None
        return float(result[0]["value"][1])

    def targets(self) -> list[dict]:
        return self._get("/api/v1/targets")["activeTargets"]

    def rules(self) -> list[dict]:
        return self._get("/api/v1/rules")["groups"]

    def alerts(self) -> list[dict]:
        return self._get("/api/v1/alerts")["alerts"]

    def label_values(self, label: str, selector: str, start: float, end: float) -> list[str]:
        """Values of `label` on the series `selector` selects in [start, end] (Grafana's label_values)."""
        return self._get(f"/api/v1/label/{label}/values", **{"match[]": selector, "start": start, "end": end})

    def series_names(self) -> set[str]:
        return set(self._get("/api/v1/label/__name__/values"))

    def wait_for(self, expr: str, predicate=lambda result: bool(result), timeout: float = 120.0, interval: float = 2.0):
        """Polls an instant query until predicate(result) holds; returns the result."""
        deadline = time.monotonic() + timeout
        result = None
        while time.monotonic() < deadline:
            try:
                result = self.query(expr)
                if predicate(result):
                    return result
            except PrometheusError:
                pass
            time.sleep(interval)
        raise PrometheusError(f"timed out after {timeout:.0f}s waiting for {expr!r}; last result: {result}")
