"""One way to read our YAML config files (config/*.yaml, serving/profiles/*.yaml): a schema of keys
per section, checked before any value is used, so an unknown or misspelt key, a wrong type or an
impossible value is a LeakwatchError naming the file and the key, and nothing starts half-configured.

The units of config/*.yaml, one convention for every file (each file's header says it again):
- sizes are IEC strings, a number and its unit together: 64B, 512KiB, 1.5MiB, 48MiB, 8GiB
  (sizes.py). A bare number is not a size, and decimal (SI) units (kB, MB, GB) are refused with a
  hint: 48MB could be 48,000,000 or 50,331,648 bytes, and leakwatch counts memory in powers of 1024;
- durations are Prometheus durations: 30s, 10m, 2h, 1h30m, 200ms (durations.py);
- rates are an amount per duration: 48MiB/h (bytes per hour), 5/h or 1000/d (counts);
- keys carry no unit suffix (fast_min_growth: 48MiB, cooldown: 15m); a rate's key ends in _rate
  (fast_min_growth_rate: 48MiB/h beside fast_min_growth: 48MiB; request_rate: 1000/d). Plain
  counts keep the name of what they count: healer.yaml's max_restarts_per_hour (a limit per sliding
  hour, the window fixed), stack.yaml's canary_percent (as `--canary-percent` and the chart take
  it); vllm_leaks.yaml's bounds describe vLLM's environment variables as vLLM reads them.
size_key, rate_key and duration_key declare such keys: the loader checks them and hands the readers
plain numbers (bytes, bytes or counts per second or per `per` seconds, seconds). A value passed on
verbatim to another program (Prometheus's scrape_interval, say) is checked with `duration` and stays
the string it is. serving/profiles/*.yaml keep their own names, which follow vLLM's settings
(gpu_memory_utilization, cpu_kv_cache_space_gib).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import yaml

from .durations import parse_duration
from .errors import LeakwatchError
from .sizes import EXAMPLES as SIZE_EXAMPLES, parse_rate, parse_size

INT, NUM, STR, BOOL, LIST, DICT = (int,), (int, float), (str,), (bool,), (list,), (dict,)


@dataclass(frozen=True)
class Key:
    kinds: tuple[type, ...]
    required: bool = True
    check: Callable[[Any], str | None] | None = None  # returns a problem, or None when fine
    nullable: bool = False
    # Converts the written value (a size, a rate, a duration) into the number the readers get; it
    # raises LeakwatchError with the problem ("must be a size ...: <why>"). `kinds` is not checked
    # for such a key: the parser says more than a type would. `check` then sees the number.
    parse: Callable[[Any], Any] | None = None


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


def _parser(parse: Callable[[Any], Any], expects: str) -> Callable[[Any], Any]:
    def convert(value):
        try:
            return parse(value)
        except LeakwatchError as exc:
            raise LeakwatchError(f"must be {expects}: {exc}") from None

    return convert


def size_key(check: Callable[[Any], str | None] | None = None, *, whole: bool = False, required: bool = True) -> Key:
    """A size (48MiB), read as bytes: a float, or with whole=True the nearest whole byte (an int)."""

    def parse(value):
        size = parse_size(value)
        return round(size) if whole else size

    return Key((), required, check, parse=_parser(parse, f"a size in IEC units ({SIZE_EXAMPLES})"))


def rate_key(*, size: bool, per: float = 1.0, check: Callable[[Any], str | None] | None = None) -> Key:
    """A rate (48MiB/h with size=True, 5/h without), read as bytes or a count per `per` seconds."""
    example = "a size per duration such as 48MiB/h" if size else "a count per duration such as 5/h or 1000/d"
    return Key((), True, check, parse=_parser(lambda value: parse_rate(value, size=size, per=per), example))


def duration_key(check: Callable[[Any], str | None] | None = None, *, allow_zero: bool = False) -> Key:
    """A Prometheus duration (90s, 2h, 1h30m), read as seconds; more than zero unless allow_zero."""

    def parse(value):
        if isinstance(value, str):
            try:
                return parse_duration(value, positive=not allow_zero)
            except LeakwatchError:
                pass
        hint = " (write 30s, not 30)" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
        kind = "duration" if allow_zero else "positive duration"
        raise LeakwatchError(f"must be a {kind} such as 90s, 2h or 1h30m{hint} (got {value!r})")

    return Key((), True, check, parse=parse)


def read_yaml(path: Path, what: str) -> Any:
    """The parsed file; `what` names it in the error (e.g. "the drill settings")."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise LeakwatchError(f"cannot read {what} in {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise LeakwatchError(f"{path}: not valid YAML ({what}): {exc}") from None


def check_section(values, schema: Schema, where: str, path: Path) -> dict:
    """`values` checked against `schema` (nested sections too), as a new dict whose sizes, rates and
    durations are numbers (Key.parse); `where` is the section's dotted name in messages ("" at the
    top of the file)."""

    def name(key: str) -> str:
        return f"{where}.{key}" if where else key

    if not isinstance(values, dict):
        raise LeakwatchError(f"{path}: {where or 'the file'!r} must be a mapping")
    out = dict(values)
    unknown = sorted(set(values) - set(schema))
    if unknown:
        raise LeakwatchError(
            f"{path}: unknown key {name(unknown[0])}; valid keys of {where or 'the file'!r}: {', '.join(schema)}"
        )
    for key, spec in schema.items():
        if not isinstance(spec, Key):
            if key not in values:
                raise LeakwatchError(f"{path}: missing required key {name(key)}")
            out[key] = check_section(values[key], spec, name(key), path)
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
        if spec.parse:
            try:
                value = out[key] = spec.parse(value)
            except LeakwatchError as exc:
                raise LeakwatchError(f"{path}: {name(key)} {exc}") from None
        elif not isinstance(value, spec.kinds) or (isinstance(value, bool) and bool not in spec.kinds):
            kinds = " or ".join(k.__name__ for k in spec.kinds)
            raise LeakwatchError(f"{path}: {name(key)} must be of type {kinds}, not {value!r}")
        if spec.check and (problem := spec.check(value)):
            raise LeakwatchError(f"{path}: {name(key)} {problem} (got {values[key]!r})")
    return out


def load(path: Path, schema: Schema, what: str) -> dict:
    """A config file read and checked against its schema."""
    return check_section(read_yaml(path, what), schema, "", Path(path))
