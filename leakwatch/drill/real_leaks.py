"""vLLM's own leaks, screened on the real server: a private native stack whose vLLM runs with the
cases' settings (config/vllm_leaks.yaml's `env`), no injector, the healer stopped; each trigger
pattern in turn, as fast as the server answers; per trigger the exporter's growth per process role
and `leakwatch check` over its phase. Controls (fixed or unreachable cases) go first, while the
server is freshly warmed; then the bounded cache; then the unbounded leak.

A case is
  reproduced  when its role grew by more than `min_bytes_per_trigger` per triggering request
              (status `reproduces` expects it; every other status expects no role to);
  attributed  when the role that grew most is the catalogue's role;
  verdict_ok  when check's verdict on that role is the expected shape's: LEAK for a leak; for a
              bounded cache NO-LEAK once full (more triggers at a production pace), and while it
              filled no LEAK without a plateau forecast that fits the headroom; for a flat case no
              LEAK on any role and no role grown;
  plateau_ok  (bounded caches) when the role's growth stopped within the phase: the last third of
              the triggers added less than a tenth of the first third's growth.
"""

from __future__ import annotations

import itertools
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import requests

from ..core.topology import HEALER_PROGRAM
from ..leakcheck.analysis import LEAK, NO_LEAK
from ..realleaks import forecast, triggers
from ..realleaks.catalogue import Case, Catalogue
from .drill_settings import DrillConfig
from .load import CpuHog
from .orchestrator import Drill

ROLE_METRIC = "leakwatch_process_anonymous_memory_bytes"
ROLE_MEMORY = f"sum by (role) ({ROLE_METRIC})"
# A role "grew" in a phase when it gained more than both: per trigger (the reproducing cases keep
# KiBs), and in all (the allocator's wander over a phase: up to ~1.5 MB measured in the controls).
MIN_BYTES_PER_TRIGGER = 1024
MIN_GROWTH_BYTES = 4 * 1024 * 1024
CONCURRENCY = 4
EXPORTER_SAMPLE_S = 5.0
# A bounded cache fills at this pace (check gets samples of the filling: the first third's window)
FILL_PER_SECOND = 5.0
# A bounded cache, once full, judged at a production pace (new entries evicting old ones): two new
# schemas a second for two minutes (~170,000 a day; check needs 20 samples and 50 requests).
AFTER_PLATEAU_PER_SECOND = 2.0
AFTER_PLATEAU_REQUESTS = 240  # DrillStack's --sample-interval at no time compression
# Before a trigger's baseline, up to this many of its shape twins (triggers.shape_twin) fill the caches
# that grow with new request shapes (oneDNN's worker cache: +32 MB on a fresh server's first burst).
# Not all of them: what still fills during the phase grows in its first thirds only (judge()).
PRIMING_REQUESTS = 500
# Controls first (a fresh, warmed server), then the bounded cache, then the unbounded leak.
ORDER = ("client-timeout", "short-decode", "unique-json-schema", "responses-store")


def host_series(check: dict, role: str) -> dict | None:
    """The host series of `role` in a `leakwatch check --json` result (the first of its ranks)."""
    for series in check.get("series", []):
        if series.get("kind") == "host" and series.get("labels", {}).get("role") == role:
            return series
    return None


@dataclass
class TriggerRun:
    trigger: str
    sent: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    growth: dict[str, float] = field(default_factory=dict)  # role -> bytes over the phase
    thirds: dict[str, list[float]] = field(default_factory=dict)  # role -> growth per third of the triggers
    check: dict = field(default_factory=dict)  # leakwatch check --json over the phase
    # The live alert timeline: "alertname/severity[/role]" -> seconds into the phase it first fired
    # (production rules at wall-clock speed: a phase of minutes rarely fires any).
    alerts: dict[str, float] = field(default_factory=dict)
    after: TriggerRun | None = None  # a bounded cache: more triggers at a production pace once full
    fill_check: dict = field(default_factory=dict)  # a bounded cache: check over its first third (filling)

    def per_trigger(self, role: str) -> float:
        return self.growth.get(role, 0.0) / self.sent if self.sent else 0.0

    def verdicts(self, check: dict | None = None) -> dict[str, str]:
        """Role -> check's verdict on that role's host series (the worst over a role's ranks)."""
        out: dict[str, str] = {}
        for series in (check if check is not None else self.check).get("series", []):
            role = series.get("labels", {}).get("role")
            if series.get("kind") != "host" or not role:
                continue
            if out.get(role) != LEAK:
                out[role] = series["verdict"]
        return out

    def bounded_outcome(self, role: str) -> str | None:
        """check's plateau forecast for the role's LEAK while filling (leakcheck/bounded.py): fits,
        runs out first, beyond the bound, headroom unknown."""
        series = host_series(self.fill_check, role)
        return (series.get("bounded_caches") or {}).get("outcome") if series else None

    def steady_per_trigger(self, role: str) -> float:
        """Growth per trigger that every third of the triggers added (the least-growing third, times
        three): a leak grows in each third, a cache that fills with the first requests' shapes in
        the first only."""
        thirds = self.thirds.get(role) or [0.0]
        return 3 * min(thirds) / self.sent if self.sent and len(thirds) == 3 else 0.0

    def check_reason(self, role: str) -> str:
        series = host_series(self.check, role)
        return str(series.get("reason", "")) if series else ""

    def check_bytes_per_request(self, role: str) -> float | None:
        series = host_series(self.check, role)
        return series["bytes_per_request"].get("estimate") if series else None


