"""A daily or weekly memory report as one self-contained HTML file: memory trend with the fitted
slope, request rate against memory, per-role breakdown, alert timeline and the leak verdict.

Its numbers come from the same code as `leakwatch check` for the same window.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import LeakwatchError
from ..core.promapi import Prometheus
from ..leakcheck.command import (
    add_compare_arguments,
    add_window_arguments,
    default_prometheus_url,
    run_check,
    run_compare,
)
from ..leakcheck.window import iso, resolve

PERIODS = {"day": "1d", "week": "1w"}
FIRING = 'ALERTS{alertstate="firing"}'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_window_arguments(parser)
    parser.add_argument("--period", choices=sorted(PERIODS), default="day", help="report length (default day)")
    parser.add_argument("--end", default=None, metavar="TIME", help="end of the period (default: now)")
    parser.add_argument("--out", default="out", metavar="DIR", help="folder for the HTML file (default ./out)")
    # With --compare the page is the stable side's report plus the canary comparison (docs/canary.md).
    add_compare_arguments(parser)


def firing_intervals(prom: Prometheus, start: float, end: float, step: float) -> dict[str, list[tuple[float, float]]]:
    """alertname -> [(from, to)] when Prometheus's ALERTS series said it was firing."""
    out: dict[str, list[tuple[float, float]]] = {}
    for item in prom.query_range(FIRING, start, end, step):
        name = item["metric"].get("alertname", "?")
        spans = out.setdefault(name, [])
        for t, _ in item["values"]:
            t = float(t)
            if spans and t - spans[-1][1] <= 1.5 * step:
                spans[-1] = (spans[-1][0], t)
            else:
                spans.append((t, t))
    for spans in out.values():
        spans.sort()
    return out


def run(args: argparse.Namespace) -> int:
    try:
        from . import plots
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise LeakwatchError(
            "leakwatch report needs matplotlib: pip install 'leakwatch[report]' (make setup does)"
        ) from None
    from .page import render

    start, end = resolve(None, args.end, PERIODS[args.period])
    comparison = run_compare(args, start, end) if args.compare else None
    result = comparison.stable if comparison is not None else run_check(args, start, end)
    url = args.prometheus or default_prometheus_url()
    alerts = firing_intervals(Prometheus(url), start, end, result.step)

    figures = [
        (
            "memory-trend",
            "Memory per series over the period: every sample (grey), the samples after "
            "warm-up (blue) and the fitted bytes-per-request slope (red/green); dashed lines mark restarts "
            "and gaps.",
            plots.memory_trend(result),
        )
    ]
    analysed = [r for r in result.series if r.points]
    if analysed:
        primary = max(analysed, key=lambda r: (r.verdict == "LEAK", r.bytes_per_request.estimate or 0))
        figures.append(
            (
                "requests-vs-memory",
                f"Request rate against memory, and {primary.series.key} against "
                "requests served: a leak is a straight line in the lower plot.",
                plots.requests_vs_memory(result, primary),
            )
        )
    figures.append(
        (
            "breakdown",
            "Per-role breakdown: which vLLM process (API server, EngineCore, workers) or GPU holds the memory.",
            plots.breakdown(result),
        )
    )
    figures.append(("alerts", "Alert timeline: when each alert was firing.", plots.alert_timeline(result, alerts)))

    title = f"leakwatch {'daily' if args.period == 'day' else 'weekly'} memory report"
    html = render(result, figures, title=title, prometheus_url=url, comparison=comparison)
    out_dir = Path(args.out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"leakwatch-report-{args.period}-{iso(end).replace(':', '')}.html"
        path.write_text(html)
    except OSError as exc:
        raise LeakwatchError(f"cannot write the report into {out_dir}: {exc}") from None
    compared = "" if comparison is None else f" (canary {comparison.verdict} than stable)"
    print(f"{result.verdict}{compared}: report written to {path}")
    return 0
