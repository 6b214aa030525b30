"""The `leakwatch` command imports a command's module only when that command runs: `leakwatch --help`
lists every command from the table in leakwatch/cli/registry.py without importing one, and
`leakwatch CMD --help` imports CMD's module and no other command's (beyond what CMD's module itself
imports). Each case is a fresh Python that runs `python -m leakwatch ARGS` (runpy, as -m does) and
then prints the modules it imported. (-X importtime cannot tell: it misses importlib.import_module.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from leakwatch.cli.registry import COMMANDS
from leakwatch.core.paths import REPO_ROOT

COMMAND_MODULES = {command.module for command in COMMANDS.values()}
MARK = "\n== sys.modules: "

# `python -m leakwatch ARGS`, then what it imported (its SystemExit caught).
RUN_CLI = f"""
import json, runpy, sys
sys.argv[0] = "leakwatch"
try:
    runpy.run_module("leakwatch", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
print({MARK!r} + json.dumps(sorted(sys.modules)))
raise SystemExit(code)
"""

# What importing one module alone brings in.
IMPORT_ALONE = f"""
import importlib, json, sys
importlib.import_module(sys.argv[1])
print({MARK!r} + json.dumps(sorted(sys.modules)))
"""


def imported(script: str, *args: str) -> tuple[subprocess.CompletedProcess[str], str, set[str]]:
    """Run `python -c SCRIPT ARGS` from the repository: its result, its output, the modules it imported."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "300"},  # help lines unwrapped
    )
    assert MARK in proc.stdout, proc.stderr[-2000:]
    out, _, modules = proc.stdout.rpartition(MARK)
    return proc, out, set(json.loads(modules))


def test_the_top_level_help_lists_every_command_and_imports_none():
    proc, out, modules = imported(RUN_CLI, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "leakwatch.cli.registry" in modules
    assert sorted(modules & COMMAND_MODULES) == []
    listed = out.split("positional arguments:")[1].split("options:")[0]
    names = [line.split()[0] for line in listed.splitlines() if line.startswith("    ") and line[4] != " "]
    assert names == list(COMMANDS)  # a long name's help goes on the next line, further in
    for command in COMMANDS.values():
        assert command.help in listed


@pytest.mark.parametrize("argv", [[], ["no-such-command"]], ids=["no-command", "unknown-command"])
def test_a_usage_error_imports_no_command(argv):
    proc, _, modules = imported(RUN_CLI, *argv)
    assert proc.returncode == 2
    assert "usage: leakwatch [-h] COMMAND ..." in proc.stderr
    assert sorted(modules & COMMAND_MODULES) == []


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_commands_help_imports_only_that_command(name):
    module = COMMANDS[name].module
    proc, out, modules = imported(RUN_CLI, name, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.startswith(f"usage: leakwatch {name} ")
    # What importing the command's module alone brings in (stack's module imports demo_model's,
    # report's imports check's): the CLI must add no other command module to it.
    alone, _, by_itself = imported(IMPORT_ALONE, module)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert module in modules
    assert sorted(modules & COMMAND_MODULES) == sorted(by_itself & COMMAND_MODULES)
