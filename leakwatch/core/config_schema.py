"""One way to read our YAML config files (config/*.yaml, serving/profiles/*.yaml): a schema of keys
per section, checked before any value is used, so an unknown or misspelt key, a wrong type or an
impossible value is a LeakwatchError naming the file and the key, and nothing starts half-configured."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import yaml

from .durations import parse_duration
from .errors import LeakwatchError

INT, NUM, STR, BOOL, LIST, DICT = (int,), (int, float), (str,), (bool,), (list,), (dict,)


@dataclass(frozen=True)
class Key:
    kinds: tuple[type, ...]
    required: bool = True
    check: Callable[[Any], str | None] | None = None  # returns a problem, or None when fine
    nullable: bool = False


# A section: key -> Key, or key -> a nested section.
Schema = Mapping[str, Union[Key, "Schema"]]


def positive(value) -> str | None:
    return None if value > 0 else "must be > 0"


def non_negative(value) -> str | None:
    return None if value >= 0 else "must be >= 0"


def fraction(value) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


def at_least(low: float) -> Callable[[Any], str | None]:
    return lambda value: None if value >= low else f"must be >= {low:g}"


def in_range(low: float, high: float) -> Callable[[Any], str | None]:
    """low <= value < high."""
    return lambda value: None if low <= value < high else f"must be in [{low:g}, {high:g})"


def one_of(*choices) -> Callable[[Any], str | None]:
    return lambda value: None if value in choices else f"must be one of {', '.join(map(str, choices))}"


def list_of(kind: type, non_empty: bool = False) -> Callable[[Any], str | None]:
    def check(value) -> str | None:
        if non_empty and not value:
            return f"must be a non-empty list of {kind.__name__}"
        if all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
            return None
        return f"must be a list of {kind.__name__}"

    return check


def duration(value) -> str | None:
    """A Prometheus-style duration (90s, 12h, 1h30m), more than zero."""
    try:
        parse_duration(value, positive=True)
    except LeakwatchError:
        return "must be a positive duration such as 90s, 2h or 1h30m"
    return None


def read_yaml(path: Path, what: str) -> Any:
    """The parsed file; `what` names it in the error (e.g. "the drill settings")."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise LeakwatchError(f"cannot read {what} in {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise LeakwatchError(f"{path}: not valid YAML ({what}): {exc}") from None


def check_section(values, schema: Schema, where: str, path: Path) -> dict:
    """`values` checked against `schema` (nested sections too); `where` is the section's dotted
    name in messages ("" at the top of the file)."""

    def name(key: str) -> str:
        return f"{where}.{key}" if where else key

    if not isinstance(values, dict):
        raise LeakwatchError(f"{path}: {where or 'the file'!r} must be a mapping")
    unknown = sorted(set(values) - set(schema))
    if unknown:
        raise LeakwatchError(
            f"{path}: unknown key {name(unknown[0])}; valid keys of {where or 'the file'!r}: {', '.join(schema)}"
        )
    for key, spec in schema.items():
        if not isinstance(spec, Key):
            if key not in values:
                raise LeakwatchError(f"{path}: missing required key {name(key)}")
            check_section(values[key], spec, name(key), path)
            continue
        if key not in values:
            if spec.required:
                raise LeakwatchError(f"{path}: missing required key {name(key)}")
            continue
        value = values[key]
        if value is None:
            if spec.nullable:
                continue
            raise LeakwatchError(f"{path}: {name(key)} must not be empty")
        if not isinstance(value, spec.kinds) or (isinstance(value, bool) and bool not in spec.kinds):
            kinds = " or ".join(k.__name__ for k in spec.kinds)
            raise LeakwatchError(f"{path}: {name(key)} must be of type {kinds}, not {value!r}")
        if spec.check and (problem := spec.check(value)):
            raise LeakwatchError(f"{path}: {name(key)} {problem} (got {value!r})")
    return values


def load(path: Path, schema: Schema, what: str) -> dict:
    """A config file read and checked against its schema."""
    return check_section(read_yaml(path, what), schema, "", Path(path))
