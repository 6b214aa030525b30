"""Recovery by phase: where the time between the leak alert and memory back at its baseline went.

    escalate  leak alert firing -> its remediation twin (remediate="true") firing
    notify    remediation alert firing -> the healer begins (Alertmanager's group_wait, the webhook)
    drain     healer begins -> SIGTERM (waiting for in-flight requests to finish)
    stop      SIGTERM -> the old vLLM processes are gone (vLLM's own shutdown)
    start     old processes gone -> a new vLLM API server process exists
    ready     new process -> /health answers (model load, warm-up of the engine)
    baseline  ready -> the API server's memory is back near its pre-leak level

The drill observes what it can see from outside (processes, /health, memory) and takes the SIGTERM
moment from the healer's own gauge (leakwatch_healer_last_drain_duration_seconds: SIGTERM until the
old process was gone), so the phases add up to the recovery time exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PHASES = (
    ("escalate", "alert_at", "remediation_at"),
    ("notify", "remediation_at", "healer_began_at"),
    ("drain", "healer_began_at", "sigterm_at"),
    ("stop", "sigterm_at", "stopped_at"),
    ("start", "stopped_at", "started_at"),
    ("ready", "started_at", "ready_at"),
    ("baseline", "ready_at", "baseline_at"),
)


@dataclass
class RecoveryPhases:
    alert_at: float
    remediation_at: float | None = None
    healer_began_at: float | None = None
    sigterm_at: float | None = None
    stopped_at: float | None = None
    started_at: float | None = None
    ready_at: float | None = None
    baseline_at: float | None = None

    def durations(self) -> dict[str, float | None]:
        out = {}
        for name, begin, end in PHASES:
            a, b = getattr(self, begin), getattr(self, end)
            out[name] = None if a is None or b is None else b - a
        return out

    def summary(self) -> str:
        return " ".join(f"{name}_s={'none' if v is None else f'{v:.1f}'}" for name, v in self.durations().items())

    def problems(self) -> list[str]:
        """Marks out of order mean a clock was read wrong; say which."""
        out = []
        marks = [("alert", self.alert_at)] + [(end, getattr(self, end)) for _, _, end in PHASES]
        seen = [(n, t) for n, t in marks if t is not None]
        for (n0, t0), (n1, t1) in itertools.pairwise(seen):
            if t1 < t0 - 0.5:  # half a second of polling jitter
                out.append(f"recovery phases out of order: {n1} at {t1:.1f} before {n0} at {t0:.1f}")
        return out


class PhaseWatcher:
    """Polled by the drill while the healer works; records each mark the first time it is seen."""

    def __init__(
        self,
        phases: RecoveryPhases,
        old_pids: Iterable[int],
        *,
        vllm_pids: Callable[[], list[int]],
        healthy: Callable[[], bool],
        healer_began: Callable[[], float],
        sigterm_to_gone_s: Callable[[], float],
    ):
        self.phases = phases
        self.old_pids = set(old_pids)
        self.vllm_pids = vllm_pids
        self.healthy = healthy
        self.healer_began = healer_began
        self.sigterm_to_gone_s = sigterm_to_gone_s

    def poll(self, now: float) -> None:
        p = self.phases
        if p.healer_began_at is None:
            began = self.healer_began()
            if began > 0:
                p.healer_began_at = began
                # The healer acts on the remediation alert, so it fired by then; a later mark is the
                # drill's once-a-second poll arriving late.
                if p.remediation_at is not None and p.remediation_at > began:
                    p.remediation_at = began
        if p.healer_began_at is None:
            return
        pids = set(self.vllm_pids())
        if p.stopped_at is None and not (pids & self.old_pids):
            p.stopped_at = now
        if p.stopped_at is not None and p.sigterm_at is None:
            stop_s = self.sigterm_to_gone_s()
            if stop_s > 0:
                p.sigterm_at = max(p.healer_began_at, p.stopped_at - stop_s)
        if p.stopped_at is not None and p.started_at is None and (pids - self.old_pids):
            p.started_at = now
        if p.started_at is not None and p.ready_at is None and self.healthy():
            p.ready_at = now

    @property
    def ready(self) -> bool:
        return self.phases.ready_at is not None
