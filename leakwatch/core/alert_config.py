"""config/alerts.yaml: the thresholds and windows of every rule, scaled for a time-compressed drill.

A drill compresses a production day into minutes. The same requests are served and the same bytes
leak, only faster, so durations shrink by the time scale, rates per unit of time grow by it, and
sizes, shares and per-request figures stay put.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import config_schema
from .config_schema import DICT, INT, LIST, NUM, STR, Key, Schema, duration_key, list_of, rate_key, size_key
from .durations import format_duration
from .errors import LeakwatchError
from .paths import CONFIG_DIR

ALERTS_FILE = CONFIG_DIR / "alerts.yaml"
MIB = 1048576

# Each value's kind. Durations, sizes and rates are read as seconds, bytes and bytes (or counts) per
# second; the Section getters scale them for a time-compressed drill.
DURATION, SIZE = duration_key(), size_key()
SETTLING = duration_key(allow_zero=True)
SIZE_RATE, COUNT_RATE = rate_key(size=True), rate_key(size=False)
NUMBER, SLICES = Key(NUM), Key(INT, check=lambda v: None if v >= 2 else "must be a whole number of at least 2")


def _detector(prefix: str, **keys: Key) -> dict[str, Key]:
    return {f"{prefix}_{key}": spec for key, spec in keys.items()}


def _card_leak_detector(name: str) -> dict:
    """A card's leak detector (fast and slow differ only in their values): a growth rate, bytes per
    request over enough requests, and a net growth over its window."""
    return _detector(
        name,
        window=DURATION,
        slices=SLICES,
        min_growth_rate=SIZE_RATE,
        min_growth_per_request=SIZE,
        min_requests=NUMBER,
        min_growth=SIZE,
        **{"for": DURATION},
    )


def _net_growth() -> dict[str, Key]:
    return {"lows_min_growth": SIZE, "release_min": SIZE, "release_lookback": DURATION}


def _runout() -> dict[str, Key]:
    return _detector(
        "runout",
        window=DURATION,
        slices=SLICES,
        min_growth_rate=SIZE_RATE,
        min_vllm_share=NUMBER,
        warning_within=DURATION,
        critical_within=DURATION,
        **{"for": DURATION},
    )


SCHEMA: Schema = {
    "selectors": Key(DICT),
    "host_labels": Key(LIST, nullable=True, check=list_of(str)),
    "runbook_url": Key(STR),
    "settling_after_start": {"gpu": SETTLING, "host": SETTLING, "metrics": SETTLING},
    "slice_quantile": Key(NUM, check=lambda v: None if 0 < v <= 0.5 else "must be above 0 and at most 0.5"),
    "gpu": {
        "level_warning_headroom_share": NUMBER,
        "level_critical_headroom_share": NUMBER,
        "level_for": DURATION,
        **_card_leak_detector("fast"),
        "exhaustion_critical_within": DURATION,
        **_net_growth(),
        **_runout(),
        **_card_leak_detector("slow"),
        "retention_ratio": NUMBER,
        **_detector("retention", window=DURATION, slices=SLICES, min_growth_rate=SIZE_RATE, **{"for": DURATION}),
    },
    "host": {
        **_detector(
            "leak",
            window=DURATION,
            slices=SLICES,
            min_growth_rate=SIZE_RATE,
            min_growth_since_baseline=SIZE,
            min_requests=NUMBER,
            **{"for": DURATION},
        ),
        "exhaustion_critical_within": DURATION,
        **_net_growth(),
        **_runout(),
        **_detector(
            "swap", window=DURATION, slices=SLICES, min_growth_rate=SIZE_RATE, min_used=SIZE, **{"for": DURATION}
        ),
        **_detector("usage", warning_share=NUMBER, critical_share=NUMBER, **{"for": DURATION}),
    },
    "metrics": _detector("series", window=DURATION, slices=SLICES, min_growth_rate=COUNT_RATE, **{"for": DURATION}),
    "serving": {
        "down_for": DURATION,
        "target_down_for": DURATION,
        "engine_down_for": DURATION,
        **_detector("restarts", window=DURATION, warning=NUMBER, critical=NUMBER, **{"for": DURATION}),
        **_detector("kv", usage_share=NUMBER, window=DURATION, **{"for": DURATION}),
        **_detector("queue", window=DURATION, min_waiting=NUMBER, **{"for": DURATION}),
        **_detector("objective", window=DURATION, min_requests=NUMBER, min_slow=NUMBER),
        "itl_min_slow_tokens": NUMBER,
        # Latency limits: bucket boundaries of vLLM's histograms, how long one request takes. A
        # time-compressed drill serves requests as fast as production, so they are never scaled.
        "ttft_limit": DURATION,
        "ttft_max_share": NUMBER,
        "itl_limit": DURATION,
        "itl_max_share": NUMBER,
        "itl_min_tokens": NUMBER,
        "latency_limit": DURATION,
        "latency_max_share": NUMBER,
        "objective_for": DURATION,
        **_detector(
            "error",
            window=DURATION,
            warning_share=NUMBER,
            critical_share=NUMBER,
            min_requests=NUMBER,
            min_errors=NUMBER,
            **{"for": DURATION},
        ),
        **_detector("regression", window=DURATION, factor=NUMBER, min_requests=NUMBER, **{"for": DURATION}),
        **_detector(
            "gc",
            window=DURATION,
            baseline_window=DURATION,
            factor=NUMBER,
            min_collections=NUMBER,
            min_requests=NUMBER,
            **{"for": DURATION},
        ),
    },
    "meta": {
        "rule_failures_window": DURATION,
        "rule_failures_for": DURATION,
        "notifications_window": DURATION,
        "notifications_for": DURATION,
    },
}


def number(value: float) -> str:
    """A PromQL number literal that is short and exact enough."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


