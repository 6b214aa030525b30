"""Metric families exactly as config/metrics/leakwatch-exporter.csv defines them.

The CSV is the contract that rules, dashboards and `leakwatch check` are written against: names,
types, help texts and label names come from it, and a family the code asks for that the CSV lacks
fails when the collector is built, not in production.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..core.errors import LeakwatchError
from ..core.metric_catalogue import exporter_metrics

_KINDS = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}


class Schema:
    def __init__(self, rows: dict[str, dict] | None = None):
        self.rows = exporter_metrics() if rows is None else rows
        for name, row in self.rows.items():
            if row["type"] not in _KINDS:
                raise LeakwatchError(f"{name}: type {row['type']!r} is not one of {', '.join(_KINDS)}")

    def require(self, names) -> None:
        missing = sorted(set(names) - set(self.rows))
        if missing:
            raise LeakwatchError(f"metrics missing from config/metrics/leakwatch-exporter.csv: {', '.join(missing)}")

    def family(self, name: str) -> Family:
        return Family(name, self.rows[name])


class Family:
    """One metric family being filled; `add(value, role=..., ...)` takes exactly the CSV's labels."""

    def __init__(self, name: str, row: dict):
        self.labels = tuple(row["labels"])
        self.metric: Metric = _KINDS[row["type"]](name, row["help"], labels=self.labels)

    def add(self, value: float, **labels: str) -> None:
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.metric.name}: labels {sorted(labels)} != {list(self.labels)}")
        self.metric.add_metric([labels[key] for key in self.labels], value)

    @property
    def empty(self) -> bool:
        return not self.metric.samples
