"""The `leakwatch` command: one subcommand per tool, each in its own module."""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from ..core.errors import LeakwatchError
from .registry import COMMANDS, Command, load

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


class _LazyCommands(argparse._SubParsersAction):
    """The subcommands' action. Each command's parser starts empty (its help line is in the table);
    the chosen one gets its module's description and arguments just before it parses the rest of the
    line, so only that module is imported. An unknown name never gets here: argparse's choices check
    rejects it first, with the same message as ever."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        assert values is not None and not isinstance(values, str)  # nargs=PARSER: [name, *rest]
        name = values[0]
        if name in COMMANDS:
            _complete(self._name_parser_map[name], name)
        super().__call__(parser, namespace, values, option_string)


def _complete(cmd: argparse.ArgumentParser, name: str) -> None:
    """Give command `name`'s parser its description, arguments and module (once)."""
    if cmd.get_default("_module") is not None:
        return
    module = load(name)
    cmd.description = (module.__doc__ or COMMANDS[name].help).strip()
    module.add_arguments(cmd)
    cmd.set_defaults(_module=module)


def build_parser() -> argparse.ArgumentParser:
    """The `leakwatch` parser; it imports no command module until a command is parsed."""
    parser = argparse.ArgumentParser(prog="leakwatch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", action=_LazyCommands)
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.help)
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
