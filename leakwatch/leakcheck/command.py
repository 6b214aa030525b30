"""Is vLLM leaking? Fits memory against requests served and against time for every vLLM process role
and GPU in a window and prints bytes per request, growth per hour and time to exhaustion.

Exit codes (a CI gate after a soak run): 0 NO-LEAK, 1 LEAK, 3 INCONCLUSIVE, 2 error.
With --compare STABLE CANARY, two deployments side by side (leakcheck/compare.py): 0 the canary leaks
LESS or the SAME, 1 MORE, 3 INCONCLUSIVE.
The decision rule and its thresholds: config/leak_check.yaml and docs/leak-check.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..core.errors import LeakwatchError
from ..core.promapi import Prometheus
from ..core.settings import load as load_settings
from ..core.topology import native_url
from . import attribution, bounded, breakdown, compare, verdict_thresholds
from .analysis import LEAK, CheckResult, analyse, format_hours, human_bytes
from .collect import choose_step, collect
from .window import iso, parse_duration, resolve


def default_prometheus_url() -> str:
    return os.environ.get("LEAKWATCH_PROMETHEUS_URL") or native_url(load_settings(), "prometheus")


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
        default=str(verdict_thresholds.CONFIG_FILE),
        metavar="FILE",
        help="thresholds file (default config/leak_check.yaml)",
    )
    parser.add_argument(
        "--min-bytes-per-request",
        type=float,
        default=None,
        metavar="BYTES",
        help="override verdict.min_growth_per_request (in bytes)",
    )
    parser.add_argument(
        "--min-growth-per-hour",
        type=float,
        default=None,
        metavar="BYTES",
        help="override verdict.min_growth_rate (in bytes per hour)",
    )
    parser.add_argument(
        "--skip-until-uptime",
        "--warmup",
        dest="warmup",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="override skip_points_until.uptime (used where the exporter's baseline is absent; --warmup: its former name)",
    )
    parser.add_argument(
        "--skip-until-requests",
        "--warmup-requests",
        dest="warmup_requests",
        type=float,
        default=None,
        metavar="N",
        help="override skip_points_until.requests (--warmup-requests: its former name)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_window_arguments(parser)
    parser.add_argument("--window", default=None, metavar="DURATION", help="length of the window (default 2h)")
    parser.add_argument("--start", default=None, metavar="TIME", help="window start (unix seconds or ISO 8601)")
    parser.add_argument("--end", default=None, metavar="TIME", help="window end (default: now)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    add_compare_arguments(parser)


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments `check` and `report` share for a canary comparison (leakcheck/compare.py)."""
    parser.add_argument(
        "--compare",
        nargs=2,
        default=None,
        metavar=("STABLE", "CANARY"),
        help="compare two deployments' bytes/request (values of --compare-label): LESS, SAME, MORE or "
        "INCONCLUSIVE for the canary; exit 0 LESS or SAME, 1 MORE, 3 INCONCLUSIVE",
    )
    parser.add_argument(
        "--compare-label", default=None, metavar="LABEL", help="the label they differ in (default compare.label)"
    )
    parser.add_argument(
        "--daily-requests",
        type=float,
        default=None,
        metavar="N",
        help="requests a day the smallest deciding canary share is sized for (default compare.request_rate)",
    )
    parser.add_argument(
        "--decide-within",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="time the smallest deciding canary share is sized for (default compare.decide_within)",
    )


def side_matcher(label: str, value: str) -> str:
    """`label="value"`, the value escaped as PromQL strings are."""
    if not verdict_thresholds.LABEL_NAME.fullmatch(label):
        raise LeakwatchError(f"--compare-label {label!r} is not a Prometheus label name")
    if not value:
        raise LeakwatchError("--compare needs two non-empty deployment names")
    return f'{label}="{json.dumps(value)[1:-1]}"'


def run_compare(args: argparse.Namespace, start: float, end: float) -> compare.Comparison:
    stable_name, canary_name = args.compare
    if stable_name == canary_name:
        raise LeakwatchError(f"--compare needs two different deployments, not {stable_name!r} twice")
    cfg = verdict_thresholds.load(args.config)
    label = args.compare_label or cfg.compare_label
    daily = args.daily_requests if args.daily_requests is not None else cfg.compare_daily_requests
    within = args.decide_within if args.decide_within is not None else cfg.compare_decide_within_seconds
    if not (daily > 0 and within > 0 and math.isfinite(daily)):
        raise LeakwatchError("--daily-requests and --decide-within must be positive")
    stable = run_check(args, start, end, side_matcher(label, stable_name))
    canary = run_check(args, start, end, side_matcher(label, canary_name))
    return compare.compare((stable_name, canary_name), stable, canary, daily, within)


def run_check(args: argparse.Namespace, start: float, end: float, matcher: str = "") -> CheckResult:
    """The one code path `check` and `report` compute their numbers with."""
    if not (args.time_compression > 0 and math.isfinite(args.time_compression)):
        raise LeakwatchError(f"--time-compression must be a positive number, not {args.time_compression}")
    cfg = verdict_thresholds.load(args.config).with_overrides(
        min_bytes_per_request=args.min_bytes_per_request,
        min_growth_bytes_per_hour=args.min_growth_per_hour,
        warmup_seconds=args.warmup,
        warmup_requests=args.warmup_requests,
    )
    prom = Prometheus(args.prometheus or default_prometheus_url())
    scrape = parse_duration(load_settings().prometheus["scrape_interval"])
    step = args.step or choose_step(start, end, scrape, cfg.max_points)
    timeline, series = collect(prom, start, end, step, matcher)
    result = analyse(timeline, series, cfg, start=start, end=end, step=step, time_compression=args.time_compression)
    explain_leaks(prom, result, matcher)
    if not matcher:  # the breakdown is per host; a comparison's sides go without it
        result.memory_breakdown = breakdown.collect_breakdown(prom, start, end, step)
    return result


def explain_leaks(prom: Prometheus, result: CheckResult, matcher: str = "") -> None:
    """For every LEAK series: which endpoint's requests explain it (attribution.py) and, for a role
    with declared cache bounds, where it levels off (bounded.py). Only LEAK series: the per-endpoint
    fits cost a Theil-Sen fit per endpoint, and a flat series has nothing to explain."""
    leaks = [r for r in result.series if r.verdict == LEAK]
    if not leaks:
        return
    counters = attribution.collect_endpoints(prom, result.start, result.end, result.step, matcher)
    bounds, growth = bounded.collect_bounds(prom, result.end, matcher)
    for r in leaks:
        if counters:
            r.attribution = attribution.attribute(
                r.t, r.memory, r.segment_ids, counters, result.config, result.time_compression
            )
        bounded.annotate(r, bounds, growth)


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
        who = r.series.labels.get("role") or r.series.key
        if r.attribution is not None:
            lines.append(f"{'':<28} {who}: {r.attribution.reason}")
        if r.bounded is not None:
            lines.append(f"{'':<28} {who}: {r.bounded.text}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    start, end = resolve(args.start, args.end, args.window)
    if args.compare:
        comparison = run_compare(args, start, end)
        if args.json:
            json.dump(comparison.as_dict(), sys.stdout, indent=1)
            print()
        else:
            print(compare.format_text(comparison))
        return comparison.exit_code
    result = run_check(args, start, end)
    if args.json:
        json.dump(result.as_dict(), sys.stdout, indent=1)
        print()
    else:
        print(format_text(result))
        if result.memory_breakdown is not None:
            print()
            print("\n".join(breakdown.format_lines(result.memory_breakdown)))
    return result.exit_code
