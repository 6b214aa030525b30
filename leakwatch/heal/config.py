"""The healer's policy (config/healer.yaml): remediation label, cooldown, rate limit, drain, limits."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
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
    alerts: tuple[str, ...] = ()  # alert names the healer may act on
    jobs: tuple[str, ...] = ()  # jobs (the `job` label) those alerts must be about
    # job -> instances this healer is responsible for (`leakwatch heal --target JOB=INSTANCE`);
    # a job not named here is not checked on instance.
    targets: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def remediation_matcher(self) -> str:
        """The Alertmanager matcher that routes remediable alerts to the healer."""
        return f'{self.label_name}="{self.label_value}"'

    @property
    def route_matchers(self) -> list[str]:
        """Every matcher of Alertmanager's route to the healer: the label, the names, the jobs."""
        return [
            self.remediation_matcher,
            f'alertname=~"{"|".join(sorted(self.alerts))}"',
            f'job=~"{"|".join(sorted(self.jobs))}"',
        ]

    def refusal(self, labels: dict[str, str]) -> str | None:
        """Why a firing alert with these labels may not restart vLLM, or None when it may."""
        if labels.get(self.label_name) != self.label_value:
            return f"not labelled {self.label_name}={self.label_value!r}"
        if labels.get("alertname") not in self.alerts:
            return "not an alert the healer remediates (config/healer.yaml remediable.alerts)"
        job = labels.get("job")
        if job not in self.jobs:
            return f"job {str(job)[:60]!r} is not one the healer remediates (remediable.jobs)"
        instances = dict(self.targets).get(job)
        if instances is not None and labels.get("instance") not in instances:
            return f"instance {str(labels.get('instance'))[:80]!r} of job {job!r} is not this healer's"
        return None


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
            alerts=tuple(str(a) for a in raw["remediable"]["alerts"]),
            jobs=tuple(str(j) for j in raw["remediable"]["jobs"]),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise LeakwatchError(f"cannot read the healer settings in {path}: {exc!r}") from None
    if cfg.max_restarts_per_hour < 1 or cfg.cooldown_s < 0 or cfg.max_body_bytes < 1024:
        raise LeakwatchError(f"{path}: max_restarts_per_hour >= 1, cooldown_s >= 0 and max_body_bytes >= 1024 please")
    name = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_:]*$")
    if not cfg.alerts or not cfg.jobs or not all(name.match(v) for v in cfg.alerts + cfg.jobs):
        raise LeakwatchError(f"{path}: remediable.alerts and remediable.jobs must be non-empty lists of names")
    return cfg


def with_targets(cfg: HealerConfig, specs: list[str]) -> HealerConfig:
    """Adds `JOB=INSTANCE` targets (repeatable) to the policy."""
    targets: dict[str, list[str]] = {}
    for spec in specs:
        job, sep, instance = spec.partition("=")
        if not sep or not job or not instance:
            raise LeakwatchError(f"--target {spec!r}: expected JOB=INSTANCE, e.g. leakwatch=127.0.0.1:9405")
        if job not in cfg.jobs:
            raise LeakwatchError(f"--target {spec!r}: job {job!r} is not in remediable.jobs {list(cfg.jobs)}")
        targets.setdefault(job, []).append(instance)
    return replace(cfg, targets=tuple((j, tuple(i)) for j, i in sorted(targets.items())))
