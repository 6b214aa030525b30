"""config/alerts.yaml: the thresholds and windows of every rule, scaled for a time-compressed drill.

A drill compresses a production day into minutes. The same requests are served and the same bytes
leak, only faster, so durations shrink by the time scale, rates per unit of time grow by it, and
sizes, shares and per-request figures stay put.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import config_schema
from .durations import format_duration, parse_duration
from .errors import LeakwatchError
from .paths import CONFIG_DIR

ALERTS_FILE = CONFIG_DIR / "alerts.yaml"
MIB = 1048576


def number(value: float) -> str:
    """A PromQL number literal that is short and exact enough."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


@dataclass(frozen=True)
class Section:
    name: str
    values: dict
    time_scale: float

    def _get(self, key: str):
        if key not in self.values:
            raise LeakwatchError(f"{ALERTS_FILE.name}: {self.name}.{key} is missing")
        return self.values[key]

    def num(self, key: str) -> float:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LeakwatchError(f"{ALERTS_FILE.name}: {self.name}.{key} must be a number, got {value!r}")
        return float(value)

    def seconds(self, key: str) -> float:
        """A duration in seconds, scaled."""
        return parse_duration(self._get(key)) * self.time_scale

    def dur(self, key: str, factor: float = 1.0) -> str:
        """A duration as PromQL text, scaled (and multiplied by factor, e.g. 1/3 for one of three slices)."""
        return format_duration(self.seconds(key) * factor)

    def slices(self, key: str) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise LeakwatchError(f"{ALERTS_FILE.name}: {self.name}.{key} must be a whole number of at least 2")
        return value

    def bytes_per_second(self, key: str) -> float:
        """A `*_mib_per_hour` threshold as bytes per second, scaled (a faster clock, a faster rate)."""
        return self.num(key) * MIB / 3600 / self.time_scale

    def per_second(self, key: str) -> float:
        """A `*_per_hour` count threshold per second, scaled."""
        return self.num(key) / 3600 / self.time_scale


@dataclass(frozen=True)
class Thresholds:
    raw: dict
    time_scale: float

    def section(self, name: str) -> Section:
        values = self.raw.get(name)
        if not isinstance(values, dict):
            raise LeakwatchError(f"{ALERTS_FILE.name}: section {name!r} is missing")
        return Section(name, values, self.time_scale)

    def selector(self, exporter: str) -> str:
        return str(self.raw["selectors"].get(exporter, "") or "")

    @property
    def host_labels(self) -> list[str]:
        return [str(label) for label in self.raw.get("host_labels") or []]

    @property
    def runbook_url(self) -> str:
        return str(self.raw["runbook_url"])

    @property
    def slice_quantile(self) -> float:
        value = self.raw["slice_quantile"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 0.5:
            raise LeakwatchError(f"{ALERTS_FILE.name}: slice_quantile must be above 0 and at most 0.5, got {value!r}")
        return float(value)

    def warmup_s(self, kind: str) -> float:
        warmup = self.raw["warmup"]
        if kind not in warmup:
            raise LeakwatchError(f"{ALERTS_FILE.name}: warmup.{kind} is missing")
        return parse_duration(warmup[kind]) * self.time_scale


def load(time_scale: float = 1.0, path: Path = ALERTS_FILE) -> Thresholds:
    if not time_scale > 0:
        raise LeakwatchError(f"time_scale must be positive, got {time_scale}")
    # Read like every config file; its sections are checked where they are used (Thresholds), as
    # each alert's keys differ.
    raw = config_schema.read_yaml(path, "the alert thresholds")
    if not isinstance(raw, dict):
        raise LeakwatchError(f"{path}: expected a mapping")
    for key in ("selectors", "host_labels", "runbook_url", "warmup", "slice_quantile"):
        if key not in raw:
            raise LeakwatchError(f"{path}: {key!r} is missing")
    return Thresholds(raw, float(time_scale))
