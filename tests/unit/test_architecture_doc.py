"""docs/architecture.md opens with the tree, one line per folder: every top-level folder of the
repository and every package of leakwatch/ is listed, and every folder listed exists, so the map
cannot drift from the code."""

from __future__ import annotations

import fnmatch
import re

from leakwatch.core.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"


def tree_entries() -> dict[str, str]:
    """Path (as written, folders ending in /) -> its one-line description, from the first code block
    under '## The tree'; two spaces of indent per level."""
    text = DOC.read_text()
    block = re.search(r"^## The tree\n.*?^```\n(.*?)^```", text, re.S | re.M)
    assert block, "docs/architecture.md has no '## The tree' section with a code block"
    entries: dict[str, str] = {}
    stack: list[str] = []
    for line in block.group(1).splitlines():
        indent = len(line) - len(line.lstrip(" "))
        name, _, description = line.strip().partition(" ")
        assert indent % 2 == 0 and indent // 2 <= len(stack), f"bad indent: {line!r}"
        assert description.strip(), f"no description: {line!r}"
        stack[indent // 2 :] = [name]
        entries["".join(stack)] = description.strip()
    return entries


def top_level_folders() -> set[str]:
    """The repository's own folders: not hidden (but .ci/), not ignored by .gitignore (the venv, the
    state folder, build outputs)."""
    ignored = [
        line.strip().strip("/")
        for line in (REPO_ROOT / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return {
        path.name + "/"
        for path in REPO_ROOT.iterdir()
        if path.is_dir()
        and (not path.name.startswith(".") or path.name == ".ci")
        and not any(fnmatch.fnmatch(path.name, pattern) for pattern in ignored)
    }


def test_every_top_level_folder_is_in_the_tree():
    assert top_level_folders() - set(tree_entries()) == set()


def test_every_package_of_leakwatch_is_in_the_tree():
    package = REPO_ROOT / "leakwatch"
    packages = {
        str(init.parent.relative_to(REPO_ROOT)) + "/" for init in package.rglob("__init__.py") if init.parent != package
    }
    assert packages - set(tree_entries()) == set()


def test_every_folder_in_the_tree_exists():
    gone = [path for path in tree_entries() if not (REPO_ROOT / path).exists()]
    assert gone == []
