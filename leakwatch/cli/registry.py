"""The table of `leakwatch` subcommands: name -> the module that implements it and its one-line help.

Only the table is read to list the commands (`leakwatch --help`); a command's module is imported when
that command is chosen (leakwatch/cli/__init__.py), so one command never pays for the imports of the
other thirteen. A command's module defines `add_arguments(parser)` and `run(args) -> int`; its
docstring is the description in `leakwatch COMMAND --help` (the help line when it has none).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import NamedTuple


class Command(NamedTuple):
    module: str  # dotted path of the module with add_arguments(parser) and run(args) -> int
    help: str  # one line in `leakwatch --help`


# In the order `leakwatch --help` lists them.
COMMANDS: dict[str, Command] = {
    "stack": Command("leakwatch.stack.command", "start, stop and inspect the serving + observability stack"),
    "generate": Command("leakwatch.generate.command", "write (or --check) the files generated from config/"),
    "demo-model": Command("leakwatch.demo_model.command", "build the offline demo model"),
    "check": Command(
        "leakwatch.leakcheck.command",
        "leak verdict for a window: bytes per request, growth per hour, exit code",
    ),
    "report": Command("leakwatch.report.command", "daily or weekly HTML memory report with plots and the leak verdict"),
    "drill": Command(
        "leakwatch.drill.command",
        "inject a known leak into the real vLLM and prove detection, healing and estimate",
    ),
    "heal": Command(
        "leakwatch.heal.command", "Alertmanager webhook receiver that drains and restarts vLLM on leak alerts"
    ),
    "plan": Command(
        "leakwatch.capacity.command", "capacity of a model profile: weights, KV cache, concurrent sequences"
    ),
    "convert-xglm": Command("leakwatch.convert_xglm.command", "rewrite an XGLM checkpoint (Janeway) as OPT for vLLM"),
    "exporter": Command(
        "leakwatch.exporter.command",
        "Prometheus exporter: vLLM's memory per process, baseline, growth per request",
    ),
    "dashboards": Command(
        "leakwatch.dashboards.command",
        "validate the Grafana dashboards or check their queries against a Prometheus",
    ),
    "backtest": Command(
        "leakwatch.backtest.command",
        "evaluate alert rules over a multi-day history (would they have caught it?)",
    ),
    "canary-router": Command(
        "leakwatch.canary.command",
        "HAProxy config for a stable + canary vLLM, and the split of a running router",
    ),
    "metrics-record": Command(
        "leakwatch.metrics_record.command",
        "record (or --check) config/metrics/ for vLLM and node exporter from the real servers",
    ),
}


def load(name: str) -> ModuleType:
    """Import the module of command `name` (a key of COMMANDS)."""
    return importlib.import_module(COMMANDS[name].module)
