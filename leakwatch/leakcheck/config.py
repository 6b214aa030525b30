"""The decision thresholds of `leakwatch check` (config/leak_check.yaml), with CLI overrides."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

import yaml

from ..errors import LeakwatchError
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


def load(path: Path = CONFIG_FILE) -> CheckConfig:
    try:
        raw = yaml.safe_load(Path(path).read_text())
        verdict, warmup, sampling = raw["verdict"], raw["warmup"], raw["sampling"]
        cfg = CheckConfig(
            confidence=float(verdict["confidence"]),
            min_bytes_per_request=float(verdict["min_bytes_per_request"]),
            min_growth_bytes_per_hour=float(verdict["min_growth_bytes_per_hour"]),
            recent_fraction=float(verdict["recent_fraction"]),
            min_points=int(verdict["min_points"]),
            min_requests=float(verdict["min_requests"]),
            warmup_seconds=float(warmup["seconds"]),
            warmup_requests=float(warmup["requests"]),
            max_gap_seconds=float(sampling["max_gap_seconds"]),
            max_points=int(sampling["max_points"]),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise LeakwatchError(f"cannot read the leak-check thresholds in {path}: {exc!r}") from None
    if not 0.5 <= cfg.confidence < 1:
        raise LeakwatchError(f"{path}: verdict.confidence must be in [0.5, 1), not {cfg.confidence}")
    if not 0 < cfg.recent_fraction <= 1:
        raise LeakwatchError(f"{path}: verdict.recent_fraction must be in (0, 1], not {cfg.recent_fraction}")
    return cfg
