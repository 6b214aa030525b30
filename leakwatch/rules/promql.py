"""Small PromQL text builders shared by the recording and alerting rules: selectors, grouping and
joining clauses, quoted label matchers, and the <name> markers of the alert texts. They exist so
that the rules read as PromQL rather than as the Python string handling that writes it."""

from __future__ import annotations

import re
from collections.abc import Iterable


def sel(metric: str, *matchers: str) -> str:
    """metric{m1,m2} with empty matchers left out."""
    body = ", ".join(m for m in matchers if m)
    return f"{metric}{{{body}}}" if body else metric


def by(labels: list[str]) -> str:
    return f"by ({', '.join(labels)})"


def on(labels: list[str]) -> str:
    return f"on ({', '.join(labels)})"


def quote(text: str) -> str:
    """A PromQL string literal: "text", its backslashes and double quotes escaped (PromQL reads
    Go's escapes, so a regex's \\. is written \\\\. inside the quotes)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def matcher(label: str, value: str, op: str = "=") -> str:
    """A label matcher, label="value" (op: =, !=, =~ or !~), the value quoted as PromQL reads it."""
    return f"{label}{op}{quote(value)}"


def one_of(values: Iterable[str]) -> str:
    """A regex (for =~, which PromQL anchors) matching exactly one of the values: each escaped, so
    that the dot of 0.9 matches a dot only."""
    return "|".join(re.escape(value) for value in values)


def fill(text: str, **values) -> str:
    """Replaces <name> markers; Go template braces in alert texts stay untouched."""
    for key, value in values.items():
        text = text.replace(f"<{key}>", str(value))
    if "<" in text and ">" in text:
        left = re.findall(r"<[a-z_]+>", text)
        if left:
            raise ValueError(f"unfilled markers {left} in {text!r}")
    return text
