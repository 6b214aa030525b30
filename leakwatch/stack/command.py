"""`leakwatch stack`: picks the runner (compose with a Docker engine, native otherwise) and acts."""

from __future__ import annotations

import argparse
import os

from ..core import profiles as model_profiles
from ..core.errors import LeakwatchError
from ..native.runner import NativeStack
from . import compose_runner

RUNNERS = ("auto", "compose", "native")


def choose_runner(requested: str) -> str:
    requested = (requested or "auto").strip().lower()
    if requested not in RUNNERS:
        raise LeakwatchError(f"STACK={requested!r} is not one of: {', '.join(RUNNERS)}")
    if requested != "auto":
        return requested
    return "compose" if compose_runner.engine_problem() is None else "native"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "down", "status", "logs"])
    parser.add_argument(
        "--model",
        default=os.environ.get("MODEL") or model_profiles.DEFAULT_PROFILE,
        help=f"model profile (env MODEL); one of {', '.join(model_profiles.available())}",
    )
    parser.add_argument(
        "--runner",
        default=os.environ.get("STACK", "auto"),
        help="auto (compose when a Docker engine answers), compose or native (env STACK)",
    )
    parser.add_argument(
        "--canary",
        action="store_true",
        default=os.environ.get("CANARY", "").strip().lower() in ("1", "true", "yes"),
        help="up: also a canary vLLM of the profile and the weighted router in front of both (env CANARY=1; "
        "docs/canary.md)",
    )
    parser.add_argument("--no-follow", action="store_true", help="logs: print and exit")


def run(args: argparse.Namespace) -> int:
    native = NativeStack()
    # A running native stack is always the one to act on for down/status/logs; else the compose
    # stack an earlier `up` recorded (it knows its engine, even one DOCKER_HOST named then).
    if args.action != "up" and (native.is_running() or args.runner == "native"):
        runner = "native"
    elif args.action != "up" and (args.runner or "auto").strip().lower() == "auto" and compose_runner.recorded_up():
        runner = "compose"
    else:
        runner = choose_runner(args.runner)
    if args.action == "up":
        model_profiles.load(args.model)  # unknown names fail before anything starts
        if runner == "compose":
            compose_runner.up(args.model, canary=args.canary)
        else:
            native.up(args.model, canary=args.canary)
        return 0
    if args.action == "down":
        compose_runner.down() if runner == "compose" else native.down()
        return 0
    if args.action == "status":
        ok = compose_runner.status() if runner == "compose" else native.status()
        return 0 if ok else 1
    return compose_runner.logs(not args.no_follow) if runner == "compose" else native.logs(follow=not args.no_follow)
