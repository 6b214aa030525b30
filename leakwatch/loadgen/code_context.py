"""The coding profile's text: Python standard-library packages pasted as repository context, and the
questions asked about them.

The code is real source from the running interpreter's standard library (on every machine,
nothing downloaded). `RepositoryContext` lays out one repository's files (then the next
repositories' if more is needed) so the context of a repository always starts the same way:
requests about the same repository share a long prefix, which is what vLLM's prefix cache serves
in production. Repositories are chosen Zipf-like, so some contexts repeat often, as a team's main
repository does.
"""

from __future__ import annotations

import random
import re
import sysconfig
from functools import cache
from pathlib import Path

# Standard-library packages used as code repositories, most popular first (a Zipf-like choice makes
# some contexts repeat often, as a team's main repository does).
REPOSITORIES = (
    "asyncio",
    "email",
    "http",
    "json",
    "logging",
    "concurrent",
    "importlib",
    "urllib",
    "multiprocessing",
    "xml",
    "unittest",
    "collections",
    "sqlite3",
    "tomllib",
    "zoneinfo",
    "wsgiref",
    "html",
    "xmlrpc",
    "dbm",
    "curses",
)
_SKIP_DIRS = {"test", "tests", "idle_test", "__pycache__"}


def stdlib_dir() -> Path:
    return Path(sysconfig.get_path("stdlib"))


@cache
def repository_files(name: str) -> tuple[tuple[str, str], ...]:
    """(path, source) of one package's .py files in a fixed order; empty when it is not installed."""
    root = stdlib_dir() / name
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if _SKIP_DIRS & set(rel.parts):
            continue
        try:
            files.append((str(rel), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(files)


def available_repositories() -> tuple[str, ...]:
    repos = tuple(name for name in REPOSITORIES if repository_files(name))
    if not repos:
        raise RuntimeError(f"no Python standard-library source under {stdlib_dir()} to build code prompts from")
    return repos


class RepositoryContext:
    """The pasted context for a repository: its files, then the next repositories' if more is needed."""

    def __init__(self, start: str, repos: tuple[str, ...]):
        self.name = start
        order = repos[repos.index(start) :] + repos[: repos.index(start)]
        self._files = [f for repo in order for f in repository_files(repo)]
        self._text = ""
        self._next = 0

    def text(self, chars: int) -> str:
        """At least `chars` characters of context (or all of it), cut after a whole line."""
        while len(self._text) < chars and self._next < len(self._files):
            path, source = self._files[self._next]
            self._text += f"### {path}\n```python\n{source.rstrip()}\n```\n\n"
            self._next += 1
        if len(self._text) <= chars:
            return self._text
        cut = self._text.rfind("\n", 0, chars)
        return self._text[: cut + 1 if cut > 0 else chars]

    @property
    def size(self) -> int:
        return sum(len(source) for _, source in self._files)


QUESTIONS = (
    "Explain what `{func}` in `{path}` does, step by step, and point out any edge case it misses.",
    "Write pytest unit tests for `{func}` in `{path}`, covering its error paths.",
    "Refactor `{func}` in `{path}` for readability without changing its behaviour; show the new code.",
    "Find a bug risk in `{func}` (`{path}`) and propose a fix as a unified diff.",
    "Add type hints and a docstring to `{func}` in `{path}`.",
)
_DEF = re.compile(r"^\s*def (\w+)\(", re.M)
_FILE = re.compile(r"^### (\S+)$", re.M)

CODE_SYSTEM = (
    "You are a senior software engineer. The user pastes part of a repository, then asks "
    "a question about it. Answer precisely and show code where it helps."
)


def choose_repository(rng: random.Random, repos: tuple[str, ...]) -> str:
    """One repository, the most popular most often (weights 1, 1/2, 1/3, ...)."""
    weights = [1 / (rank + 1) for rank in range(len(repos))]
    return rng.choices(repos, weights)[0]


def question_about(template: str, pick: float, text: str, repo: str) -> str:
    """A question from `template` about a function of the pasted `text` (`pick` in [0, 1) chooses
    which) in the last file the text shows."""
    funcs = _DEF.findall(text) or ["main"]
    paths = _FILE.findall(text) or [f"{repo}/__init__.py"]
    return template.format(func=funcs[int(pick * len(funcs))], path=paths[-1])
