"""Is vLLM leaking? Fits memory against requests served and against time for every vLLM process role
and GPU in a window and prints bytes per request, growth per hour and time to exhaustion.

Exit codes (a CI gate after a soak run): 0 NO-LEAK, 1 LEAK, 3 INCONCLUSIVE, 2 error.
The decision rule and its thresholds: config/leak_check.yaml and docs/leak-check.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..errors import LeakwatchError
from ..promapi import Prometheus
from ..settings import load as load_settings
from . import config as check_config
from .analysis import CheckResult, analyse, format_hours, human_bytes
from .collect import choose_step, collect
from .window import iso, parse_duration, resolve


def default_prometheus_url() -> str:
    return (
        os.environ.get("LEAKWATCH_PROMETHEUS_URL") or f"http://127.0.0.1:{load_settings().service('prometheus').port}"
    )


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments `check` and `report` share: where Prometheus is, thresholds, time compression."""
    parser.add_argument(
        "--prometheus",
        default=None,
        metavar="URL",
        help="Prometheus base URL (default: $LEAKWATCH_PROMETHEUS_URL or the stack's own)",
    )
    parser.add_argument(
        "--step",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="query resolution (default: the scrape interval, coarser for long windows)",
    )
    parser.add_argument(
        "--time-compression",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="time compression of a drill, as for Locust: production seconds per wall-clock second (default 1)",
    )
    parser.add_argument(
        "--config",
        default=str(check_config.CONFIG_FILE),
        metavar="FILE",
        help="thresholds file (default config/leak_check.yaml)",
    )
    parser.add_argument(
        "--min-bytes-per-request",
        type=float,
        default=None,
        metavar="BYTES",
        help="override verdict.min_bytes_per_request",
    )
    parser.add_argument(
        "--min-growth-per-hour",
        type=float,
        default=None,
        metavar="BYTES",
        help="override verdict.min_growth_bytes_per_hour",
    )
    parser.add_argument(
        "--warmup",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="override warmup.seconds (used where the exporter's baseline is absent)",
    )
    parser.add_argument("--warmup-requests", type=float, default=None, metavar="N", help="override warmup.requests")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_window_arguments(parser)
    parser.add_argument("--window", default=None, metavar="DURATION", help="length of the window (default 2h)")
    parser.add_argument("--start", default=None, metavar="TIME", help="window start (unix seconds or ISO 8601)")
    parser.add_argument("--end", default=None, metavar="TIME", help="window end (default: now)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")


def run_check(args: argparse.Namespace, start: float, end: float) -> CheckResult:
    """The one code path `check` and `report` compute their numbers with."""
    if not (args.time_compression > 0 and math.isfinite(args.time_compression)):
        raise LeakwatchError(f"--time-compression must be a positive number, not {args.time_compression}")
    cfg = check_config.load(args.config).with_overrides(
        min_bytes_per_request=args.min_bytes_per_request,
        min_growth_bytes_per_hour=args.min_growth_per_hour,
        warmup_seconds=args.warmup,
        warmup_requests=args.warmup_requests,
    )
    prom = Prometheus(args.prometheus or default_prometheus_url())
    scrape = parse_duration(load_settings().prometheus["scrape_interval"])
    step = args.step or choose_step(start, end, scrape, cfg.max_points)
    timeline, series = collect(prom, start, end, step)
    return analyse(timeline, series, cfg, start=start, end=end, step=step, time_compression=args.time_compression)


def _interval(iv, unit: str = "") -> str:
    if iv.estimate is None or not math.isfinite(iv.estimate):
        return "n/a"
    return f"{human_bytes(iv.estimate)}{unit} [{human_bytes(iv.low)} .. {human_bytes(iv.high)}]"


def format_text(result: CheckResult) -> str:
    conf = int(round(result.config.confidence * 100))
    lines = [
        f"leakwatch check: {result.verdict}",
        f"window {iso(result.start)} .. {iso(result.end)}, step {result.step:g}s, "
        f"{result.segments.restarts} restart(s), time compression {result.time_compression:g}",
        "",
        f"{'series':<28} {'verdict':<13} {'bytes/request (' + str(conf) + '% CI)':<36} "
        f"{'growth/hour (' + str(conf) + '% CI)':<36} {'now':>9} {'exhausted in':>13}",
    ]
    for r in result.series:
        hours = format_hours(r.hours_to_exhaustion)
        now = "-" if r.current_bytes is None else human_bytes(r.current_bytes)
        lines.append(
            f"{r.series.key:<28} {r.verdict:<13} {_interval(r.bytes_per_request):<36} "
            f"{_interval(r.growth_per_hour, '/h'):<36} {now:>9} {hours:>13}"
        )
        lines.append(f"{'':<28} {r.reason}  ({r.points} points, {r.requests_served:.0f} requests; {r.series.source})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    start, end = resolve(args.start, args.end, args.window)
    result = run_check(args, start, end)
    if args.json:
        json.dump(result.as_dict(), sys.stdout, indent=1)
        print()
    else:
        print(format_text(result))
    return result.exit_code
