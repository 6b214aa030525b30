"""Small PromQL text builders shared by the recording and alerting rules."""

from __future__ import annotations


def sel(metric: str, *matchers: str) -> str:
    """metric{m1,m2} with empty matchers left out."""
    body = ", ".join(m for m in matchers if m)
    return f"{metric}{{{body}}}" if body else metric


def by(labels: list[str]) -> str:
    return f"by ({', '.join(labels)})"


def on(labels: list[str]) -> str:
    return f"on ({', '.join(labels)})"


def fill(text: str, **values) -> str:
    """Replaces <name> markers; Go template braces in alert texts stay untouched."""
    for key, value in values.items():
        text = text.replace(f"<{key}>", str(value))
    if "<" in text and ">" in text:
        import re

        left = re.findall(r"<[a-z_]+>", text)
        if left:
            raise ValueError(f"unfilled markers {left} in {text!r}")
    return text
