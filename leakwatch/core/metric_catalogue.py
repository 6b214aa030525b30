"""Which metric names the real exporters emit, and which names a PromQL expression uses.

Rules and dashboards are checked against this catalogue (a contract test), so a query on a metric
that no exporter emits (the articles' `nvidia_smi_memory_used`, vLLM's removed
`gpu_cache_usage_perc`) fails the suite instead of a dashboard going blank in production.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from pathlib import Path

import requests

from .paths import CONFIG_DIR

METRICS_DIR = CONFIG_DIR / "metrics"
# The host leak measure of a vLLM process role: anonymous memory plus swap (the exporter's own
# baseline and growth use the same sum: leakwatch/exporter/host_memory.py). Rules, dashboards and
# `leakwatch check` build their queries from this one definition.
HOST_LEAK_MEASURE = ("leakwatch_process_anonymous_memory_bytes", "leakwatch_process_swap_bytes")


def host_leak_measure(select=lambda name: name) -> str:
    """The measure as PromQL, each series passed through `select` (e.g. to add a job selector)."""
    return " + ".join(select(name) for name in HOST_LEAK_MEASURE)


PROMQL_KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
    "atan2",
    "start",
    "end",
}
# Clauses whose parenthesised list holds label names, not metrics.
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", re.I)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_SELECTOR_BODY = re.compile(r"\{([^}]*)\}")
_NAME_MATCHER = re.compile(r"__name__\s*=\s*(\"[^\"]*\"|'[^']*')")
_RANGE = re.compile(r"\[[^\]]*\]")
_TEMPLATE_VAR = re.compile(r"\$\{[^}]*\}|\$\w+")
_IDENT = re.compile(r"(?<![\w.:])[a-zA-Z_:][a-zA-Z0-9_:]*")


# PromQL line comments (a '#' outside strings and selectors: our expressions put none there).
_COMMENT = re.compile(r"(?m)^\s*#.*$")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana template variables allowed)."""
    names: set[str] = set()
    text = _TEMPLATE_VAR.sub("1", expr)
    text = _COMMENT.sub("", text)
    for body in _SELECTOR_BODY.findall(text):
        names.update(m.strip("\"'") for m in _NAME_MATCHER.findall(body))
    text = _SELECTOR_BODY.sub(" ", text)
    text = _STRING.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    # The look-behind in _IDENT keeps the tails of numbers and durations (1e3, 1w) out.
    for match in _IDENT.finditer(text):
        word = match.group(0)
        rest = text[match.end() :].lstrip()
        if word.lower() in PROMQL_KEYWORDS or rest.startswith("("):
            continue
        names.add(word)
    return names


# One PromQL token at a time, for with_matcher: what to copy unchanged, and the metric identifiers.
_TOKEN = re.compile(
    r"(?P<string>\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|`[^`]*`)"
    r"|(?P<range>\[[^\]]*\])"
    r"|(?P<labels>\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))"
    r"|(?P<ident>(?<![\w.:])[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"|(?P<other>.)",
    re.S | re.I,
)
_GROUPING = re.compile(r"(by|without)\s*\(", re.I)


def with_matcher(expr: str, matcher: str) -> str:
    """`expr` with `matcher` (e.g. `deployment="canary"`) added to every series it selects, so one
    query serves each side of a comparison. A selector that already has matchers gets it appended."""
    if not matcher.strip():
        return expr
    return rewrite_selectors(expr, lambda name, body, ranged: f"{name}{{{body + ', ' if body else ''}{matcher}}}")


def rewrite_selectors(expr: str, replace: Callable[[str, str, bool], str]) -> str:
    """`expr` with every series selector replaced by `replace(metric, matchers, ranged)`: the
    metric's name, the text between its braces ("" when it has none) and whether a range (`[5m]`)
    follows it. Functions, aggregations, keywords, strings and label lists are copied unchanged."""
    out: list[str] = []
    pos = 0
    while pos < len(expr):
        token = _TOKEN.match(expr, pos)
        assert token is not None  # `other` matches any character
        pos = token.end()
        word = token.group("ident")
        if word is None:
            out.append(token.group(0))
            continue
        rest = expr[pos:].lstrip()
        if word.lower() in PROMQL_KEYWORDS or rest.startswith("(") or _GROUPING.match(rest):
            out.append(word)  # a function, an aggregation (`sum by (x) (...)` too) or a keyword
            continue
        body = ""
        if rest.startswith("{"):
            body_start = expr.index("{", pos) + 1
            body_end = _selector_end(expr, body_start)
            body = expr[body_start:body_end].strip().rstrip(",")
            pos = body_end + 1
        out.append(replace(word, body, expr[pos:].lstrip().startswith("[")))
    return "".join(out)


