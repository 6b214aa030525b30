"""Every benchmark script imports: benches are not run by `make test`, so a moved module (the
tiers' move to folders broke benchmarks/faults.py's imports unnoticed) must fail here instead."""

from __future__ import annotations

import importlib.util

import pytest

from leakwatch.core.paths import REPO_ROOT

SCRIPTS = sorted((REPO_ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_benchmark_script_imports(script):
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "main", None)), f"{script.name} has no main()"
