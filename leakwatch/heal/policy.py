"""Whether an alert may restart vLLM now: the allowlist (label, alert name, job, instance),
idempotency per firing episode, cooldown and a sliding-hour limit. State survives a healer restart
(a JSON file, fsynced); a state file that cannot be read, or holds a value that is not a past unix
time, stops the healer instead of resetting the cap."""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import LeakwatchError
from .healer_settings import HealerConfig
from .payload import Alert

log = logging.getLogger("leakwatch.heal")

# Decisions per alert (the `decision` label of leakwatch_healer_alerts_total).
REMEDIATE = "remediate"
RESOLVED = "resolved"
DUPLICATE = "duplicate"  # this firing episode was already acted on
HANDLED = "handled_by_restart"  # it began before the last restart, which addressed it
IN_PROGRESS = "in_progress"  # a drain/restart is running now (not remembered: a repeat is decided anew)
COOLDOWN = "cooldown"
RATE_LIMITED = "rate_limited"
NOT_REMEDIABLE = "not_remediable"
DECISIONS = (REMEDIATE, RESOLVED, DUPLICATE, HANDLED, IN_PROGRESS, COOLDOWN, RATE_LIMITED, NOT_REMEDIABLE)

SEEN_LIMIT = 10_000
HOUR = 3600.0
# A state file written on this host is never ahead of its clock by more than a step of NTP.
MAX_CLOCK_SKEW_S = 300.0


class StateWriteError(RuntimeError):
    """The decision could not be persisted; nothing was claimed and nothing restarts."""


@dataclass
class PolicyState:
    restarts: list[float] = field(default_factory=list)  # unix times restarts began (last hour and more)
    seen: dict[str, float] = field(default_factory=dict)  # alert key -> when it was acted on

    def to_json(self) -> str:
        return json.dumps({"restarts": self.restarts[-100:], "seen": self.seen})

    @classmethod
    def from_file(cls, path: Path | None, now: float | None = None) -> PolicyState:
        if path is None:
            return cls()
        if not path.exists():
            log.warning("no healer state file at %s yet: starting with an empty history", path)
            return cls()
        try:
            return cls.parse(json.loads(path.read_text()), time.time() if now is None else now)
        except (OSError, ValueError) as exc:
            # Resetting would forget the cooldown and the hourly cap: a restart storm. Refuse instead.
            raise LeakwatchError(
                f"the healer's state file {path} cannot be read ({exc}); it holds the cooldown and the "
                "restarts of the last hour. Inspect it, then move it away to start with an empty history"
            ) from None

    @classmethod
    def parse(cls, raw, now: float) -> PolicyState:
        """The state from the file's JSON, every value checked: a wrong type, a NaN or a time in the
        future would silently reset the cap or mark every later alert handled (issue 32, N7)."""
        if (
            not isinstance(raw, dict)
            or not isinstance(raw.get("restarts"), list)
            or not isinstance(raw.get("seen"), dict)
        ):
            raise ValueError('expected {"restarts": [unix times], "seen": {alert key: unix time}}')
        restarts = [_unix_time(t, f"restarts[{i}]", now) for i, t in enumerate(raw["restarts"])]
        seen = {str(k): _unix_time(v, f"seen[{k!r:.60}]", now) for k, v in raw["seen"].items()}
        return cls(restarts, seen)


def _unix_time(value, where: str, now: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where} is {value!r:.60}, not a unix time")
    if value > now + MAX_CLOCK_SKEW_S:
        raise ValueError(f"{where} is {value:.0f}, {value - now:.0f}s in the future")
    return float(value)


class Policy:
    def __init__(self, cfg: HealerConfig, state_file: Path | None = None, clock=time.time):
        self.cfg = cfg
        self.state_file = state_file
        self.clock = clock
        self.state = PolicyState.from_file(state_file, clock())
        self.lock = threading.Lock()
        self.in_progress = False

    def refusal(self, alert: Alert) -> str | None:
        """Why this alert may never restart vLLM (allowlist), or None."""
        return self.cfg.refusal(alert.labels)

    def remediable(self, alert: Alert) -> bool:
        return self.refusal(alert) is None

    def already_decided(self, alert: Alert) -> bool:
        """This firing episode was acted on, or began before the last restart (DUPLICATE, HANDLED)."""
        with self.lock:
            last = max(self.state.restarts, default=None)
            return alert.key in self.state.seen or (last is not None and alert.starts_at <= last)

    def restarts_last_hour(self, now: float | None = None) -> int:
        now = self.clock() if now is None else now
        return sum(1 for t in self.state.restarts if now - t < HOUR)

    def decide(self, alerts: list[Alert]) -> list[tuple[Alert, str]]:
        """A decision per alert; at most one alert of a notification gets REMEDIATE, and when one
        does the restart is claimed (in_progress) until finish() is called."""
        with self.lock:
            before = copy.deepcopy(self.state)
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
                if decision == REMEDIATE:
                    self.state.seen[alert.key] = now
                decisions.append((alert, decision))
            self._trim(now)
            try:
                self._save()
            except OSError as exc:
                # Nothing is claimed unless it is on disk: roll back, so the next notification decides afresh.
                self.state = before
                raise StateWriteError(f"cannot write the healer's state file {self.state_file}: {exc}") from None
            if claimed:
                self.in_progress = True
            return decisions

    def finish(self) -> None:
        with self.lock:
            self.in_progress = False
            try:
                self._save()
            except OSError as exc:
                log.error("cannot write the healer's state file %s after a restart: %s", self.state_file, exc)

    def _trim(self, now: float) -> None:
        self.state.restarts = [t for t in self.state.restarts if now - t < 24 * HOUR]
        if len(self.state.seen) > SEEN_LIMIT:
            newest = sorted(self.state.seen.items(), key=lambda kv: kv[1])[-SEEN_LIMIT // 2 :]
            self.state.seen = dict(newest)

    def _save(self) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            fh.write(self.state.to_json())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.state_file)
        # The rename itself survives a power cut only once the folder is synced too.
        fd = os.open(self.state_file.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