@dataclass
class CaseResult:
    case: Case
    run: TriggerRun | None
    grown_role: str | None = None  # the role that grew most per trigger, if above the floor
    bytes_per_trigger: float | None = None  # exporter: the case's role's growth / triggers
    check_bytes_per_trigger: float | None = None  # leakwatch check's bytes/request on that role
    verdict: str = "n/a"  # check's verdict on the case's role
    reproduced: bool = False
    attributed: bool = False
    verdict_ok: bool = False
    plateau_ok: bool | None = None  # bounded caches only
    plateau_bytes: float | None = None
    filling_verdict: str | None = None  # a bounded cache: check's verdict while it filled (forecast outcome)
    declared_bound: float | None = None  # the exporter's leakwatch_vllm_cache_bound_bytes for it
    hours_to_alert: dict[str, float | None] = field(default_factory=dict)  # traffic -> backtest hours
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        def b(v):
            return "none" if v is None else f"{v:.0f}"

        def h(v):
            return "none" if v is None else f"{v:.1f}h"

        c = self.case
        text = (
            f"  {c.name}: status={c.status} trigger={c.trigger} role={self.grown_role or 'none'} "
            f"expected_role={c.role} shape={c.expected_on_pinned} bytes_per_trigger_exporter={b(self.bytes_per_trigger)} "
            f"bytes_per_trigger_check={b(self.check_bytes_per_trigger)} verdict={self.verdict}"
        )
        if self.plateau_ok is not None:
            text += (
                f" plateau_ok={int(self.plateau_ok)} plateau_bytes={b(self.plateau_bytes)}"
                f" declared_bound={b(self.declared_bound)} while_filling={(self.filling_verdict or 'n/a').replace(' ', '_')}"
            )
        if self.hours_to_alert:
            text += " " + " ".join(f"alert_{k}={h(v)}" for k, v in self.hours_to_alert.items())
        fired = self.run.alerts if self.run else {}
        text += " alerts_live=" + (",".join(f"{k}@{v:.0f}s" for k, v in sorted(fired.items())) or "none")
        return text


