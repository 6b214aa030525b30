"""The healer's policy (config/healer.yaml): remediation label, cooldown, rate limit, drain, limits."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..core import config_schema
from ..core.config_schema import INT, LIST, STR, Key, Schema, at_least, duration_key, size_key
from ..core.errors import LeakwatchError
from ..core.paths import CONFIG_DIR

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
    # job -> instances this healer is responsible for (`leakwatch heal --target JOB=INSTANCE`).
    # Once any is named the list is complete: an alert about a job without a target is refused (the
    # native stack has no dcgm job, so a dcgm alert is not about its vLLM). None named: no check.
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
        targets = dict(self.targets)
        if targets and job not in targets:
            return (
                f"job {job!r} is not scraped by this healer's stack (its --target jobs: {', '.join(sorted(targets))})"
            )
        instances = targets.get(job)
        if instances is not None and labels.get("instance") not in instances:
            return f"instance {str(labels.get('instance'))[:80]!r} of job {job!r} is not this healer's"
        return None


NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_:]*$")


def _names(value) -> str | None:
    ok = value and all(isinstance(v, str) and NAME.match(v) for v in value)
    return None if ok else "must be a non-empty list of Prometheus names"


SCHEMA: Schema = {
    "remediation_label": {
        "name": Key(STR, check=lambda v: None if NAME.match(v) else "must be a label name"),
        "value": Key(STR),
    },
    "remediable": {"alerts": Key(LIST, check=_names), "jobs": Key(LIST, check=_names)},
    "cooldown": duration_key(allow_zero=True),
    "max_restarts_per_hour": Key(INT, check=at_least(1)),
    "drain": {"idle_wait": duration_key(allow_zero=True), "ready_timeout": duration_key()},
    "max_body": size_key(lambda v: None if v >= 1024 else "must be at least 1KiB", whole=True),
    "max_alerts": Key(INT, check=at_least(1)),
}


def load(path: Path = CONFIG_FILE) -> HealerConfig:
    raw = config_schema.load(path, SCHEMA, "the healer settings")
    return HealerConfig(
        label_name=raw["remediation_label"]["name"],
        label_value=raw["remediation_label"]["value"],
        cooldown_s=raw["cooldown"],
        max_restarts_per_hour=raw["max_restarts_per_hour"],
        idle_wait_s=raw["drain"]["idle_wait"],
        ready_timeout_s=raw["drain"]["ready_timeout"],
        max_body_bytes=raw["max_body"],
        max_alerts=raw["max_alerts"],
        alerts=tuple(raw["remediable"]["alerts"]),
        jobs=tuple(raw["remediable"]["jobs"]),
    )


def with_targets(cfg: HealerConfig, specs: list[str]) -> HealerConfig:
    """Adds `JOB=INSTANCE` targets (repeatable) to the policy."""
    targets: dict[str, list[str]] = {}
    for spec in specs:
        job, sep, instance = spec.partition("=")
        if not sep or not job or not instance:
            raise LeakwatchError(f"--target {spec!r}: expected JOB=INSTANCE, e.g. leakwatch=10.0.0.7:PORT")
        if job not in cfg.jobs:
            raise LeakwatchError(f"--target {spec!r}: job {job!r} is not in remediable.jobs {list(cfg.jobs)}")
        targets.setdefault(job, []).append(instance)
    return replace(cfg, targets=tuple((j, tuple(i)) for j, i in sorted(targets.items())))
