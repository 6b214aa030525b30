"""Every benchmark module imports, and each entry point has a main(): benches are not run by
`make test`, so a moved module (the tiers' move to folders broke benchmarks/faults.py's imports
unnoticed) must fail here instead."""

from __future__ import annotations

import importlib

import pytest

from leakwatch.core.paths import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"
MODULES = sorted(
    ".".join(p.relative_to(REPO_ROOT).with_suffix("").parts)
    for p in BENCHMARKS.rglob("*.py")
    if p.name != "__init__.py"
)
# What the Makefile's bench targets run: a script per benchmark, and the load generator's comparison.
ENTRY_POINTS = [m for m in MODULES if m.count(".") == 1] + ["benchmarks.loadgen.compare"]


@pytest.mark.parametrize("name", MODULES)
def test_the_benchmark_module_imports(name):
    module = importlib.import_module(name)
    if name in ENTRY_POINTS:
        assert callable(getattr(module, "main", None)), f"{name} has no main()"


def test_every_bench_target_runs_an_entry_point():
    makefile = (REPO_ROOT / "Makefile").read_text()
    for name in ENTRY_POINTS:
        assert name in makefile or f"{name.replace('.', '/')}.py" in makefile, name
