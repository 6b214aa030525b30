"""The small vocabulary the dashboard modules are written in, rendered with grafana-foundation-sdk.

A dashboard module describes a `Board` of `Row`s of `Panel`s, each panel a few `Query`s with a unit,
a description that says what healthy looks like, and thresholds. `render()` turns it into Grafana
11.6 dashboard JSON through the SDK's builders; panel ids and grid positions are assigned here, so
the modules never hand-place anything.

`Panel.gpu` marks panels whose series exist only on a GPU host (DCGM, or the exporter's NVML
series); it is the one list the end-to-end test excludes on CPU-only machines, and a test checks it
against the metric names each panel uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..core.errors import LeakwatchError

try:
    from grafana_foundation_sdk.builders import (
        common as common_builders,
        dashboard as dashboard_builders,
        prometheus,
        stat,
        timeseries,
    )
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common, dashboard as model
except ImportError:  # the SDK is a development dependency: only generation and tests need it
    raise LeakwatchError(
        "grafana-foundation-sdk is not installed; it builds and validates the dashboards. "
        "Run `make setup-dev` (or: pip install -e '.[dev]')"
    ) from None

from .levels import OK
from .provisioning import DATASOURCE_NAME, DATASOURCE_TYPE, DATASOURCE_UID

GRID_WIDTH = 24
# Every panel and annotation queries the data source chosen in the `datasource` variable, whose
# default is the provisioned Prometheus; importing into another Grafana then just works.
DATASOURCE = model.DataSourceRef(type_val=DATASOURCE_TYPE, uid="${datasource}")

# Grafana has no tokens-per-second unit: a custom suffix.
TOKENS_PER_S = "suffix: tok/s"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    # Per-series display, for panels that put two units side by side (request rate and memory).
    unit: str | None = None
    right_axis: bool = False
    # Reference lines such as the post-warm-up baseline are drawn dashed.
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # or "stat"
    # Steps above the base colour: ((value, colour), ...), ascending. Empty: a neutral base only
    # (rates and counts have no "bad" level of their own).
    thresholds: tuple[tuple[float, str], ...] = ()
    base_colour: str = OK
    gpu: bool = False
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    decimals: int | None = None
    # ((from, to, text), ...): range value mappings, e.g. "not growing" for a capped forecast.
    ranges: tuple[tuple[float, float, str], ...] = ()
    stacked: bool = False
    # Shown instead of "No data" where an empty panel is a normal state, not a fault.
    no_value: str | None = None
    # Set on panels whose series only exist after an event (e.g. a burst of requests that raised
    # memory, then idle): what has to happen first. The end-to-end test accepts them empty only while
    # Prometheus has never seen their series.
    event: str | None = None


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A query variable listing the values of `label` on the series `selector` selects."""

    name: str
    label: str
    selector: str
    label_name: str
    description: str

    @property
    def query(self) -> str:
        return f"label_values({self.selector}, {self.label_name})"


@dataclass(frozen=True)
class Annotation:
    """Events from a Prometheus query (e.g. firing alerts) drawn on every time series panel."""

    name: str
    expr: str
    title_format: str
    text_format: str
    tag_keys: str
    colour: str
    step: str = "60s"


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    source: str  # the module file, named in the generated JSON
    time_from: str
    refresh: str
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    annotations: tuple[Annotation, ...] = ()
    tags: tuple[str, ...] = field(default=("leakwatch",))

    @property
    def file_name(self) -> str:
        return f"{self.uid}.json"

    def panels(self) -> list[Panel]:
        return [panel for row in self.rows for panel in row.panels]

    def queries(self):
        """(where, expr) for every PromQL the dashboard sends: panels, annotations, variables."""
        for panel in self.panels():
            for query in panel.queries:
                yield f"{self.uid} / {panel.title}", query.expr
        for annotation in self.annotations:
            yield f"{self.uid} / annotation {annotation.name}", annotation.expr
        for var in self.variables:
            yield f"{self.uid} / variable {var.name}", var.selector


GENERATED_NOTE = "GENERATED by `leakwatch generate` from {source} - edit that file, not this JSON."

# Keys Grafana's Prometheus data source reads from an annotation query that the SDK's typed
# AnnotationQuery does not model (grafana-prometheus annotations.ts: prepareAnnotation and
# processEvents). `validate` accepts exactly these extra keys on Prometheus annotations.
PROMETHEUS_ANNOTATION_KEYS = ("step", "titleFormat", "textFormat", "tagKeys", "useValueForTime")


def _thresholds(panel: Panel) -> dashboard_builders.ThresholdsConfig:
    steps = [model.Threshold(value=None, color=panel.base_colour)]
    steps += [model.Threshold(value=value, color=colour) for value, colour in panel.thresholds]
    return dashboard_builders.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)


def _target(query: Query, ref_id: str) -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .expr(query.expr)
        .legend_format(query.legend or "__auto")
        .ref_id(ref_id)
        .range()
        .datasource(DATASOURCE)
    )


def _ref_id(index: int) -> str:
    return chr(ord("A") + index)


