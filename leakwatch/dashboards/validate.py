"""Load dashboard JSON back through grafana-foundation-sdk's Grafana 11.6 types and report problems.

Grafana itself cannot run here, so a dashboard is held to the typed model the SDK generates from
Grafana 11.6's schema:

- decoding and re-encoding must give the same JSON back: a key the model does not know is dropped
  by the decoder, so it shows up as a difference (except the few Prometheus annotation keys that
  Grafana's Prometheus data source reads and the SDK does not model, kit.PROMETHEUS_ANNOTATION_KEYS);
- every decoded value must have the type its field declares (str, int, enums, nested models, ...);
- panels of the types we use must decode into their typed options, and queries into Prometheus
  queries (an unknown query type would be kept as an untyped bag);
- plus what the schema cannot say: the declared schemaVersion, uid format, unique panel ids and
  titles, panels inside the 24-column grid without overlaps, units Grafana knows, a description
  and thresholds on every panel, and every query on the dashboard's data source variable.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from pathlib import Path

from grafana_foundation_sdk.cog import plugins, runtime as cog_runtime
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model, prometheus as prometheus_model, units as units_model

from .board import DATASOURCE, GRID_WIDTH, PANEL_KINDS, PROMETHEUS_ANNOTATION_KEYS
from .provisioning import DATASOURCE_TYPE

# The schema version the SDK's Grafana 11.6 model writes and expects.
SCHEMA_VERSION = model.Dashboard().schema_version
UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
GRAFANA_UNITS = {
    value for name, value in vars(units_model).items() if not name.startswith("_") and isinstance(value, str)
}
# Grafana's custom units: `suffix:<text>`, `prefix:<text>`, `si:<unit>`, `count:<unit>`, `time:<format>`.
CUSTOM_UNIT = re.compile(r"^(suffix|prefix|si|count|time|currency):.+")

plugins.register_default_plugins()


def _sdk_class(value) -> bool:
    return type(value).__module__.startswith("grafana_foundation_sdk.models")


def _hints(cls) -> dict:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a hint the SDK cannot resolve: fall back to the raw annotations
        return dict(getattr(cls, "__annotations__", {}))


def type_problems(value, hint, path: str) -> list[str]:
    """Where `value` (a decoded SDK object tree) does not match the declared types."""
    if hint in (typing.Any, object) or hint is None:
        return type_problems(value, type(value), path) if _sdk_class(value) else []
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        attempts = [type_problems(value, arg, path) for arg in args if arg is not type(None)]
        return [] if any(not found for found in attempts) else min(attempts, key=len)
    if origin is typing.Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {type(value).__name__}"]
        return [
            p for i, item in enumerate(value) for p in type_problems(item, args[0] if args else object, f"{path}[{i}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {type(value).__name__}"]
        return [
            p for key, item in value.items() for p in type_problems(item, args[1] if args else object, f"{path}.{key}")
        ]
    if not isinstance(hint, type):
        return []
    if issubclass(hint, enum.Enum):
        allowed = {member.value for member in hint}
        return (
            []
            if (value in allowed or isinstance(value, hint))
            else [f"{path}: {value!r} is not a {hint.__name__} ({sorted(allowed)})"]
        )
    if hint is bool:
        return [] if isinstance(value, bool) else [f"{path}: expected a boolean, got {value!r}"]
    if hint is int:
        return (
            []
            if isinstance(value, int) and not isinstance(value, bool)
            else [f"{path}: expected an integer, got {value!r}"]
        )
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected a number, got {value!r}"]
    if hint is str:
        return [] if isinstance(value, str) else [f"{path}: expected a string, got {value!r}"]
    if not isinstance(value, hint):
        return [f"{path}: expected {hint.__name__}, got {type(value).__name__}"]
    if isinstance(value, cog_runtime.UnknownDataquery):
        return [f"{path}: query of unknown data source type (kept untyped)"]
    if not _sdk_class(value):
        return []
    problems = []
    for name, field_hint in _hints(type(value)).items():
        problems += type_problems(getattr(value, name, None), field_hint, f"{path}.{name}")
    return problems


def _round_trip_problems(original, decoded, path: str, allowed_extra: set[str]) -> list[str]:
    if isinstance(original, dict):
        if not isinstance(decoded, dict):
            return [f"{path}: decoded as {type(decoded).__name__}"]
        problems = []
        for key, value in original.items():
            here = f"{path}.{key}"
            if key not in decoded:
                if here not in allowed_extra:
                    problems.append(f"{here}: not a field of Grafana 11.6's model (dropped when decoded)")
                continue
            problems += _round_trip_problems(value, decoded[key], here, allowed_extra)
        return problems
    if isinstance(original, list):
        if not isinstance(decoded, list) or len(decoded) != len(original):
            return [f"{path}: list changed when decoded"]
        return [
            p
            for i, (a, b) in enumerate(zip(original, decoded))
            for p in _round_trip_problems(a, b, f"{path}[{i}]", allowed_extra)
        ]
    if original != decoded or (
        type(original) is not type(decoded)
        and not (isinstance(original, (int, float)) and isinstance(decoded, (int, float)))
    ):
        return [f"{path}: {original!r} decoded as {decoded!r}"]
    return []


def _overlaps(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
    )


def _unit_problem(unit, where: str) -> list[str]:
    if not isinstance(unit, str) or not unit:
        return [f"{where}: no unit"]
    if unit in GRAFANA_UNITS or CUSTOM_UNIT.match(unit):
        return []
    return [f"{where}: unit {unit!r} is not one Grafana knows"]


def _datasource_problem(ref, where: str) -> list[str]:
    want = {"type": DATASOURCE.type_val, "uid": DATASOURCE.uid}
    return [] if ref == want else [f"{where}: data source {ref!r}, want {want}"]


def panel_problems(document: dict) -> list[str]:
    """What the schema cannot express: ids, titles, grid, units, thresholds, descriptions, data source."""
    problems = []
    panels = document.get("panels", [])
    ids = [p.get("id") for p in panels]
    problems += [f"panel id {i} is used more than once" for i in sorted({i for i in ids if ids.count(i) > 1})]
    titles = [p.get("title") for p in panels if p.get("type") != "row"]
    problems += [
        f"panel title {t!r} is used more than once" for t in sorted({t for t in titles if titles.count(t) > 1})
    ]
    for panel in panels:
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        pos = panel.get("gridPos") or {}
        if not all(isinstance(pos.get(k), int) for k in ("x", "y", "w", "h")):
            problems.append(f"{where}: incomplete gridPos {pos}")
            continue
        if pos["x"] < 0 or pos["y"] < 0 or pos["w"] < 1 or pos["h"] < 1 or pos["x"] + pos["w"] > GRID_WIDTH:
            problems.append(f"{where}: gridPos {pos} is outside the {GRID_WIDTH}-column grid")
        if panel.get("type") == "row":
            if panel.get("panels"):
                problems.append(f"{where}: an expanded row must not hold panels")
            continue
        if panel.get("type") not in PANEL_KINDS:
            problems.append(f"{where}: panel type {panel.get('type')!r} is not one the builder makes")
        if not (panel.get("description") or "").strip():
            problems.append(f"{where}: no description")
        defaults = (panel.get("fieldConfig") or {}).get("defaults") or {}
        problems += _unit_problem(defaults.get("unit"), where)
        for override in (panel.get("fieldConfig") or {}).get("overrides") or []:
            for prop in override.get("properties", []):
                if prop.get("id") == "unit":
                    problems += _unit_problem(prop.get("value"), f"{where} override")
        steps = (defaults.get("thresholds") or {}).get("steps") or []
        if not steps or steps[0].get("value") is not None:
            problems.append(f"{where}: thresholds need a base step (value null)")
        values = [s["value"] for s in steps[1:]]
        if values != sorted(values):
            problems.append(f"{where}: threshold steps are not ascending: {values}")
        problems += _datasource_problem(panel.get("datasource"), where)
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no queries")
        ref_ids = [t.get("refId") for t in targets]
        if len(set(ref_ids)) != len(ref_ids):
            problems.append(f"{where}: duplicate refIds {ref_ids}")
        for target in targets:
            if not (target.get("expr") or "").strip():
                problems.append(f"{where}: query {target.get('refId')} has no expression")
            problems += _datasource_problem(target.get("datasource"), f"{where} query {target.get('refId')}")
    for i, a in enumerate(panels):
        for b in panels[i + 1 :]:
            if all(isinstance((p.get("gridPos") or {}).get(k), int) for p in (a, b) for k in "xywh") and _overlaps(
                a["gridPos"], b["gridPos"]
            ):
                problems.append(f"panels {a.get('id')} {a.get('title')!r} and {b.get('id')} {b.get('title')!r} overlap")
    return problems


def dashboard_problems(document: dict) -> list[str]:
    """Every problem found in one dashboard's JSON (empty when it is valid)."""
    problems = []
    if document.get("schemaVersion") != SCHEMA_VERSION:
        problems.append(f"schemaVersion {document.get('schemaVersion')!r}, want {SCHEMA_VERSION} (Grafana 11.6)")
    if not UID.match(str(document.get("uid", ""))):
        problems.append(f"uid {document.get('uid')!r} must be 1-40 letters, digits, '-' or '_'")
    decoded = model.Dashboard.from_json(document)
    encoded = json.loads(json.dumps(decoded, cls=JSONEncoder))
    allowed = {
        f"$.annotations.list[{i}].{key}"
        for i, entry in enumerate((document.get("annotations") or {}).get("list", []))
        if (entry.get("datasource") or {}).get("type") == DATASOURCE_TYPE
        for key in PROMETHEUS_ANNOTATION_KEYS
    }
    problems += _round_trip_problems(document, encoded, "$", allowed)
    problems += type_problems(decoded, model.Dashboard, "$")
    for i, panel in enumerate(decoded.panels or []):
        if isinstance(panel, model.Panel) and panel.type_val in PANEL_KINDS and isinstance(panel.options, dict):
            problems.append(f"$.panels[{i}].options: not decoded into {panel.type_val}'s typed options")
        for j, target in enumerate(getattr(panel, "targets", None) or []):
            if not isinstance(target, prometheus_model.Dataquery):
                problems.append(f"$.panels[{i}].targets[{j}]: not a Prometheus query")
    problems += panel_problems(document)
    for var in (document.get("templating") or {}).get("list", []):
        if var.get("type") == "query":
            problems += _datasource_problem(var.get("datasource"), f"variable {var.get('name')}")
    for entry in (document.get("annotations") or {}).get("list", []):
        problems += _datasource_problem(entry.get("datasource"), f"annotation {entry.get('name')!r}")
    return problems


def file_problems(path: Path) -> list[str]:
    try:
        document = json.loads(path.read_text())
    except ValueError as exc:
        return [f"{path.name}: not JSON: {exc}"]
    return [f"{path.name}: {p}" for p in dashboard_problems(document)]
