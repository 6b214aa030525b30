"""Evaluates rule files over history with the real Prometheus engine.

Recording rules are evaluated level by level (a rule that reads another rule's output comes after
it): a range query at the evaluation step per rule, written back as TSDB blocks, and Prometheus is
restarted to load them. Alerting expressions are then range-queried and Prometheus's pending ->
firing state machine (`for:`) is applied in Python, exactly as the rule manager applies it at each
evaluation: a label set present in the result becomes pending at that evaluation, fires once it has
been present for `for:`, and a pending alert that misses one evaluation starts over.

Alerts with hysteresis (`<condition> # leakwatch: keeps firing while / or (<hold>) and ... ALERTS{...}`,
as leakwatch.rules.alert_rule writes them) read their own ALERTS series, which a range query cannot
see: both parts are range-queried and an alert keeps firing at an evaluation where its condition
is gone but the hold holds, as the rule manager's ALERTS series (written at the evaluation before)
makes it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..core.durations import parse_duration
from ..core.errors import LeakwatchError
from ..core.metric_catalogue import metric_names
from ..core.promapi import Prometheus
from ..rules.alert_rule import KEEP_FIRING_MARKER
from .openmetrics import BlockFiles, write_matrix
from .tsdb import TSDBServer, create_blocks

# Prometheus refuses range queries of more than 11,000 points per series.
MAX_POINTS = 10_000


@dataclass(frozen=True)
class RecordingRule:
    name: str
    expr: str
    labels: dict


@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    for_s: float
    labels: dict
    source: str

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "")

    @property
    def key(self) -> str:
        return f"{self.name}/{self.severity}" if self.severity else self.name


@dataclass
class Episode:
    labels: dict
    pending_at: float
    firing_at: float | None = None
    ended_at: float | None = None  # None: still active at the end of the history


@dataclass
class AlertResult:
    rule: AlertRule
    episodes: list[Episode] = field(default_factory=list)

    @property
    def fired(self) -> list[Episode]:
        return [e for e in self.episodes if e.firing_at is not None]

    @property
    def first_firing(self) -> float | None:
        return min((e.firing_at for e in self.fired), default=None)


@dataclass
class BacktestResult:
    start: float
    end: float
    step_s: float
    alerts: list[AlertResult]
    timings: dict


def load_rules(paths: list[Path]) -> tuple[list[RecordingRule], list[AlertRule]]:
    recording, alerting = [], []
    for path in paths:
        try:
            doc = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise LeakwatchError(f"cannot read rule file {path}: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
            raise LeakwatchError(f"{path}: not a Prometheus rule file (no `groups:` list)")
        for group in doc["groups"]:
            for rule in group.get("rules") or []:
                labels = {str(k): str(v) for k, v in (rule.get("labels") or {}).items()}
                if "record" in rule:
                    recording.append(RecordingRule(rule["record"], rule["expr"], labels))
                elif "alert" in rule:
                    for_s = parse_duration(rule["for"]) if rule.get("for") else 0.0
                    alerting.append(AlertRule(rule["alert"], str(rule["expr"]), for_s, labels, Path(path).name))
                else:
                    raise LeakwatchError(f"{path}: a rule without `record` or `alert`: {rule}")
    return recording, alerting


def recording_levels(rules: list[RecordingRule]) -> list[list[RecordingRule]]:
    """Rules grouped so that every rule comes after the rules whose output it reads."""
    by_name = {r.name: r for r in rules}
    deps = {r.name: metric_names(r.expr) & set(by_name) - {r.name} for r in rules}
    level: dict[str, int] = {}

    def depth(name: str, trail: tuple[str, ...]) -> int:
        if name in trail:
            raise LeakwatchError(f"recording rules depend on each other in a cycle: {' -> '.join(trail + (name,))}")
        if name not in level:
            level[name] = 1 + max((depth(d, trail + (name,)) for d in deps[name]), default=-1)
        return level[name]

    for name in by_name:
        depth(name, ())
    out: list[list[RecordingRule]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for rule in rules:
        out[level[rule.name]].append(rule)
    return out


def chunks(start: float, end: float, step: float) -> list[tuple[float, float]]:
    """[start, end] cut into range queries of at most MAX_POINTS evaluations on one grid."""
    out, span = [], step * (MAX_POINTS - 1)
    t = start
    while t <= end:
        out.append((t, min(end, t + span)))
        t += span + step
    return out


def _key(labels: dict) -> tuple:
    return tuple(sorted(labels.items()))


def split_hysteresis(expr: str) -> tuple[str, str | None]:
    """(condition, hold) of an alert expression; hold is None without hysteresis."""
    if KEEP_FIRING_MARKER not in expr:
        return expr, None
    condition, rest = expr.split(f"\n{KEEP_FIRING_MARKER}\n", 1)
    if not rest.startswith("or (\n") or "\n) and ignoring (" not in rest:
        raise LeakwatchError(f"cannot read the hysteresis of {expr!r}")
    hold = rest[len("or (\n") : rest.rindex("\n) and ignoring (")]
    return condition, hold


def _presence(
    api: Prometheus, rule: AlertRule, expr: str, start: float, end: float, step: float
) -> dict[tuple, set[int]]:
    present: dict[tuple, set[int]] = {}
    for s, e in chunks(start, end, step):
        for item in api.query_range(expr, s, e, step):
            labels = {k: v for k, v in item["metric"].items() if k != "__name__"}
            labels.update(rule.labels)
            labels["alertname"] = rule.name
            idx = present.setdefault(_key(labels), set())
            for ts, _ in item["values"]:
                idx.add(round((float(ts) - start) / step))
    return present


def evaluate_alert(api: Prometheus, rule: AlertRule, start: float, end: float, step: float) -> AlertResult:
    condition, hold = split_hysteresis(rule.expr)
    present = _presence(api, rule, condition, start, end, step)
    held = _presence(api, rule, hold, start, end, step) if hold else None
    return AlertResult(rule, apply_for(present, rule.for_s, start, end, step, held))


def apply_for(
    present: dict[tuple, set[int]],
    for_s: float,
    start: float,
    end: float,
    step: float,
    held: dict[tuple, set[int]] | None = None,
) -> list[Episode]:
    """Prometheus's alert state machine over evaluations at start + k * step. `held`: where the
    hysteresis expression holds; a firing alert stays active there."""
    episodes: list[Episode] = []
    last = round((end - start) / step)
    for key, indices in present.items():
        labels = dict(key)
        hold = (held or {}).get(key, set())
        current: Episode | None = None
        for k in range(min(indices), last + 1) if indices else ():
            ts = start + k * step
            if k in indices or (current is not None and current.firing_at is not None and k in hold):
                if current is None:
                    current = Episode(labels, pending_at=ts)
                    episodes.append(current)
                if current.firing_at is None and ts - current.pending_at >= for_s - 1e-6:
                    current.firing_at = ts
            elif current is not None:
                if current.firing_at is None:
                    episodes.remove(current)  # pending alerts vanish without a trace
                else:
                    current.ended_at = ts
                current = None
                if max(indices) < k:
                    break
    episodes.sort(key=lambda e: e.pending_at)
    return episodes


class Backtest:
    """One history, any number of rule files: load, backfill recording rules, evaluate alerts."""

    def __init__(self, workdir: Path, step_s: float = 60.0, lookback_s: float = 90.0, jobs: int = 2):
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "tsdb"
        self.step = float(step_s)
        self.lookback = float(lookback_s)
        self.jobs = jobs
        self.timings: dict[str, float] = {}

    def load(self, files: list[Path]) -> None:
        started = time.monotonic()
        create_blocks(files, self.data_dir, self.jobs)
        self.timings["load_s"] = self.timings.get("load_s", 0.0) + time.monotonic() - started

    def run(self, rule_files: list[Path], start: float, end: float) -> BacktestResult:
        recording, alerting = load_rules(rule_files)
        start = math.ceil(start / self.step) * self.step
        end = math.floor(end / self.step) * self.step
        if end <= start:
            raise LeakwatchError("the history is shorter than one evaluation step")
        server = TSDBServer(self.data_dir, self.lookback, self.workdir / "prometheus.log")
        with server:
            api = server.start()
            started = time.monotonic()
            for number, level in enumerate(recording_levels(recording)):
                sink = BlockFiles(self.workdir / f"recorded-{number}", prefix="recorded")
                for rule in level:
                    for s, e in chunks(start, end, self.step):
                        write_matrix(sink, rule.name, rule.labels, api.query_range(rule.expr, s, e, self.step))
                files = sink.close()
                if files:
                    create_blocks(files, self.data_dir, self.jobs)
                    api = server.restart()
            self.timings["recording_s"] = time.monotonic() - started
            started = time.monotonic()
            results = [evaluate_alert(api, rule, start, end, self.step) for rule in alerting]
            self.timings["alerts_s"] = time.monotonic() - started
        return BacktestResult(start, end, self.step, results, dict(self.timings))
