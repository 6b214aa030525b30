"""scripts/gpu/check_kv_capacity.py against the real (CPU) vLLM of the shared native stack: the
planner's KV tokens for the demo profile match what vLLM allocated, and the script says so."""

from __future__ import annotations

import subprocess
import sys

import requests

from leakwatch.capacity import planner
from leakwatch.core import profiles
from leakwatch.core.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu" / "check_kv_capacity.py"


def test_planner_matches_vllm_for_the_running_demo(native_stack):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import check_kv_capacity
    finally:
        sys.path.pop(0)
    metrics = requests.get(f"{native_stack.vllm_url}/metrics", timeout=30).text
    assert check_kv_capacity.kv_tokens_from_metrics(metrics) == planner.plan(profiles.load("demo")).kv_tokens

    result = subprocess.run(
        [sys.executable, str(SCRIPT), "demo", "--url", native_stack.vllm_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok   demo: KV tokens vLLM") and "= 1.000" in result.stdout


def test_a_drifted_plan_is_reported(native_stack, tmp_path):
    """Pretend the profile promised twice the KV space: the script must fail, naming the ratio."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import check_kv_capacity as c; "
        "from leakwatch.capacity import planner; real = planner.plan; "
        "planner.plan = lambda p: __import__('dataclasses').replace(real(p), kv_tokens=2 * real(p).kv_tokens); "
        "raise SystemExit(c.main(['demo', '--url', sys.argv[2]]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(SCRIPT.parent), native_stack.vllm_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith("OFF  demo:") and "= 0.500" in result.stdout
