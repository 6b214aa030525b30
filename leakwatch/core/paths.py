"""Where things live: the repository's own files and the runtime state of a native stack."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "config"
PROFILES_DIR = REPO_ROOT / "serving" / "profiles"
PROMETHEUS_DIR = REPO_ROOT / "prometheus"
RULES_DIR = PROMETHEUS_DIR / "rules"
ALERTMANAGER_DIR = REPO_ROOT / "alertmanager"
GRAFANA_DIR = REPO_ROOT / "grafana"
# The compose stack's secret files (compose.yaml names them relative to the repository; git-ignored).
COMPOSE_SECRETS_DIR = REPO_ROOT / "secrets"


# The state folder's variable, and where it is without one (git-ignored).
STATE_DIR_ENV = "LEAKWATCH_STATE_DIR"
DEFAULT_STATE_DIR = REPO_ROOT / ".stack"


def state_dir() -> Path:
    """Runtime files of the native stack (configs, data, logs, demo model); never committed.

    LEAKWATCH_STATE_DIR lets tests and parallel checkouts run separate stacks side by side.
    """
    return Path(os.environ.get(STATE_DIR_ENV, DEFAULT_STATE_DIR)).resolve()
