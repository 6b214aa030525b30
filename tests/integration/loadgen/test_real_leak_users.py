"""loadtest/_real_leaks.py: one Locust user class per trigger of config/vllm_leaks.yaml, run by name,
and never part of `locust -f loadtest/` (a production load test must not send leak triggers)."""

from __future__ import annotations

import json
import subprocess
import sys

from leakwatch.core.paths import REPO_ROOT
from leakwatch.realleaks import catalogue

LOCUST = [sys.executable, "-m", "locust"]


def listed_users(locustfile: str) -> list[str]:
    proc = subprocess.run(
        [*LOCUST, "-f", locustfile, "--list"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("Available Users:", 1)[1].split()


def test_the_folder_runs_the_workloads_only():
    assert sorted(listed_users("loadtest/")) == ["CodeAssistanceUser", "CreativeWritingUser"]


# The locustfile read as Locust reads it (gevent patches first), in a child: each class's trigger.
TRIGGERS_OF = (
    "import json, runpy, locust; ns = runpy.run_path('loadtest/_real_leaks.py');"
    "print(json.dumps({k: getattr(v, 'trigger', None) for k, v in ns.items() if isinstance(v, type)}))"
)


def test_every_trigger_has_a_user_class_sending_its_requests():
    proc = subprocess.run(
        [sys.executable, "-c", TRIGGERS_OF], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    classes = json.loads(proc.stdout.strip().splitlines()[-1])
    users = listed_users("loadtest/_real_leaks.py")
    by_trigger = {classes[name]: name for name in users}
    assert set(by_trigger) == set(catalogue.TRIGGERS)
    assert len(users) == len(catalogue.TRIGGERS)
