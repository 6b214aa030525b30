"""Check the Grafana dashboards: `validate` loads JSON files back through Grafana 11.6's types;
`check` runs every panel query against a Prometheus the way Grafana would and lists the panels that
would stay empty (e.g. before importing the dashboards into your own Grafana)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import LeakwatchError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    validate = sub.add_parser("validate", help="validate dashboard JSON files (default: grafana/dashboards/*.json)")
    validate.add_argument("files", nargs="*", type=Path)
    check = sub.add_parser("check", help="run every panel query against a Prometheus and list empty panels")
    check.add_argument("--prometheus", required=True, help="base URL, e.g. http://prometheus.example")
    check.add_argument("--gpu", action="store_true", help="also require data from GPU-only panels (DCGM, NVML)")
    check.add_argument("--dashboard", action="append", help="only this dashboard uid (repeatable)")


def _validate(files: list[Path]) -> int:
    from .files import DASHBOARDS_DIR
    from .validate import file_problems

    files = files or sorted(DASHBOARDS_DIR.glob("*.json"))
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise LeakwatchError(f"no such file: {', '.join(missing)}")
    failed = 0
    for path in files:
        problems = file_problems(path)
        failed += bool(problems)
        print(f"{path}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(f"  {problem}")
    return 1 if failed else 0


def _check(url: str, include_gpu: bool, only: list[str] | None) -> int:
    from ..core.promapi import Prometheus
    from . import boards
    from .live import check_board

    selected = [b for b in boards() if not only or b.uid in only]
    unknown = set(only or []) - {b.uid for b in selected}
    if unknown:
        raise LeakwatchError(
            f"unknown dashboard {', '.join(sorted(unknown))}; one of: {', '.join(b.uid for b in boards())}"
        )
    prom = Prometheus(url)
    empty_total = 0
    for board in selected:
        results = check_board(prom, board, include_gpu)
        empty = [r for r in results if not r.has_data]
        panels = {r.panel.title for r in results}
        empty_panels = {r.panel.title for r in empty}
        skipped = "" if include_gpu else f" ({sum(p.gpu for p in board.panels())} GPU-only panels not checked; --gpu)"
        print(f"{board.uid}: {len(panels) - len(empty_panels)}/{len(panels)} panels have data{skipped}")
        for result in empty:
            why = result.error or "no data over the default range " + board.time_from
            print(f"  {result.panel.title} [{result.ref_id}]: {why}\n    {result.expr}")
        empty_total += len(empty)
    return 1 if empty_total else 0


def run(args: argparse.Namespace) -> int:
    if args.action == "validate":
        return _validate(args.files)
    return _check(args.prometheus, args.gpu, args.dashboard)
