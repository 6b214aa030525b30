"""The decision thresholds of `leakwatch check` (config/leak_check.yaml), with CLI overrides."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from .. import config_schema
from ..config_schema import INT, NUM, Key, Schema, at_least, fraction, in_range, non_negative, positive
from ..paths import CONFIG_DIR

CONFIG_FILE = CONFIG_DIR / "leak_check.yaml"


@dataclass(frozen=True)
class CheckConfig:
    confidence: float
    min_bytes_per_request: float
    min_growth_bytes_per_hour: float
    recent_fraction: float
    min_points: int
    min_requests: float
    warmup_seconds: float
    warmup_requests: float
    max_gap_seconds: float
    max_points: int

    def with_overrides(self, **values) -> CheckConfig:
        return replace(self, **{k: v for k, v in values.items() if v is not None})

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


SCHEMA: Schema = {
    "verdict": {
        "confidence": Key(NUM, check=in_range(0.5, 1)),
        "min_bytes_per_request": Key(NUM, check=non_negative),
        "min_growth_bytes_per_hour": Key(NUM, check=non_negative),
        "recent_fraction": Key(NUM, check=fraction),
        "min_points": Key(INT, check=at_least(3)),
        "min_requests": Key(NUM, check=non_negative),
    },
    "warmup": {"seconds": Key(NUM, check=non_negative), "requests": Key(NUM, check=non_negative)},
    "sampling": {"max_gap_seconds": Key(NUM, check=positive), "max_points": Key(INT, check=at_least(3))},
}


def load(path: Path = CONFIG_FILE) -> CheckConfig:
    raw = config_schema.load(path, SCHEMA, "the leak-check thresholds")
    verdict, warmup, sampling = raw["verdict"], raw["warmup"], raw["sampling"]
    return CheckConfig(
        confidence=float(verdict["confidence"]),
        min_bytes_per_request=float(verdict["min_bytes_per_request"]),
        min_growth_bytes_per_hour=float(verdict["min_growth_bytes_per_hour"]),
        recent_fraction=float(verdict["recent_fraction"]),
        min_points=verdict["min_points"],
        min_requests=float(verdict["min_requests"]),
        warmup_seconds=float(warmup["seconds"]),
        warmup_requests=float(warmup["requests"]),
        max_gap_seconds=float(sampling["max_gap_seconds"]),
        max_points=sampling["max_points"],
    )
