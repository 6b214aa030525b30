"""Renders and lints the chart with the real Helm engine (helm-python-sdk: Helm's Go SDK as a shared
library), offline: no cluster is contacted, so `lookup` returns nothing."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..core.errors import LeakwatchError
from .chart_files import CHART_DIR


def values_files() -> list[Path]:
    """The per-profile values files the chart ships."""
    return sorted(CHART_DIR.glob("values-*.yaml"))


def merge(*layers: dict) -> dict:
    """Helm's -f layering: later maps win key by key, everything else is replaced."""
    out: dict = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = value
    return out


def load_values(*files: Path, overrides: dict | None = None) -> dict:
    layers = [yaml.safe_load(Path(f).read_text()) or {} for f in files]
    return merge(*layers, overrides or {})


def render(
    values: dict, release: str = "leakwatch", namespace: str = "leakwatch", chart_dir: Path = CHART_DIR
) -> list[dict]:
    """Every object the chart renders for these values (schema-validated by Helm first)."""
    import helm_python as helm

    with helm.Chart.load(str(chart_dir)) as chart:
        try:
            chart.validate_schema(values)
            manifests = chart.render(values, name=release, namespace=namespace, is_install=True)
        except helm.HelmError as exc:
            raise LeakwatchError(f"helm: {exc}") from None
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return objects


def lint(values: dict, kube_version: str, chart_dir: Path = CHART_DIR) -> list[str]:
    """Helm's lint findings at warning or error severity, strict (warnings count)."""
    import helm_python as helm

    report = helm.lint(str(chart_dir), values, strict=True, namespace="leakwatch", kube_version=kube_version)
    findings = [f"{m.get('path')}: {m.get('error')}" for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    return findings + [str(e) for e in report.get("errors") or []]
