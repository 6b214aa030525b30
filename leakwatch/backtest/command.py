"""Would these rules have caught it? Evaluates rule files with the real Prometheus engine over a
multi-day history (a simulated scenario, an OpenMetrics export, or a Prometheus and a time range)
and reports when each alert first fired.

  leakwatch backtest --scenario article_a_vllm --reference
  leakwatch backtest --prometheus http://prometheus.example --start 2024-03-04T00:00:00Z --end 2024-03-11T00:00:00Z
  leakwatch backtest --openmetrics last-week.om --rules my-rules.yml
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from ..core.durations import parse_duration
from ..core.errors import LeakwatchError
from ..core.paths import PROMETHEUS_DIR, RULES_DIR
from ..core.shutdown import unwind_on_sigterm
from ..leakcheck.window import parse_instant
from ..scenarios import library
from . import report, sources
from .rule_evaluator import Backtest

REFERENCE_RULES = PROMETHEUS_DIR / "reference" / "articles.yml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--scenario", metavar="NAME", help="a simulated history from the scenario library (--list)")
    source.add_argument(
        "--openmetrics",
        metavar="FILE",
        type=Path,
        help="recorded samples with timestamps (OpenMetrics, or Prometheus text with ms timestamps)",
    )
    source.add_argument("--prometheus", metavar="URL", help="pull the raw series the rules read from this Prometheus")
    source.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--start", help="with --prometheus: ISO 8601 time (e.g. 2024-03-04T00:00:00Z) or Unix seconds")
    parser.add_argument("--end", help="with --prometheus: ISO 8601 time or Unix seconds")
    parser.add_argument(
        "--match", default="", help="with --prometheus: extra label matchers, e.g. 'instance=~\"gpu-7.*\"'"
    )
    parser.add_argument("--days", type=float, help="with --scenario: simulate this many days instead of its own length")
    parser.add_argument("--seed", type=int, help="with --scenario: another random seed")
    parser.add_argument(
        "--resolution",
        default="60s",
        help="with --scenario: time between simulated scrapes (production scrapes every 15s; 60s is 4x faster)",
    )
    parser.add_argument(
        "--rules", nargs="+", type=Path, metavar="FILE", help="rule files to evaluate (default: prometheus/rules/*.yml)"
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also evaluate the reference articles' rules (prometheus/reference/articles.yml)",
    )
    parser.add_argument(
        "--step",
        default="60s",
        help="evaluation interval (production evaluates every 15s; `for:` is honoured on this grid)",
    )
    parser.add_argument(
        "--lookback",
        default="auto",
        help="query lookback; auto = 1.5 x the slowest job's scrape interval, which stands in for "
        "the staleness markers an export loses (a warning says when jobs differ)",
    )
    parser.add_argument(
        "--leak-start",
        metavar="TIME",
        help="with --openmetrics or --prometheus: when the leak started (ISO 8601 or Unix seconds); "
        "detection times are counted from it",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the TSDB and intermediate files in DIR")


def parse_time(text: str | None, flag: str) -> float:
    if not text:
        raise LeakwatchError(f"--prometheus needs {flag}")
    try:
        return parse_instant(text)
    except LeakwatchError as exc:
        raise LeakwatchError(f"{flag}: {exc}") from None


def rule_files(args: argparse.Namespace) -> list[Path]:
    files = list(args.rules) if args.rules else sorted(RULES_DIR.glob("*.yml"))
    if args.reference:
        files.append(REFERENCE_RULES)
    for path in files:
        if not path.is_file():
            raise LeakwatchError(f"rule file {path} does not exist")
    return files


def run(args: argparse.Namespace) -> int:
    unwind_on_sigterm()  # its Prometheus and work folder go with it
    if args.list:
        for name, scenario in library.SCENARIOS.items():
            print(f"{name:<26} {scenario.days:>5g} d  {scenario.title}")
        return 0
    files = rule_files(args)
    leak_start = None
    if args.leak_start is not None:
        if args.scenario:
            raise LeakwatchError("--leak-start is for --openmetrics and --prometheus; a scenario knows its leak start")
        leak_start = parse_time(args.leak_start, "--leak-start")
    step = parse_duration(args.step)
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="leakwatch-backtest-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if any(workdir.iterdir()) and args.keep:
        raise LeakwatchError(f"--keep {workdir}: the directory must be empty")
    try:
        if args.scenario:
            scenario = library.get(args.scenario, args.days, args.seed)
            history = sources.from_scenario(scenario, workdir, parse_duration(args.resolution))
        elif args.openmetrics:
            history = sources.from_openmetrics(args.openmetrics, workdir)
        else:
            start, end = parse_time(args.start, "--start"), parse_time(args.end, "--end")
            history = sources.from_prometheus(args.prometheus, start, end, files, workdir, args.match)
        if leak_start is not None:
            if not history.start <= leak_start <= history.end:
                raise LeakwatchError(
                    f"--leak-start {report.utc(leak_start)} is outside the history "
                    f"({report.utc(history.start)} .. {report.utc(history.end)})"
                )
            history.leak_start = leak_start
        if args.lookback == "auto":
            lookback, warning = history.auto_lookback()
            if warning:
                print(f"warning: {warning}", file=sys.stderr)
        else:
            lookback = parse_duration(args.lookback)
        backtest = Backtest(workdir, step_s=step, lookback_s=lookback)
        backtest.load(history.files)
        result = backtest.run(files, history.start, history.end)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    origin, origin_name = (history.leak_start, "leak start") if history.leak_start else (history.start, "start")
    if args.json:
        print(json.dumps({"history": history.description, **report.as_json(result, origin)}, indent=1))
        return 0
    print(f"{history.description}")
    print(
        f"{report.utc(history.start)} .. {report.utc(history.end)}, {history.samples} samples, "
        f"evaluated every {args.step} ({', '.join(f'{k} {v:.0f}s' for k, v in result.timings.items())})"
    )
    if history.leak_start:
        print(f"leak starts {report.utc(history.leak_start)}")
    print()
    for line in report.table(result, origin, origin_name):
        print(line)
    sys.stdout.flush()
    return 0
