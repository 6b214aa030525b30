"""The healer's restart as a transaction (issue 32, finding N2), performed against a real supervisord:
a restart that fails must not leave vLLM stopped behind it."""

from __future__ import annotations

from tests.support.healer_support import alert, metric, notification, post, running_healer, supervised_standin, wait_for


def test_a_stop_supervisord_carries_out_after_the_healer_gave_up_is_reconciled():
    """vLLM's drain outlasts the healer's stop timeout (3 s here; a host swapping under the very leak
    being healed): the healer records a failed restart while supervisord is still stopping it, and
    supervisord's SIGKILL (after 8 s) leaves it STOPPED. Before: vLLM stayed STOPPED and the next
    episode got `cooldown`. Now the healer reconciles: it waits for the stop to finish, starts the
    program and says so in its metrics and log."""
    with supervised_standin(stop_wait_s=8, ignore_sigterm=True) as target:
        before = len(target.starts())
        with running_healer(target, stop_timeout_s=3.0, cooldown_s=0) as (url, _healer):
            assert post(url, notification(alert())).status_code == 202
            wait_for(
                lambda: metric(url, "leakwatch_healer_reconciles_total", found="started") == 1,
                timeout=150,
                what="the healer starting the program supervisord stopped after it gave up",
            )
            wait_for(
                lambda: metric(url, "leakwatch_healer_remediation_in_progress") == 0,
                timeout=30,
                what="the remediation to end",
            )
            assert metric(url, "leakwatch_healer_restarts_total", result="failed") == 1
            assert target.rpc().getProcessInfo("vllm")["statename"] == "RUNNING"
            assert len(target.starts()) == before + 1
            assert metric(url, "leakwatch_healer_reconciles_total", found="failed") == 0
