"""config/vllm_leaks.yaml read and checked: the reported vLLM leaks, each with its source, status on
the pinned vLLM, trigger, role and the verdict a correct monitor gives."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core import config_schema
from ..core.config_schema import DICT, INT, LIST, NUM, STR, Key, Schema, at_least, list_of, one_of, positive
from ..core.errors import LeakwatchError
from ..core.paths import CONFIG_DIR

CATALOGUE_FILE = CONFIG_DIR / "vllm_leaks.yaml"
STATUSES = ("reproduces", "fixed", "unreachable", "outside")
SHAPES = ("leak", "bounded", "flat")
ROLES = ("api_server", "engine_core", "worker")
# The request patterns leakwatch/realleaks/triggers.py can send (and loadtest/real_leaks.py's users).
TRIGGERS = ("responses-store", "unique-json-schema", "client-timeout", "short-decode")
# A source: an issue or pull request (owner/repo#N, an optional note in brackets) or a GitHub advisory.
SOURCE = re.compile(r"[\w.-]+/[\w.-]+#\d+( \([^()]+\))?|GHSA(-[0-9a-z]{4}){3}")
BOUND_UNITS = {"MiB": 1024 * 1024, "adapters": None, "prompts": None}

CASE: Schema = {
    "name": Key(STR),
    "title": Key(STR),
    "source": Key(LIST, check=lambda v: list_of(str, non_empty=True)(v) or _sources(v)),
    "status": Key(STR, check=one_of(*STATUSES)),
    "affected": Key(STR),
    "fixed_in": Key(STR, nullable=True),
    "trigger": Key(STR, nullable=True, check=one_of(*TRIGGERS)),
    "role": Key(STR, check=one_of(*ROLES)),
    "shape": Key(STR, check=one_of(*SHAPES)),
    "env": Key(DICT, required=False),
    "bound": Key(DICT, required=False),
    "note": Key(STR, required=False),
    "signature": Key(STR),
    "mitigation": Key(STR),
}
BOUND: Schema = {
    "env": Key(STR, nullable=True),
    "unit": Key(STR, check=one_of(*BOUND_UNITS)),
    "default": Key(INT, nullable=True, check=positive),
    "resident_factor": Key(NUM, required=False, check=at_least(1)),
}


def _sources(values: list[str]) -> str | None:
    bad = [v for v in values if not SOURCE.fullmatch(v)]
    return f"must name issues as owner/repo#N (note) or GHSA-xxxx-xxxx-xxxx: {bad[0]!r}" if bad else None


@dataclass(frozen=True)
class Bound:
    """What bounds a cache: an environment variable of vLLM's (None: a fixed size), its unit, vLLM's
    default, and how much resident memory one byte of the setting costs at most (measured: a cache
    may count less than the process holds for it)."""

    env: str | None
    unit: str
    default: int | None
    resident_factor: float = 1.0

    def bytes_for(self, value: int | None) -> int | None:
        """The most resident memory the cache holds for a setting (None: vLLM's default), where the
        unit is a size: the setting times resident_factor."""
        scale = BOUND_UNITS[self.unit]
        chosen = self.default if value is None else value
        return None if scale is None or chosen is None else round(chosen * scale * self.resident_factor)


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    source: tuple[str, ...]
    status: str
    affected: str
    fixed_in: str | None
    trigger: str | None
    role: str
    shape: str
    env: dict[str, str]
    bound: Bound | None
    note: str
    signature: str
    mitigation: str

    @property
    def screened(self) -> bool:
        """Driven live by a screening: every case whose trigger reaches vLLM over HTTP."""
        return self.trigger is not None

    @property
    def expected_on_pinned(self) -> str:
        """The shape a screening must see on the pinned vLLM (a fixed or unreachable case: flat)."""
        return self.shape if self.status == "reproduces" else "flat"


@dataclass(frozen=True)
class Catalogue:
    cases: tuple[Case, ...]
    screening: dict[str, int]  # trigger -> triggering requests a screening sends
    screening_vllm_args: tuple[str, ...]  # the screening server's extra vLLM arguments

    def case(self, name: str) -> Case:
        for case in self.cases:
            if case.name == name:
                return case
        raise LeakwatchError(f"no vLLM leak scenario {name!r}; known: {', '.join(c.name for c in self.cases)}")

    @property
    def bounded_caches(self) -> tuple[Case, ...]:
        """The reproducing bounded caches whose bound an environment variable sets (the exporter
        reads it from vLLM's processes)."""
        return tuple(c for c in self.cases if c.shape == "bounded" and c.bound and c.bound.env)


def _schema_for(screening_keys) -> Schema:
    return {
        "cases": Key(LIST),
        "screening": {
            "requests": {t: Key(INT, check=positive) for t in screening_keys},
            "vllm_args": Key(LIST, check=list_of(str)),
        },
    }


def load(path: Path = CATALOGUE_FILE) -> Catalogue:
    raw = config_schema.load(path, _schema_for(TRIGGERS), "the vLLM leak catalogue")
    cases, seen = [], set()
    for i, item in enumerate(raw["cases"]):
        values = config_schema.check_section(item, CASE, f"cases[{i}]", Path(path))
        name = values["name"]
        if name in seen:
            raise LeakwatchError(f"{path}: cases[{i}].name {name!r} appears twice")
        seen.add(name)
        env = values.get("env") or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise LeakwatchError(f"{path}: cases[{i}].env must map names to strings (quote numbers)")
        if values["shape"] == "bounded" and "bound" not in values:
            raise LeakwatchError(f"{path}: cases[{i}] ({name}) is bounded but has no bound")
        bound = None
        if "bound" in values:
            bound = Bound(**config_schema.check_section(values["bound"], BOUND, f"cases[{i}].bound", Path(path)))
        cases.append(
            Case(
                name=name,
                title=values["title"],
                source=tuple(values["source"]),
                status=values["status"],
                affected=values["affected"],
                fixed_in=values["fixed_in"],
                trigger=values["trigger"],
                role=values["role"],
                shape=values["shape"],
                env=dict(env),
                bound=bound,
                note=" ".join(values.get("note", "").split()),
                signature=" ".join(values["signature"].split()),
                mitigation=" ".join(values["mitigation"].split()),
            )
        )
    screening = raw["screening"]
    return Catalogue(tuple(cases), dict(screening["requests"]), tuple(screening["vllm_args"]))
