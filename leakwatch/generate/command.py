"""Write the generated files (compose.yaml, prometheus.yml, rules, dashboards), or check them."""

from __future__ import annotations

import argparse
import sys

from ..core.paths import REPO_ROOT
from .outputs import stale_files, write_all


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff when a file is stale")


def run(args: argparse.Namespace) -> int:
    if args.check:
        stale = stale_files()
        for _path, diff in stale:
            print(diff, file=sys.stderr)
        if stale:
            names = ", ".join(str(p.relative_to(REPO_ROOT)) for p, _ in stale)
            print(f"stale generated files: {names}; run `make generate` and commit", file=sys.stderr)
            return 1
        print("generated files are up to date")
        return 0
    for path in write_all():
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0