def _common(builder, panel: Panel, panel_id: int, pos: model.GridPos):
    builder = (
        builder.id(panel_id)
        .title(panel.title)
        .description(panel.description)
        .datasource(DATASOURCE)
        .grid_pos(pos)
        .unit(panel.unit)
        .thresholds(_thresholds(panel))
    )
    for index, query in enumerate(panel.queries):
        builder = builder.with_target(_target(query, _ref_id(index)))
    if panel.min is not None:
        builder = builder.min(panel.min)
    if panel.max is not None:
        builder = builder.max(panel.max)
    if panel.decimals is not None:
        builder = builder.decimals(panel.decimals)
    if panel.no_value or panel.event:
        builder = builder.no_value(panel.no_value or "not measured yet")
    if panel.ranges:
        builder = builder.mappings(
            [
                model.RangeMap(
                    options=model.DashboardRangeMapOptions(
                        from_val=low, to=high, result=model.ValueMappingResult(text=text)
                    )
                )
                for low, high, text in panel.ranges
            ]
        )
    return builder


def _timeseries(panel: Panel, panel_id: int, pos: model.GridPos) -> timeseries.Panel:
    builder = _common(timeseries.Panel(), panel, panel_id, pos)
    builder = (
        builder.line_width(1)
        .fill_opacity(0 if not panel.stacked else 25)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)
        )
    )
    if panel.thresholds:
        builder = builder.thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)
        )
    if panel.stacked:
        builder = builder.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL))
    for index, query in enumerate(panel.queries):
        props = []
        if query.unit:
            props.append(model.DynamicConfigValue(id_val="unit", value=query.unit))
        if query.right_axis:
            props.append(model.DynamicConfigValue(id_val="custom.axisPlacement", value="right"))
        if query.dashed:
            props.append(model.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}))
        if props:
            builder = builder.override_by_query(_ref_id(index), props)
    return builder


def _stat(panel: Panel, panel_id: int, pos: model.GridPos) -> stat.Panel:
    builder = _common(stat.Panel(), panel, panel_id, pos)
    return (
        builder.reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE if not panel.thresholds else common.BigValueColorMode.BACKGROUND)
        .text_mode(common.BigValueTextMode.AUTO)
        .justify_mode(common.BigValueJustifyMode.AUTO)
        .orientation(common.VizOrientation.AUTO)
    )


PANEL_KINDS = {"timeseries": _timeseries, "stat": _stat}


def _variables(board: Board) -> list:
    variables = [
        dashboard_builders.DatasourceVariable("datasource")
        .label("Data source")
        .description("The Prometheus that scrapes the stack; the provisioned one by default.")
        .type(DATASOURCE_TYPE)
        .current(model.VariableOption(text=DATASOURCE_NAME, value=DATASOURCE_UID, selected=True))
    ]
    for var in board.variables:
        variables.append(
            dashboard_builders.QueryVariable(var.name)
            .label(var.label)
            .description(var.description)
            .datasource(DATASOURCE)
            .query(var.query)
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.NATURAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(model.VariableOption(text=["All"], value=["$__all"], selected=True))
        )
    return variables


def _annotation(annotation: Annotation) -> dashboard_builders.AnnotationQuery:
    return (
        dashboard_builders.AnnotationQuery()
        .name(annotation.name)
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color(annotation.colour)
        .expr(annotation.expr)
    )


def layout(board: Board) -> list[tuple[object, model.GridPos]]:
    """(row or panel, grid position) in order: rows full width, panels flowing left to right."""
    placed: list[tuple[object, model.GridPos]] = []
    y = 0
    for row in board.rows:
        placed.append((row, model.GridPos(x=0, y=y, w=GRID_WIDTH, h=1)))
        y += 1
        x, line_height = 0, 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            placed.append((panel, model.GridPos(x=x, y=y, w=panel.width, h=panel.height)))
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return placed


def build(board: Board) -> model.Dashboard:
    dash = (
        dashboard_builders.Dashboard(board.title)
        .uid(board.uid)
        .description(board.description + "\n\n" + GENERATED_NOTE.format(source=board.source))
        .tags(list(board.tags))
        .time(board.time_from, "now")
        .refresh(board.refresh)
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .variables(_variables(board))
        .annotations([_annotation(a) for a in board.annotations])
        .link(
            dashboard_builders.DashboardLink("leakwatch dashboards")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags(["leakwatch"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for panel_id, (item, pos) in enumerate(layout(board), start=1):
        if isinstance(item, Row):
            dash = dash.with_row(dashboard_builders.Row(item.title).id(panel_id).grid_pos(pos).collapsed(False))
        else:
            dash = dash.with_panel(PANEL_KINDS[item.kind](item, panel_id, pos))
    return dash.build()


def to_document(board: Board) -> dict:
    """The dashboard as plain JSON data, with the Prometheus annotation fields the SDK lacks."""
    document = json.loads(json.dumps(build(board), cls=JSONEncoder))
    for entry, annotation in zip(document["annotations"]["list"], board.annotations):
        entry.update(
            {
                "step": annotation.step,
                "titleFormat": annotation.title_format,
                "textFormat": annotation.text_format,
                "tagKeys": annotation.tag_keys,
                "useValueForTime": False,
            }
        )
    return document


def render(board: Board) -> str:
    return json.dumps(to_document(board), indent=2) + "\n"
