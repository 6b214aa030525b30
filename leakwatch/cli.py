"""The `leakwatch` command: one subcommand per tool, each in its own module."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import subprocess
import sys

from .errors import LeakwatchError

# subcommand -> (module with add_arguments(parser) and run(args) -> int, one-line help)
COMMANDS = {
    "stack": ("leakwatch.stack", "start, stop and inspect the serving + observability stack"),
    "generate": ("leakwatch.generate.command", "write (or --check) the files generated from config/"),
    "demo-model": ("leakwatch.demo_model", "build the offline demo model"),
    "check": (
        "leakwatch.leakcheck.command",
        "leak verdict for a window: bytes per request, growth per hour, exit code",
    ),
    "report": ("leakwatch.report.command", "daily or weekly HTML memory report with plots and the leak verdict"),
    "drill": (
        "leakwatch.drill.command",
        "inject a known leak into the real vLLM and prove detection, healing and estimate",
    ),
    "heal": ("leakwatch.heal.command", "Alertmanager webhook receiver that drains and restarts vLLM on leak alerts"),
    "plan": ("leakwatch.capacity_command", "capacity of a model profile: weights, KV cache, concurrent sequences"),
    "convert-xglm": ("leakwatch.convert_xglm", "rewrite an XGLM checkpoint (Janeway) as OPT for vLLM"),
    "exporter": (
        "leakwatch.exporter.command",
        "Prometheus exporter: vLLM's memory per process, baseline, growth per request",
    ),
    "dashboards": (
        "leakwatch.dashboards.command",
        "validate the Grafana dashboards or check their queries against a Prometheus",
    ),
    "backtest": (
        "leakwatch.backtest.command",
        "evaluate alert rules over a multi-day history (would they have caught it?)",
    ),
    "canary-router": (
        "leakwatch.canary.command",
        "HAProxy config for a stable + canary vLLM, and the split of a running router",
    ),
    "metrics-record": (
        "leakwatch.metrics_record",
        "record (or --check) config/metrics/ for vLLM and node exporter from the real servers",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leakwatch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip())
        module.add_arguments(cmd)
        cmd.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except LeakwatchError as exc:
        print(f"leakwatch {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except (subprocess.CalledProcessError, OSError) as exc:
        # Expected failures that no module turned into a LeakwatchError: one line, not a traceback
        # (LEAKWATCH_TRACEBACK=1 shows it, for a bug report).
        if os.environ.get("LEAKWATCH_TRACEBACK"):
            raise
        print(f"leakwatch {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _one_line(exc: subprocess.CalledProcessError | OSError) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        cmd = exc.cmd if isinstance(exc.cmd, str) else " ".join(map(str, exc.cmd[:4]))
        return f"`{cmd}` exited {exc.returncode}; its own message is above"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"a port it needs is in use ({exc.strerror}): stop what listens there, or choose another port "
            "(the *_PORT variables, config/stack.yaml)"
        )
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


if __name__ == "__main__":
    raise SystemExit(main())
