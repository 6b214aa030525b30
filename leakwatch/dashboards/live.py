"""Run a dashboard's queries the way Grafana would, against a real Prometheus.

Variables are resolved with their own `label_values` queries, every panel query is expanded with
those values and Grafana's $__rate_interval / $__range for the dashboard's default time range, and
sent as a range query. Used by the end-to-end test and by `leakwatch dashboards check`.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

from ..core.durations import parse_duration
from ..core.promapi import Prometheus, PrometheusError
from ..core.settings import load as load_settings
from .board import Annotation, Board, Panel
from .queries import expand, grafana_step

_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.S)


@dataclass
class QueryResult:
    panel: Panel
    ref_id: str
    expr: str  # as sent, variables expanded
    series: int = 0
    finite_points: int = 0
    error: str | None = None
    labels: list[dict] = field(default_factory=list)  # of each series returned

    def legend_gaps(self, legend: str) -> list[str]:
        """Labels the legend names that a returned series lacks: Grafana would print the name."""
        wanted = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        return sorted({name for labels in self.labels for name in wanted if not labels.get(name)})

    @property
    def has_data(self) -> bool:
        return self.error is None and self.finite_points > 0


def scrape_interval_s() -> float:
    return parse_duration(load_settings().prometheus["scrape_interval"])


def default_range_s(board: Board) -> float:
    return parse_duration(board.time_from.removeprefix("now-"))


def regex_of(values: list[str]) -> str:
    """What Grafana substitutes for a multi-value variable in a Prometheus regex matcher."""
    escaped = [re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def resolve_variables(prom: Prometheus, board: Board, start: float, end: float) -> dict[str, list[str]]:
    """Each variable's values, from its own label_values query, in dashboard order (a variable may
    use the ones before it)."""
    resolved: dict[str, list[str]] = {}
    for var in board.variables:
        match = _LABEL_VALUES.match(var.query)
        if not match:
            raise ValueError(
                f"{board.uid}: variable {var.name} query {var.query!r} is not label_values(selector, label)"
            )
        selector = expand(
            match.group(1),
            {k: regex_of(v) if v else "" for k, v in resolved.items()},
            end - start,
            60,
            scrape_interval_s(),
        )
        resolved[var.name] = prom.label_values(match.group(2), selector, start, end)
    return resolved


def variable_values(resolved: dict[str, list[str]]) -> dict[str, str]:
    return {name: regex_of(values) if values else "" for name, values in resolved.items()}


def run_panel(prom: Prometheus, board: Board, panel: Panel, values: dict[str, str], end: float) -> list[QueryResult]:
    range_s = default_range_s(board)
    scrape = scrape_interval_s()
    step = grafana_step(range_s, scrape)
    # Grafana aligns the range to the step; ending exactly at `end` keeps the latest samples in view.
    start = end - step * math.floor(range_s / step)
    results = []
    for index, query in enumerate(panel.queries):
        expr = expand(query.expr, values, range_s, step, scrape)
        result = QueryResult(panel, chr(ord("A") + index), expr)
        try:
            data = prom.query_range(expr, start, end, step)
        except PrometheusError as exc:
            result.error = str(exc)
        else:
            result.series = len(data)
            result.labels = [series.get("metric", {}) for series in data]
            result.finite_points = sum(
                1 for series in data for _, value in series.get("values", []) if math.isfinite(float(value))
            )
        results.append(result)
    return results


def run_annotation(
    prom: Prometheus, board: Board, annotation: Annotation, values: dict[str, str], end: float
) -> str | None:
    """The error Prometheus gives for an annotation query, or None (annotations may well be empty)."""
    range_s = default_range_s(board)
    step = parse_duration(annotation.step)
    try:
        prom.query_range(expand(annotation.expr, values, range_s, step, scrape_interval_s()), end - range_s, end, step)
    except PrometheusError as exc:
        return str(exc)
    return None


def check_board(prom: Prometheus, board: Board, include_gpu: bool, end: float | None = None) -> list[QueryResult]:
    end = end or time.time()
    resolved = resolve_variables(prom, board, end - default_range_s(board), end)
    values = variable_values(resolved)
    results = []
    for panel in board.panels():
        if panel.gpu and not include_gpu:
            continue
        results += run_panel(prom, board, panel, values, end)
    return results
