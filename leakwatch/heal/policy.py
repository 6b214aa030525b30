"""Whether an alert may restart vLLM now: remediation label, idempotency per firing episode,
cooldown and a sliding-hour limit. State survives a healer restart (a JSON file)."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import HealerConfig
from .payload import Alert

# Decisions per alert (the `decision` label of leakwatch_healer_alerts_total).
REMEDIATE = "remediate"
RESOLVED = "resolved"
DUPLICATE = "duplicate"              # this firing episode was already acted on
HANDLED = "handled_by_restart"       # it began before the last restart, which addressed it
IN_PROGRESS = "in_progress"          # a drain/restart is running now
COOLDOWN = "cooldown"
RATE_LIMITED = "rate_limited"
NOT_REMEDIABLE = "not_remediable"
DECISIONS = (REMEDIATE, RESOLVED, DUPLICATE, HANDLED, IN_PROGRESS, COOLDOWN, RATE_LIMITED, NOT_REMEDIABLE)

SEEN_LIMIT = 10_000
HOUR = 3600.0


@dataclass
class PolicyState:
    restarts: list[float] = field(default_factory=list)   # unix times restarts began (last hour and more)
    seen: dict[str, float] = field(default_factory=dict)   # alert key -> when it was acted on

    def to_json(self) -> str:
        return json.dumps({"restarts": self.restarts[-100:], "seen": self.seen})

    @classmethod
    def from_file(cls, path: Path | None) -> PolicyState:
        if path is None or not path.exists():
            return cls()
        try:
            raw = json.loads(path.read_text())
            return cls([float(t) for t in raw.get("restarts", [])],
                       {str(k): float(v) for k, v in raw.get("seen", {}).items()})
        except (OSError, ValueError, TypeError, AttributeError):
            return cls()  # a corrupt state file must not stop the healer; worst case one extra restart


class Policy:
    def __init__(self, cfg: HealerConfig, state_file: Path | None = None, clock=time.time):
        self.cfg = cfg
        self.state_file = state_file
        self.clock = clock
        self.state = PolicyState.from_file(state_file)
        self.lock = threading.Lock()
        self.in_progress = False

    def remediable(self, alert: Alert) -> bool:
        return alert.labels.get(self.cfg.label_name) == self.cfg.label_value

    def restarts_last_hour(self, now: float | None = None) -> int:
        now = self.clock() if now is None else now
        return sum(1 for t in self.state.restarts if now - t < HOUR)

    def decide(self, alerts: list[Alert]) -> list[tuple[Alert, str]]:
        """A decision per alert; at most one alert of a notification gets REMEDIATE, and when one
        does the restart is claimed (in_progress) until finish() is called."""
        with self.lock:
            now = self.clock()
            last = max(self.state.restarts, default=None)
            decisions = []
            claimed = False
            for alert in alerts:
                if alert.status == "resolved":
                    decision = RESOLVED
                elif not self.remediable(alert):
                    decision = NOT_REMEDIABLE
                elif alert.key in self.state.seen:
                    decision = DUPLICATE
                elif last is not None and alert.starts_at <= last:
                    decision = HANDLED
                elif self.in_progress or claimed:
                    decision = IN_PROGRESS
                elif last is not None and now - last < self.cfg.cooldown_s:
                    decision = COOLDOWN
                elif self.restarts_last_hour(now) >= self.cfg.max_restarts_per_hour:
                    decision = RATE_LIMITED
                else:
                    decision = REMEDIATE
                    claimed = True
                    self.state.restarts.append(now)
                if decision in (REMEDIATE, IN_PROGRESS):
                    self.state.seen[alert.key] = now
                decisions.append((alert, decision))
            if claimed:
                self.in_progress = True
            self._trim(now)
            self._save()
            return decisions

    def finish(self) -> None:
        with self.lock:
            self.in_progress = False
            self._save()

    def _trim(self, now: float) -> None:
        self.state.restarts = [t for t in self.state.restarts if now - t < 24 * HOUR]
        if len(self.state.seen) > SEEN_LIMIT:
            newest = sorted(self.state.seen.items(), key=lambda kv: kv[1])[-SEEN_LIMIT // 2:]
            self.state.seen = dict(newest)

    def _save(self) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(self.state.to_json())
        os.replace(tmp, self.state_file)
