"""The table of `leakwatch` commands (leakwatch/cli/registry.py): every entry names a module of ours
with add_arguments(parser) and run(args), read from the source without importing it; and the lazy
parser gives a command its arguments only when that command is parsed, once. (That `leakwatch --help`
and `leakwatch CMD --help` import no other command's module is tests/integration/test_cli_lazy.py:
it needs a fresh process.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import leakwatch
from leakwatch import cli
from leakwatch.cli.registry import COMMANDS

PACKAGE = Path(leakwatch.__file__).parent


def source_of(module: str) -> Path:
    base = PACKAGE.parent.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_names_a_module_with_add_arguments_and_run(name):
    command = COMMANDS[name]
    assert command.module.startswith("leakwatch.")
    # Every command lives in its package's command.py: a newcomer finds `leakwatch X` there.
    assert command.module.endswith(".command"), command.module
    path = source_of(command.module)
    assert path.is_file(), path
    functions = {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}
    assert {"add_arguments", "run"} <= functions, f"{path}: {sorted(functions)}"
    assert command.help and "\n" not in command.help and not command.help.endswith(".")


def test_a_command_gets_its_arguments_when_parsed_and_only_once():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    plan = sub.choices["plan"]
    assert plan.get_default("_module") is None and plan.description is None
    for _ in range(2):  # the same parser twice: no "conflicting option string"
        args = parser.parse_args(["plan", "janeway-13b-4090d", "--json"])
    assert args.command == "plan" and args.json and args.profile == "janeway-13b-4090d"
    assert args._module.__name__ == COMMANDS["plan"].module
    assert plan.description and plan.description.startswith("Plan a model profile's capacity")
    assert sub.choices["check"].get_default("_module") is None  # the others untouched


def test_usage_errors_are_argparses_own(capsys):
    for argv, message in (
        ([], "the following arguments are required: COMMAND"),
        (["nope"], "argument COMMAND: invalid choice: 'nope' (choose from 'stack', 'generate',"),
        (["plan"], "the following arguments are required: profile"),
    ):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err
