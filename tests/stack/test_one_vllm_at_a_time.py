"""The stack tiers' rule, on the real thing: while the shared stack's vLLM runs, a second stack refuses
to start and names the running vLLM (tests/support/native_stack.py), and the census that
tests/conftest.py takes after every stack test counts exactly that one vLLM."""

from __future__ import annotations

import pytest

from tests.support import vllm_tree
from tests.support.native_stack import running_native_stack, vllm_api_servers


def test_a_second_stack_is_refused_while_the_shared_one_runs(native_stack):
    # The shared stack's API server, found from its own supervisord rather than by the census.
    (api,) = [p for p in native_stack.stack.processes() if vllm_tree.is_api_server(p)]
    assert [p.pid for p in vllm_api_servers()] == [api.pid]
    refused = pytest.raises(pytest.fail.Exception, match=rf"second vLLM while one is running \(pid {api.pid}:")
    with refused, running_native_stack("lw-second-"):
        pytest.fail("a second stack started")
    # Nothing of a second stack was started.
    assert [p.pid for p in vllm_api_servers()] == [api.pid]