class RealLeakDrill(Drill):
    """The screening: one private stack, the triggers of the chosen cases in ORDER."""

    def __init__(self, cfg: DrillConfig, catalogue: Catalogue, cases: list[Case], out=sys.stdout, **kwargs):
        # Wall-clock speed: the triggers go out as fast as vLLM answers and check judges the
        # phases in production hours (no time compression).
        super().__init__(cfg, out=out, **kwargs)
        self.catalogue = catalogue
        self.cases = [c for c in cases if c.screened]
        self.skipped = [c for c in cases if not c.screened]
        env: dict[str, str] = {}
        for case in self.cases:
            for key, value in case.env.items():
                if env.setdefault(key, value) != value:
                    raise ValueError(f"cases disagree on {key}: {env[key]!r} vs {value!r}")
        self.env = env
        # (role, cache) -> bytes: the cache bounds the exporter read from vLLM's environment.
        self.declared_bounds: dict[tuple[str, str], float] = {}

    def vllm_options(self) -> dict:
        return {"vllm_extra_args": list(self.catalogue.screening_vllm_args), "vllm_extra_env": dict(self.env)}

    def role_memory(self) -> dict[str, float]:
        return {r["metric"]["role"]: float(r["value"][1]) for r in self.prom.query(ROLE_MEMORY)}

    def settle(self) -> dict[str, float]:
        """Role memory as the exporter sampled it after the last request: waits for a scrape later
        than now plus the exporter's sample interval (it serves its latest sample)."""
        after = time.time() + EXPORTER_SAMPLE_S
        self.prom.wait_for(
            f"min(timestamp({ROLE_METRIC})) > {after:.3f}",
            timeout=120,
            interval=self.cfg.scrape_interval_s,
        )
        return self.role_memory()

    def prime(self, trigger: str, count: int) -> None:
        """`count` shape twins of `trigger`, CONCURRENCY at a time, not measured."""
        self.say(f"{trigger}: priming with {count} requests of its shape that trigger nothing")
        url = self.url("vllm")
        sessions = [requests.Session() for _ in range(CONCURRENCY)]
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(
                pool.map(
                    lambda i: triggers.send(sessions[i % CONCURRENCY], url, triggers.shape_twin(trigger, i, "demo")),
                    range(count),
                )
            )

    def drive(self, trigger: str, count: int, first: int = 0, per_second: float | None = None) -> TriggerRun:
        """`count` triggering requests numbered from `first`: as fast as vLLM answers, CONCURRENCY
        at a time, or one at a time at `per_second` (a production pace)."""
        run = TriggerRun(trigger)
        if first == 0:
            self.prime(trigger, min(count, PRIMING_REQUESTS))
        pace = f"{per_second:g} a second" if per_second else f"{CONCURRENCY} at a time"
        self.say(f"{trigger}: {count} triggering requests, {pace}")
        before = self.settle()
        url = self.url("vllm")
        marks: list[dict[str, float]] = [before]
        run.start = time.time()
        workers = 1 if per_second else CONCURRENCY
        sessions = [requests.Session() for _ in range(workers)]

        def send(i: int) -> str:
            if per_second:  # on the schedule, whatever the answer time
                time.sleep(max(0.0, run.start + (i - first) / per_second - time.time()))
            return triggers.send(sessions[i % workers], url, triggers.build(trigger, i, "demo"))

        with ThreadPoolExecutor(workers) as pool:
            thirds = [range(first + k * count // 3, first + (k + 1) * count // 3) for k in range(3)]
            for part in thirds:
                for outcome in pool.map(send, part):
                    run.outcomes[outcome] = run.outcomes.get(outcome, 0) + 1
                    run.sent += 1
                marks.append(self.settle())
        run.end = time.time()
        after = marks[-1]
        run.growth = {role: after.get(role, 0.0) - before.get(role, 0.0) for role in after}
        run.thirds = {
            role: [m2.get(role, 0.0) - m1.get(role, 0.0) for m1, m2 in itertools.pairwise(marks)] for role in after
        }
        run.check = self.check(run.start, run.end).as_dict()
        for item in self.prom.query_range(
            'ALERTS{alertstate="firing", alertname!="Watchdog"}', run.start, time.time(), 2.0
        ):
            m = item["metric"]
            name = "/".join(x for x in (m.get("alertname"), m.get("severity"), m.get("role")) if x)
            run.alerts[name] = min(float(t) for t, _ in item["values"]) - run.start
        self.say(
            f"{trigger}: {run.outcomes}; growth per trigger "
            + ", ".join(f"{role} {run.per_trigger(role):.0f} B" for role in sorted(run.growth))
            + "; by third (MB): "
            + ", ".join(
                f"{role} " + "/".join(f"{g / 1e6:.1f}" for g in run.thirds[role]) for role in sorted(run.thirds)
            )
            + "; check: "
            + ", ".join(f"{role} {v}" for role, v in sorted(run.verdicts().items()))
        )
        return run

    def screen(self) -> list[CaseResult]:
        hog = CpuHog(self.cpu_hogs, max_s=3 * 3600).start()
        runs: dict[str, TriggerRun] = {}
        try:
            self._start_stack()
            assert self.stack is not None
            # A reproduced leak is the point: the healer must not restart vLLM in the middle.
            self.stack.rpc().stopProcess(HEALER_PROGRAM, True)
            self.declared_bounds = {
                (r["metric"].get("role", ""), r["metric"].get("cache", "")): float(r["value"][1])
                for r in self.prom.query("leakwatch_vllm_cache_bound_bytes")
            }
            wanted = {c.trigger for c in self.cases}
            settles = {c.trigger for c in self.cases if c.expected_on_pinned == "bounded"}
            for trigger in ORDER:
                if trigger in wanted:
                    count = self.catalogue.screening[trigger]
                    if trigger not in settles:
                        runs[trigger] = self.drive(trigger, count)
                        continue
                    # Paced, so that check has samples of the cache filling (its first third).
                    run = runs[trigger] = self.drive(trigger, count, per_second=FILL_PER_SECOND)
                    run.fill_check = self.check(run.start, run.start + (run.end - run.start) / 3).as_dict()
                    # Once full, new entries evict old ones: at a production pace, memory is flat.
                    run.after = self.drive(
                        trigger, AFTER_PLATEAU_REQUESTS, first=count, per_second=AFTER_PLATEAU_PER_SECOND
                    )
        finally:
            self._stop_stack(None, hog)
        results = [judge(case, runs[case.trigger]) for case in self.cases if case.trigger]
        for res in results:
            res.declared_bound = self.declared_bounds.get((res.case.role, res.case.name))
        return results


def judge(case: Case, run: TriggerRun) -> CaseResult:
    res = CaseResult(case, run)
    per_trigger = {role: run.per_trigger(role) for role in run.growth}
    # A leak is the role that grew in every third (a cache filling with new shapes in another role
    # grows in the first only); a bounded cache or a control, the role that grew most in all.
    growth_of = run.steady_per_trigger if case.expected_on_pinned == "leak" else run.per_trigger
    ranked = {role: growth_of(role) for role in run.growth}
    top = max(ranked, key=ranked.get, default=None)  # type: ignore[arg-type]
    if top is not None and ranked[top] > MIN_BYTES_PER_TRIGGER and run.growth[top] > MIN_GROWTH_BYTES:
        res.grown_role = top
    res.bytes_per_trigger = per_trigger.get(case.role)
    res.check_bytes_per_trigger = run.check_bytes_per_request(case.role)
    verdicts = run.verdicts()
    res.verdict = verdicts.get(case.role, "n/a")
    expected = case.expected_on_pinned
    res.reproduced = expected != "flat" and res.grown_role is not None
    res.attributed = res.reproduced and res.grown_role == case.role
    if expected == "leak":
        res.verdict_ok = res.verdict == LEAK
    elif expected == "bounded":
        # While it fills, check may say LEAK, but only with a plateau forecast that fits the
        # headroom; once full, at a production pace, NO-LEAK.
        forecast_outcome = run.bounded_outcome(case.role)
        filling = run.verdicts(run.fill_check).get(case.role, "n/a")
        res.filling_verdict = filling + (f" ({forecast_outcome})" if forecast_outcome else "")
        res.verdict = run.after.verdicts().get(case.role, "n/a") if run.after else "n/a"
        res.verdict_ok = res.verdict == NO_LEAK and (
            not res.filling_verdict.startswith(LEAK) or forecast_outcome == "fits"
        )
        thirds = run.thirds.get(case.role, [0.0, 0.0, 0.0])
        res.plateau_ok = thirds[0] > MIN_GROWTH_BYTES and thirds[-1] < 0.1 * thirds[0]
        res.plateau_bytes = run.growth.get(case.role)
        if res.verdict != NO_LEAK:
            res.failures.append(f"{case.name}: check said {res.verdict} once it was full, not NO-LEAK")
        elif not res.verdict_ok:
            res.failures.append(
                f"{case.name}: check said {res.filling_verdict} while it filled: no plateau forecast that fits"
            )
        if not res.plateau_ok:
            res.failures.append(
                f"{case.name}: {case.role} did not level off (growth per third of the triggers: {thirds})"
            )
    else:
        res.verdict_ok = LEAK not in verdicts.values() and res.grown_role is None
    if expected != "flat" and not res.reproduced:
        res.failures.append(f"{case.name}: no role grew more than {MIN_BYTES_PER_TRIGGER} B per trigger")
    if res.reproduced and not res.attributed:
        res.failures.append(f"{case.name}: {res.grown_role} grew most, not {case.role}")
    if expected == "leak" and not res.verdict_ok:
        res.failures.append(
            f"{case.name}: check said {res.verdict} for {case.role}, not LEAK ({run.check_reason(case.role)})"
        )
    if expected == "flat" and not res.verdict_ok:
        res.failures.append(f"{case.name}: a control, yet {res.grown_role or 'check'} says it grows ({verdicts})")
    if expected == "leak" and res.bytes_per_trigger:
        res.hours_to_alert = forecast.hours_to_leak_alert(case.role, res.bytes_per_trigger)
    return res


def summary_line(results: list[CaseResult]) -> str:
    return (
        f"realleaks: screened={len(results)} reproduced={sum(r.reproduced for r in results)} "
        f"attributed={sum(r.attributed for r in results)} verdict_ok={sum(r.verdict_ok for r in results)} "
        f"plateau_ok={sum(bool(r.plateau_ok) for r in results)}"
    )