def _selector_end(expr: str, pos: int) -> int:
    """Where the selector body starting at `pos` closes (a `}` inside a quoted value does not)."""
    while pos < len(expr):
        string = _STRING.match(expr, pos)
        if string:
            pos = string.end()
        elif expr[pos] == "}":
            return pos
        else:
            pos += 1
    raise ValueError(f"unclosed selector in {expr!r}")


def load_csv(path: Path) -> dict[str, dict]:
    """A metric list file: `metric, type, help[, labels]` rows; '#' starts a comment line.

    A help text with commas is quoted (csv); labels are space-separated."""
    rows = {}
    with open(path, newline="") as fh:
        for row in csv.reader(line for line in fh if line.strip() and not line.lstrip().startswith("#")):
            name, kind, help_text, labels = (cell.strip() for cell in (row + ["", "", ""])[:4])
            rows[name] = {"type": kind, "help": help_text, "labels": labels.split()}
    return rows


def dcgm_metrics() -> dict[str, dict]:
    return load_csv(METRICS_DIR / "dcgm-exporter.csv")


def exporter_metrics() -> dict[str, dict]:
    """The contract of `leakwatch exporter` (config/metrics/leakwatch-exporter.csv)."""
    return load_csv(METRICS_DIR / "leakwatch-exporter.csv")


def loadgen_metrics() -> dict[str, dict]:
    """The metrics of the Locust load generator (config/metrics/loadgen.csv)."""
    return load_csv(METRICS_DIR / "loadgen.csv")


def vllm_metrics() -> dict[str, dict]:
    """What vLLM's /metrics emits, recorded from the real server (`leakwatch metrics-record`)."""
    return load_csv(METRICS_DIR / "vllm.csv")


def node_exporter_metrics() -> dict[str, dict]:
    """What node exporter emits, recorded from the real server (`leakwatch metrics-record`)."""
    return load_csv(METRICS_DIR / "node-exporter.csv")


def static_catalogue() -> set[str]:
    """Every series name a query may use, from the committed metric lists alone (no stack): each
    exporter's list, the recording rules' outputs and the series Prometheus makes itself."""
    names: set[str] = set()
    for path in sorted(METRICS_DIR.glob("*.csv")):
        names |= sample_names(load_csv(path))
    return names | recorded_names() | PROMETHEUS_SYNTHETIC


def sample_names(contract: dict[str, dict]) -> set[str]:
    """The sample names a metric list exposes (a histogram as its _bucket, _sum and _count)."""
    names = set()
    for name, row in contract.items():
        if row["type"] == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif row["type"] == "summary":
            names |= {name, f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def exposed_names(text: str) -> set[str]:
    """Every sample name in a Prometheus text exposition (histograms as _bucket/_sum/_count)."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = _IDENT.match(line)
            if match:
                names.add(match.group(0))
    return names


def scrape_names(url: str, timeout: float = 10.0) -> set[str]:
    from . import webauth

    resp = requests.get(url, timeout=timeout, auth=webauth.auth_for(url))
    resp.raise_for_status()
    return exposed_names(resp.text)


# Series Prometheus makes itself instead of scraping them: scrape metadata per target, alert state.
PROMETHEUS_SYNTHETIC = {
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
    "ALERTS",
    "ALERTS_FOR_STATE",
}


def recorded_names(rules_dir: Path | None = None) -> set[str]:
    """Names the project's recording rules create (prometheus/rules/*.yml)."""
    import yaml

    from .paths import RULES_DIR

    names: set[str] = set()
    for path in sorted((rules_dir or RULES_DIR).glob("*.yml")):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            names.update(rule["record"] for rule in group.get("rules", []) if "record" in rule)
    return names


# Exporter series with a `gpu` label that exist on a CPU host too (the label is empty there).
CPU_AND_GPU = {"leakwatch_memory_unexplained_bytes"}


def gpu_only_names() -> set[str]:
    """Series that exist only on a GPU host: DCGM's, and our exporter's per-GPU (NVML) series."""
    return set(dcgm_metrics()) | {
        name for name, row in exporter_metrics().items() if "gpu" in row["labels"] and name not in CPU_AND_GPU
    }
