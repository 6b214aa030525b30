"""`make test` runs two xdist workers with `--dist loadgroup` and relies on tests/conftest.py's grouping:
every test of the shared native stack on one worker, in collection order, so module-scoped stacks are
started once and never torn down between two tests of their module. pytest 9.2 with xdist 3.8 silently
ignored xdist_group (pytest-dev/pytest-xdist#1386): stack tests spread over both workers and the CI run
failed in ways that looked like flaky stacks. This runs the real pytest and xdist on a small suite that
uses our conftest hook, and reads which worker ran what."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import textwrap

import pytest

from leakwatch.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def write_suite(root) -> None:
    # The project's grouping hook, imported from tests/conftest.py, so the test checks the real one.
    (root / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
        "import pytest\n"
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'stack: uses a stack')\n"
        "    config.addinivalue_line('markers', 'quiet_stack: first')\n"
        "    config.addinivalue_line('markers', 'storm: last')\n"
    )
    for module in ("a", "b", "c"):
        (root / f"test_stack_{module}.py").write_text(
            textwrap.dedent(
                """
                import pytest
                pytestmark = pytest.mark.stack
                """
            )
            + "".join(f"def test_{i}():\n    pass\n" for i in range(4))
        )
    (root / "test_own_group.py").write_text(
        "import pytest\npytestmark = [pytest.mark.stack, pytest.mark.xdist_group('own')]\n"
        + "".join(f"def test_{i}():\n    pass\n" for i in range(4))
    )
    (root / "test_units.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(12)))


def test_stack_tests_share_one_worker_and_run_module_by_module(tmp_path):
    write_suite(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v", "-rA"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = re.findall(r"^\[(gw\d)\] \[\s*\d+%\] PASSED (test_\w+)\.py::(test_\d+)", done.stdout, re.M)
    assert len(ran) == 4 * 4 + 12, done.stdout
    workers: dict[str, set[str]] = {}
    for worker, module, _ in ran:
        workers.setdefault(module, set()).add(worker)
    shared = set().union(*(workers[f"test_stack_{m}"] for m in "abc"))
    assert len(shared) == 1, f"the shared-stack tests ran on {sorted(shared)}:\n{done.stdout}"
    assert len(workers["test_own_group"]) == 1
    # On their worker the shared-stack modules run one after another, never interleaved.
    order = [module for worker, module, _ in ran if worker in shared and module.startswith("test_stack_")]
    changes = sum(1 for before, after in itertools.pairwise(order) if before != after)
    assert changes == 2, order
