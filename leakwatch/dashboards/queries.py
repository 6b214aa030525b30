"""PromQL building blocks the dashboards share, and Grafana's variable expansion for the checks.

Grafana sends a panel's query with its variables replaced; the contract and end-to-end tests do the
same replacement (`expand`) before handing a query to promtool or to the real Prometheus.
"""

from __future__ import annotations

import math
import re

from ..core import alert_config
from ..core.topology import DEPLOYMENT_LABEL

# The scrape jobs' selectors the rules use (config/alerts.yaml), so a renamed job is renamed once.
_ALERTS = alert_config.load()

# vLLM's own series carry model_name; the dashboards filter them by the model and instance variables.
VLLM = 'model_name=~"$model", instance=~"$instance"'
# prometheus_client's process_* and python_gc_* collectors in vLLM describe the API-server process.
VLLM_PROCESS = ", ".join(filter(None, (_ALERTS.selector("vllm"), 'instance=~"$instance"')))
NODE = _ALERTS.selector("node")
# The OpenAI API's own endpoints (not /metrics or /health) as vLLM's HTTP instrumentator labels them.
VLLM_API = f'{VLLM_PROCESS}, handler=~"/v1/.*"'
GPU = 'gpu=~"$gpu"'

MIB = 1048576
# Forecasts are capped so a flat or shrinking series shows as "not growing" instead of infinity.
FORECAST_CAP_S = 30 * 86400


def rate(metric: str, selector: str = VLLM) -> str:
    return f"rate({metric}{{{selector}}}[$__rate_interval])" if selector else f"rate({metric}[$__rate_interval])"


def quantile(q: float, histogram: str, by: str = "model_name", selector: str = VLLM) -> str:
    """A percentile from a Prometheus histogram (vLLM's by default), per `by` label ("" for one
    overall figure)."""
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) ({rate(histogram + '_bucket', selector)}))"


def per_side(expr: str, text: str = "", *labels: str, into: str = "series") -> str:
    """`expr` with a label `into` for legends: `text` and the values of `labels` joined by spaces,
    led by the canary's side where the series carry one (their deployment label, docs/canary.md),
    e.g. "canary p90 demo", and "p90 demo" without a canary. Grafana prints a missing label's name,
    so a legend may only name labels every series has; this one always exists."""
    if text:
        # A constant (label_replace of the empty value of `into` itself, which the series lack).
        expr = f'label_replace({expr}, "{into}", "{text}", "{into}", "")'
        labels = (into, *labels)
    names = ", ".join(f'"{name}"' for name in (DEPLOYMENT_LABEL, *labels))
    joined = f'label_join({expr}, "{into}", " ", {names})'
    # Without a side the joined value starts with the separator: drop it.
    return f'label_replace({joined}, "{into}", "$1", "{into}", " (.*)")'


def per_process(selector: str) -> str:
    """Series labelled role and rank, with a `process` label such as "worker 0" (or "canary worker
    0", see per_side) for legends: rank is empty (so absent) outside the workers, and Grafana prints
    a missing label's name."""
    return per_side(selector, "", "role", "rank", into="process")


def ratio(numerator: str, denominator: str) -> str:
    return f"({numerator}) / ({denominator})"


def sides(by: str = "") -> str:
    """A grouping clause's labels with the canary's deployment label added: its sides stay apart."""
    return ", ".join(filter(None, (by, DEPLOYMENT_LABEL)))


def failed_api_calls(by: str = "") -> str:
    """Non-2xx answers of the OpenAI API per second (4xx: bad requests, 5xx: server failures)."""
    grouping = f" by ({by}) " if by else ""
    return f'sum{grouping}(rate(http_requests_total{{{VLLM_API}, status!="2xx"}}[$__rate_interval]))'


# -- Grafana's variable expansion ----------------------------------------------------------------

# `$1` is label_replace's capture group, not a variable (Grafana leaves it as it is too).
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$([A-Za-z_]\w*)")


def grafana_step(range_s: float, scrape_interval_s: float, max_points: int = 1000) -> int:
    """Roughly Grafana's $__interval: the range over the points a panel draws, never below a scrape."""
    return int(max(scrape_interval_s, math.ceil(range_s / max_points)))


def rate_interval(step_s: float, scrape_interval_s: float) -> int:
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 x scrape interval)."""
    return int(max(step_s + scrape_interval_s, 4 * scrape_interval_s))


def expand(expr: str, values: dict[str, str], range_s: float, step_s: float, scrape_interval_s: float) -> str:
    """`expr` with Grafana's built-in and the dashboard's template variables replaced.

    `values` maps variable names to what Grafana would put in the query (a regex for multi-value
    variables). An unknown variable raises KeyError, so a typo in a query cannot pass unnoticed."""
    builtins = {
        "__rate_interval": f"{rate_interval(step_s, scrape_interval_s)}s",
        "__interval": f"{int(step_s)}s",
        "__range": f"{int(range_s)}s",
        "__range_s": str(int(range_s)),
    }

    def replace(match: re.Match) -> str:
        name = next(group for group in match.groups() if group)
        return builtins[name] if name in builtins else values[name]

    return _VARIABLE.sub(replace, expr)
