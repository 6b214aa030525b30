"""kill -9 of vLLM's API server on the real native stack (tests/support/fault_drills.py's stack: the
production rules with short `for`s): supervised restart, `VLLMDown` fires and resolves, nothing of the
old process tree left, and the exporter re-discovers the processes and takes a new baseline. The
worker's kill is tests/stack/test_lifecycle.py's; EngineCore's, the hung API server and the Prometheus
and Alertmanager restarts are in tests/soak/test_fault_drills.py."""

from __future__ import annotations

import pytest

from tests.support.fault_drills import WebhookRecorder, fault_drill_stack, kill_9_and_watch_the_restart


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    recorder = WebhookRecorder()
    try:
        with fault_drill_stack(tmp_path_factory.mktemp("fault-drills"), recorder.url) as running:
            yield running
    finally:
        recorder.close()


@pytest.mark.timeout(2400)  # vLLM restarts slowly on a loaded 2-core machine
def test_kill_9_of_the_api_server_restarts_vllm_and_the_exporter_takes_a_new_baseline(stack):
    kill_9_and_watch_the_restart(stack, "api_server")
