"""`make test` runs two xdist workers with `--dist loadgroup` and relies on tests/conftest.py's schedule:
every test of a vLLM tier (stack, compose) on one worker, the shared stack's tests first (quiet, plain,
storm, the one that leaks into it, `make down` on it), then each module with a stack of its own, then compose, so
that at most one vLLM runs at any moment; the shared stack is stopped after its last test, before the
first module stack starts. pytest 9.2 with xdist 3.8
once silently ignored xdist_group (pytest-dev/pytest-xdist#1386): stack tests spread over both workers
and the CI run failed in ways that looked like flaky stacks. This runs the real pytest and xdist on a
small suite laid out in tier folders that uses our conftest hooks, with SHARED's start and stop
replaced by a log, and reads which worker ran what, in which order."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

from leakwatch.core.paths import REPO_ROOT

CONFTEST = """
import os
import pytest
from tests.conftest import SHARED, native_stack, pytest_collection_modifyitems, pytest_runtest_teardown  # noqa: F401

LOG = os.path.join(os.path.dirname(__file__), "events.log")


def log(event):
    with open(LOG, "a") as out:
        out.write(f"{os.environ.get('PYTEST_XDIST_WORKER', '-')} {event}\\n")


class FakeShared:
    # Stands in for a real vLLM stack: logs its start and stop instead.
    def acquire(self):
        if SHARED.running is None:
            log("start-shared")
            SHARED.running = "stack"
        return SHARED.running


def release():
    if SHARED.running is not None:
        log("stop-shared")
    SHARED.running = None


SHARED.acquire = FakeShared().acquire
SHARED.release = release


@pytest.fixture(autouse=True)
def record(request):
    log("run " + request.node.nodeid)


def pytest_configure(config):
    for name in ("unit", "integration", "stack", "compose", "soak", "quiet_stack", "storm", "leaks_into_stack", "stops_stack"):
        config.addinivalue_line("markers", f"{name}: a tier or an order")
"""


def write_suite(root) -> None:
    (root / "conftest.py").write_text(CONFTEST)
    tests = root / "tests"
    for folder in ("unit", "integration", "stack", "compose"):
        (tests / folder).mkdir(parents=True)

    for name in ("a", "b"):
        (tests / f"stack/test_shared_{name}.py").write_text(
            "".join(f"def test_{i}(native_stack):\n    pass\n" for i in range(3))
        )
    (tests / "stack/test_shared_storm.py").write_text(
        "import pytest\n@pytest.mark.storm\ndef test_storm(native_stack):\n    pass\n"
    )
    (tests / "stack/test_shared_leaks.py").write_text(
        "import pytest\npytestmark = pytest.mark.leaks_into_stack\n"
        + "".join(f"def test_{i}(native_stack):\n    pass\n" for i in range(2))
    )
    (tests / "stack/test_shared_down.py").write_text(
        "import pytest\n@pytest.mark.stops_stack\ndef test_down(native_stack):\n    pass\n"
    )
    (tests / "stack/test_shared_quiet.py").write_text(
        "import pytest\n@pytest.mark.quiet_stack\ndef test_quiet(native_stack):\n    pass\n"
    )
    for name in ("c", "d"):
        (tests / f"stack/test_own_{name}.py").write_text(
            "import pytest\n@pytest.fixture(scope='module')\ndef own():\n    yield\n"
            + "".join(f"def test_{i}(own):\n    pass\n" for i in range(3))
        )
    (tests / "compose/test_compose.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(3)))
    for folder in ("unit", "integration"):
        for name in range(4):
            (tests / f"{folder}/test_{folder}_{name}.py").write_text(
                "".join(f"def test_{i}():\n    pass\n" for i in range(4))
            )


def test_vllm_tiers_run_on_one_worker_shared_stack_first_and_stopped_before_the_module_stacks(tmp_path):
    write_suite(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-q", "tests"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    events = (tmp_path / "events.log").read_text().splitlines()
    runs = [re.match(r"(gw\d) run tests/(\w+)/(\w+)\.py::", e) for e in events]
    ran = [(m.group(1), m.group(2), m.group(3)) for m in runs if m]
    assert len(ran) == 2 * 3 + 2 + 2 + 1 + 2 * 3 + 3 + 2 * 4 * 4, events
    vllm_workers = {worker for worker, folder, _ in ran if folder in ("stack", "compose")}
    assert len(vllm_workers) == 1, f"the vLLM tiers ran on {sorted(vllm_workers)}:\n" + "\n".join(events)
    (worker,) = vllm_workers
    # That worker's story, the unit and integration tests it may have picked up left out.
    story = [
        e.split(" ", 1)[1] for e in events if e.startswith(worker) and not re.search(r"tests/(unit|integration)/", e)
    ]
    modules = [re.sub(r"run tests/\w+/(\w+)\.py::.*", r"\1", e) for e in story]
    order = [m for m, _ in itertools.groupby(modules)]
    assert order[0] == "start-shared", story
    assert order[1] == "test_shared_quiet", story
    assert set(order[2:4]) == {"test_shared_a", "test_shared_b"}, story
    assert order[4:8] == ["test_shared_storm", "test_shared_leaks", "test_shared_down", "stop-shared"], story
    assert set(order[8:10]) == {"test_own_c", "test_own_d"}, story  # each module once: never interleaved
    assert order[10:] == ["test_compose"], story
