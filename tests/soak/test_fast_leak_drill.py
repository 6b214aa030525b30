"""The fast-leak drill on the real stack (vLLM CPU in a memory cgroup, Prometheus, Alertmanager,
exporter, healer): a leak from the first request after the exporter's baseline that would exhaust
the cgroup's headroom ~40 production minutes later -> HostMemoryRunningOut (critical) -> Alertmanager
-> healer -> vLLM drained and restarted before the kernel's OOM killer acts."""

from __future__ import annotations

import io

import pytest

from leakwatch.drill import drill_settings
from leakwatch.drill.fast_leak import FAST_LEAK_ALERT, FastLeakDrill
from tests.support.native_stack import assert_no_vllm_running

FAST = drill_settings.load().as_fast_leak()
FIXED_PARTS_S = 1200  # start-up, warm-up, the restart, recovery and the repeat watch
pytestmark = [pytest.mark.slow, pytest.mark.timeout(FIXED_PARTS_S + FAST.wall(FAST.leak_span_s))]


@pytest.fixture(scope="module")
def drill():
    assert_no_vllm_running("the fast-leak drill's stack")
    out = io.StringIO()
    result = FastLeakDrill(FAST, out=out).run()
    print(out.getvalue())
    return result, out.getvalue()


def test_the_healer_restarts_vllm_before_any_oom_kill(drill):
    result, log = drill
    assert result.oom_kills == 0, (result.failures, log)
    assert result.restarts == 1, (result.failures, log)
    # The restart came with headroom left: the leak would have run on for minutes more.
    assert result.headroom_left_bytes is not None and result.headroom_left_bytes > 0, log
    assert result.lead_min is not None and result.lead_min > 0, log


def test_the_page_is_the_fast_leak_rule_not_the_slow_one(drill):
    """HostMemoryLeak waits hours for a settled window; within the fast drill only the fast rule can
    fire, and its remediated twin is what the healer acted on."""
    result, log = drill
    assert result.remediation_alert_s is not None, log
    assert FAST_LEAK_ALERT in log and "HostMemoryLeak firing" not in log, log


def test_memory_comes_back_and_the_drill_passes(drill):
    result, log = drill
    assert result.recover_s is not None, (result.failures, log)
    assert result.passed, (result.failures, log)
    assert "oom_kills=0" in result.summary_line()
