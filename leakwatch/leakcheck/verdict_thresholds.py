"""The decision thresholds of `leakwatch check` (config/leak_check.yaml), with CLI overrides."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

from ..core import config_schema
from ..core.config_schema import (
    INT,
    NUM,
    STR,
    Key,
    Schema,
    at_least,
    duration_key,
    fraction,
    in_range,
    non_negative,
    positive,
    rate_key,
    size_key,
)
from ..core.paths import CONFIG_DIR

CONFIG_FILE = CONFIG_DIR / "leak_check.yaml"
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class CheckConfig:
    confidence: float
    min_bytes_per_request: float  # verdict.min_growth_per_request
    min_growth_bytes_per_hour: float  # verdict.min_growth_rate
    recent_fraction: float
    min_points: int
    min_requests: float
    # skip_points_until.uptime and .requests (the names `check --json` has always printed)
    warmup_seconds: float
    warmup_requests: float
    max_gap_seconds: float
    max_points: int
    compare_label: str  # `check --compare`: the label that tells the deployments apart
    compare_daily_requests: float
    compare_decide_within_seconds: float

    def with_overrides(self, **values) -> CheckConfig:
        return replace(self, **{k: v for k, v in values.items() if v is not None})

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def label_name(value) -> str | None:
    return None if LABEL_NAME.fullmatch(value) else f"{value!r} is not a Prometheus label name"


SCHEMA: Schema = {
    "verdict": {
        "confidence": Key(NUM, check=in_range(0.5, 1)),
        "min_growth_per_request": size_key(),
        "min_growth_rate": rate_key(size=True, per=3600.0),
        "recent_fraction": Key(NUM, check=fraction),
        "min_points": Key(INT, check=at_least(3)),
        "min_requests": Key(NUM, check=non_negative),
    },
    "skip_points_until": {"uptime": duration_key(allow_zero=True), "requests": Key(NUM, check=non_negative)},
    "sampling": {"max_gap": duration_key(), "max_points": Key(INT, check=at_least(3))},
    "compare": {
        "label": Key(STR, check=label_name),
        "request_rate": rate_key(size=False, per=86400.0, check=positive),
        "decide_within": duration_key(),
    },
}


def load(path: Path = CONFIG_FILE) -> CheckConfig:
    raw = config_schema.load(path, SCHEMA, "the leak-check thresholds")
    verdict, skip, sampling, comparing = raw["verdict"], raw["skip_points_until"], raw["sampling"], raw["compare"]
    return CheckConfig(
        confidence=float(verdict["confidence"]),
        min_bytes_per_request=verdict["min_growth_per_request"],
        min_growth_bytes_per_hour=verdict["min_growth_rate"],
        recent_fraction=float(verdict["recent_fraction"]),
        min_points=verdict["min_points"],
        min_requests=float(verdict["min_requests"]),
        warmup_seconds=skip["uptime"],
        warmup_requests=float(skip["requests"]),
        max_gap_seconds=sampling["max_gap"],
        max_points=sampling["max_points"],
        compare_label=comparing["label"],
        compare_daily_requests=comparing["request_rate"],
        compare_decide_within_seconds=comparing["decide_within"],
    )