@dataclass(frozen=True)
class Section:
    """One section of the thresholds, as the loader read it (durations in seconds, sizes in bytes,
    rates per second), scaled by the getters."""

    name: str
    values: dict
    time_scale: float

    def _get(self, key: str):
        if key not in self.values:
            raise LeakwatchError(f"{ALERTS_FILE.name}: {self.name}.{key} is missing")
        return self.values[key]

    def num(self, key: str) -> float:
        """A plain number (a share, a count, a factor), or a latency limit in seconds: never scaled."""
        return float(self._get(key))

    def size(self, key: str) -> float:
        """A size in bytes (never scaled: a compressed day leaks the same bytes)."""
        return float(self._get(key))

    def seconds(self, key: str) -> float:
        """A duration in seconds, scaled."""
        return self._get(key) * self.time_scale

    def dur(self, key: str, factor: float = 1.0) -> str:
        """A duration as PromQL text, scaled (and multiplied by factor, e.g. 1/3 for one of three slices)."""
        return format_duration(self.seconds(key) * factor)

    def slices(self, key: str) -> int:
        return self._get(key)

    def bytes_per_second(self, key: str) -> float:
        """A size rate (48MiB/h) in bytes per second, scaled (a faster clock, a faster rate)."""
        return self._get(key) / self.time_scale

    def per_second(self, key: str) -> float:
        """A count rate (5/h) per second, scaled."""
        return self._get(key) / self.time_scale

    def mib_per_hour(self, key: str) -> float:
        """A size rate in MiB per production hour, for text that names the threshold."""
        return self._get(key) * 3600 / MIB


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
        return float(self.raw["slice_quantile"])

    def settling_after_start_s(self, kind: str) -> float:
        """settling_after_start.<kind> (gpu, host, metrics) in seconds, scaled."""
        settling = self.raw["settling_after_start"]
        if kind not in settling:
            raise LeakwatchError(f"{ALERTS_FILE.name}: settling_after_start.{kind} is missing")
        return settling[kind] * self.time_scale


def load(time_scale: float = 1.0, path: Path = ALERTS_FILE) -> Thresholds:
    if not time_scale > 0:
        raise LeakwatchError(f"time_scale must be positive, got {time_scale}")
    return Thresholds(config_schema.load(path, SCHEMA, "the alert thresholds"), float(time_scale))
