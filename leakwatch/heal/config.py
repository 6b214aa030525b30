"""The healer's policy (config/healer.yaml): remediation label, cooldown, rate limit, drain, limits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import LeakwatchError
from ..paths import CONFIG_DIR

CONFIG_FILE = CONFIG_DIR / "healer.yaml"


@dataclass(frozen=True)
class HealerConfig:
    label_name: str
    label_value: str
    cooldown_s: float
    max_restarts_per_hour: int
    idle_wait_s: float
    ready_timeout_s: float
    max_body_bytes: int
    max_alerts: int

    @property
    def remediation_matcher(self) -> str:
        """The Alertmanager matcher that routes remediable alerts to the healer."""
        return f'{self.label_name}="{self.label_value}"'


def load(path: Path = CONFIG_FILE) -> HealerConfig:
    try:
        raw = yaml.safe_load(Path(path).read_text())
        cfg = HealerConfig(
            label_name=str(raw["remediation_label"]["name"]),
            label_value=str(raw["remediation_label"]["value"]),
            cooldown_s=float(raw["cooldown_s"]),
            max_restarts_per_hour=int(raw["max_restarts_per_hour"]),
            idle_wait_s=float(raw["drain"]["idle_wait_s"]),
            ready_timeout_s=float(raw["drain"]["ready_timeout_s"]),
            max_body_bytes=int(raw["max_body_bytes"]),
            max_alerts=int(raw["max_alerts"]),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise LeakwatchError(f"cannot read the healer settings in {path}: {exc!r}") from None
    if cfg.max_restarts_per_hour < 1 or cfg.cooldown_s < 0 or cfg.max_body_bytes < 1024:
        raise LeakwatchError(f"{path}: max_restarts_per_hour >= 1, cooldown_s >= 0 and max_body_bytes >= 1024 please")
    return cfg
