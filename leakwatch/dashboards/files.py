"""The Grafana files `leakwatch generate` writes: one JSON per dashboard and the provisioning YAML."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..core import yamlfmt
from ..core.paths import GRAFANA_DIR, REPO_ROOT
from . import boards, provisioning, reference

DASHBOARDS_DIR = GRAFANA_DIR / "dashboards"
PROVISIONING_DIR = GRAFANA_DIR / "provisioning"
DATASOURCES_FILE = PROVISIONING_DIR / "datasources" / "leakwatch.yml"
PROVIDER_FILE = PROVISIONING_DIR / "dashboards" / "leakwatch.yml"
REFERENCE_FILE = REPO_ROOT / "docs" / "dashboards-reference.md"


def generated_files() -> dict[Path, Callable[[], str]]:
    from .board import render

    files: dict[Path, Callable[[], str]] = {
        DATASOURCES_FILE: lambda: yamlfmt.dump(
            provisioning.datasources(),
            provisioning.HEADER.format(
                what="Grafana data sources; the dashboards default to the Prometheus uid below."
            ),
        ),
        PROVIDER_FILE: lambda: yamlfmt.dump(
            provisioning.dashboard_provider(),
            provisioning.HEADER.format(
                what="Loads grafana/dashboards/*.json (mounted by compose.yaml) into the leakwatch folder."
            ),
        ),
    }
    for board in boards():
        files[DASHBOARDS_DIR / board.file_name] = lambda b=board: render(b)
    files[REFERENCE_FILE] = reference.render
    return files
