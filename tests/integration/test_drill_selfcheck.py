"""The drill's own checks of its figures: the leak alert attributed (or not) to the injected leak
against a real Prometheus holding ALERTS histories, the earliest moment the rule allows, the recovery
split into phases, and the bounded CPU hog of the loaded variant."""

from __future__ import annotations

import math
import time

import psutil
import pytest

from leakwatch.core import alert_config
from leakwatch.core.promapi import Prometheus
from leakwatch.drill import selfcheck
from leakwatch.drill.drill_settings import LEAK_ALERT, load
from leakwatch.drill.load import CpuHog
from leakwatch.drill.phases import PhaseWatcher, RecoveryPhases
from tests.support.prom_backfill import backfilled_prometheus

# Starts Prometheus, promtool or vLLM's plugin loader in other processes.

COMPRESSION = load().time_compression
WINDOW = selfcheck.leak_window(COMPRESSION)
STEP = 1.0
NOW = float(int(time.time() // 3600 * 3600))
# One drill history per case, hours apart: (control start, leak start).
CASES = {
    name: (NOW - (10 - 2 * i) * 3600, NOW - (10 - 2 * i) * 3600 + 300)
    for i, name in enumerate(["honest", "too_soon", "in_control", "wrong_role"])
}


def _alerts(lines: list[str], role: str, state: str, start: float, end: float) -> None:
    t = start
    while t <= end:
        lines.append(
            f'ALERTS{{alertname="{LEAK_ALERT}",alertstate="{state}",role="{role}",severity="warning"}} 1 {t:.3f}'
        )
        t += STEP


def history() -> str:
    lines = ["# HELP ALERTS Alerts as Prometheus records them.", "# TYPE ALERTS gauge"]
    w = WINDOW.earliest_s
    c, leak = CASES["honest"]
    _alerts(lines, "api_server", "pending", leak + w - WINDOW.for_s + 5, leak + w + 4)
    _alerts(lines, "api_server", "firing", leak + w + 5, leak + w + 60)
    # Issue 19's figure: firing 2.4 s into the leak, pending since the warm-up.
    c, leak = CASES["too_soon"]
    _alerts(lines, "api_server", "pending", leak - 60, leak + 2)
    _alerts(lines, "api_server", "firing", leak + 2.4, leak + 60)
    c, leak = CASES["in_control"]
    _alerts(lines, "engine_core", "pending", c + 100, c + 150)
    _alerts(lines, "api_server", "pending", leak + w - WINDOW.for_s + 5, leak + w + 4)
    _alerts(lines, "api_server", "firing", leak + w + 5, leak + w + 60)
    c, leak = CASES["wrong_role"]
    _alerts(lines, "engine_core", "pending", leak + w - WINDOW.for_s + 5, leak + w + 4)
    _alerts(lines, "engine_core", "firing", leak + w + 5, leak + w + 60)
    lines.sort(
        key=lambda line: (line.split(" ")[0], float(line.split(" ")[-1])) if not line.startswith("#") else ("", 0)
    )
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom():
    with backfilled_prometheus(history()) as url:
        yield Prometheus(url)


def attribute(prom, case: str, alert_after_s: float):
    control, leak = CASES[case]
    return selfcheck.attribute(
        prom,
        LEAK_ALERT,
        WINDOW,
        control_start=control,
        leak_start=leak,
        alert_at=leak + alert_after_s,
        role="api_server",
        step=STEP,
    )


def test_the_earliest_alert_follows_the_rule_settings():
    """p25 of 6 slice slopes: Prometheus's rank 0.25 x 5 = 1.25 interpolates between the 2nd and 3rd
    smallest, so 4 slices must see growth; 3 slices of 20 min, then 30 min pending, all /60."""
    t = alert_config.load()
    host = t.section("host")
    n, q = host.slices("leak_slices"), t.slice_quantile
    assert WINDOW.slices_needed == n - math.ceil(q * (n - 1))
    slice_s = host.seconds("leak_window") / n / COMPRESSION
    assert WINDOW.earliest_s == pytest.approx(
        (WINDOW.slices_needed - 1) * slice_s + host.seconds("leak_for") / COMPRESSION
    )
    assert WINDOW.earliest_s > 2.4 * 10  # the 2.4 s figure is far below what the rule allows


def test_an_honest_alert_is_attributed_to_the_leaking_role(prom):
    out = attribute(prom, "honest", WINDOW.earliest_s + 5)
    assert out.failures == []
    assert out.labels["role"] == "api_server" and out.labels["alertstate"] == "firing"
    assert out.pending_since_s == pytest.approx(WINDOW.earliest_s - WINDOW.for_s + 5, abs=1.5)


def test_an_alert_sooner_than_the_rule_allows_fails_the_drill_with_the_reason(prom):
    out = attribute(prom, "too_soon", 2.4)
    text = " ".join(out.failures)
    assert "not the leak's" in text and "fired 2.4s after the leak began" in text
    assert "pending" in text and "before the leak began" in text  # and it was pending from before


def test_an_alert_during_the_control_phase_fails_the_drill(prom):
    out = attribute(prom, "in_control", WINDOW.earliest_s + 5)
    assert len(out.failures) == 1 and "control phase" in out.failures[0], out.failures
    assert out.control_alerts and out.control_alerts[0]["role"] == "engine_core"


def test_an_alert_on_another_role_fails_the_drill(prom):
    out = attribute(prom, "wrong_role", WINDOW.earliest_s + 5)
    assert any('role="engine_core"' in f and "not on the role the drill leaks" in f for f in out.failures), out.failures


def test_no_alert_is_no_attribution_failure_of_its_own(prom):
    control, leak = CASES["honest"]
    out = selfcheck.attribute(
        prom, LEAK_ALERT, WINDOW, control_start=control, leak_start=leak, alert_at=None, role="api_server", step=STEP
    )
    assert out.failures == [] and out.alert_s is None


class FakeVllm:
    """Processes and /health as the watcher polls them (a restart here is a list of pids changing)."""

    def __init__(self):
        self.pids, self.health, self.began, self.stop_s = [10, 11], True, 0.0, 0.0


def test_phases_are_recorded_in_order_and_add_up_to_the_recovery():
    vllm = FakeVllm()
    phases = RecoveryPhases(alert_at=100.0, remediation_at=104.0)
    watcher = PhaseWatcher(
        phases,
        [10, 11],
        vllm_pids=lambda: vllm.pids,
        healthy=lambda: vllm.health,
        healer_began=lambda: vllm.began,
        sigterm_to_gone_s=lambda: vllm.stop_s,
    )
    watcher.poll(105.0)  # the healer has not begun: nothing else is read
    assert phases.healer_began_at is None
    vllm.began = 106.0
    watcher.poll(107.0)  # draining: the old processes still run
    assert phases.stopped_at is None
    vllm.pids, vllm.health = [], False
    watcher.poll(115.0)  # gone; the healer's gauge says SIGTERM was 3 s before
    vllm.stop_s = 3.0
    vllm.pids = [20]
    watcher.poll(116.0)
    assert not watcher.ready
    vllm.health = True
    watcher.poll(150.0)
    phases.baseline_at = 170.0
    d = phases.durations()
    assert d == {
        "escalate": 4.0,
        "notify": 2.0,
        "drain": 6.0,
        "stop": 3.0,
        "start": 1.0,
        "ready": 34.0,
        "baseline": 20.0,
    }
    assert sum(d.values()) == pytest.approx(phases.baseline_at - phases.alert_at)
    assert phases.problems() == []
    assert phases.summary().startswith("escalate_s=4.0 notify_s=2.0 drain_s=6.0 stop_s=3.0")


def test_a_late_poll_of_the_remediation_alert_is_bounded_by_the_healer_acting():
    phases = RecoveryPhases(alert_at=100.0, remediation_at=110.3)
    watcher = PhaseWatcher(
        phases,
        [1],
        vllm_pids=lambda: [1],
        healthy=lambda: False,
        healer_began=lambda: 110.0,
        sigterm_to_gone_s=lambda: 0.0,
    )
    watcher.poll(111.0)
    assert phases.durations()["notify"] == 0.0 and phases.remediation_at == 110.0


def test_phases_out_of_order_are_reported():
    phases = RecoveryPhases(alert_at=100.0, remediation_at=90.0, healer_began_at=95.0)
    assert any("remediation_at" in p for p in phases.problems())


def test_the_cpu_hog_spins_and_stops_by_itself():
    hog = CpuHog(1, max_s=10.0).start()
    try:
        (pid,) = hog.pids
        proc = psutil.Process(pid)
        # Busy, not sleeping: it keeps using CPU (on a shared 2-core machine at a load of 30 it gets a
        # small share of a core, so watch the total rather than a rate).
        used, deadline = 0.0, time.monotonic() + 15
        while used <= 0.25 and time.monotonic() < deadline:
            try:
                used = proc.cpu_times().user
            except psutil.NoSuchProcess:
                break
            time.sleep(0.5)
        assert used > 0.25
        proc.wait(timeout=30)  # and it ends on its own, bounded
    finally:
        hog.stop()
    with pytest.raises(ValueError):
        CpuHog(-1, 10)
