"""Grafana dashboards as code: one Python module per dashboard, rendered to grafana/dashboards/*.json.

The dashboards are built with grafana-foundation-sdk's types for Grafana 11.6 (the version compose
runs), and every generated file is loaded back through the same types (`validate`), so a field that
Grafana 11.6 does not know, a wrong type, a duplicate panel id or overlapping panels fail the tests.
`leakwatch generate` writes the JSON and the provisioning files; `--check` fails when they are stale.
"""

from __future__ import annotations

# The dashboards, in the order Grafana's folder lists them.
MODULES = ("memory", "serving", "gpu", "loadtest")


def boards():
    """Every dashboard's `Board` (imports grafana-foundation-sdk)."""
    import importlib

    return [importlib.import_module(f"{__name__}.{name}").BOARD for name in MODULES]
