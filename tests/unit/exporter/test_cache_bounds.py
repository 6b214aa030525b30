"""Declared cache bounds read from vLLM's processes' environments (exporter/cache_bounds.py)."""

from __future__ import annotations

import pytest

from leakwatch.exporter.cache_bounds import CacheBounds, parse_bound
from leakwatch.exporter.process_tree import VllmProcess, VllmTree
from leakwatch.exporter.procfs import ProcFS
from leakwatch.realleaks import catalogue

# One MiB of VLLM_XGRAMMAR_CACHE_MB in resident bytes (the catalogue's measured resident_factor).
MIB = (1 << 20) * catalogue.load().bounded_caches[0].bound.resident_factor


@pytest.fixture(scope="module")
def xgrammar():
    return catalogue.load().case("xgrammar-cache")


def tree(*processes: tuple[int, str]) -> VllmTree:
    return VllmTree(100, 1, tuple(VllmProcess(pid, role, "", 1) for pid, role in processes))


def write_environ(root, pid: int, **env: str) -> None:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


@pytest.mark.parametrize(
    "raw, expected",
    [("8", 8 * MIB), (" 512 ", 512 * MIB), (None, None), ("", None), ("0", None), ("-1", None), ("8MB", None)],
)
def test_only_an_explicit_positive_setting_is_a_bound(xgrammar, raw, expected):
    assert parse_bound(xgrammar.bound, raw) == expected


def test_bounds_come_from_the_roles_environment(tmp_path):
    write_environ(tmp_path, 100, PATH="/usr/bin", VLLM_XGRAMMAR_CACHE_MB="8")
    write_environ(tmp_path, 102, PATH="/usr/bin", VLLM_XGRAMMAR_CACHE_MB="8", HOME="/root")
    write_environ(tmp_path, 103, VLLM_XGRAMMAR_CACHE_MB="8")
    bounds = CacheBounds(ProcFS(tmp_path))
    # The cache lives in EngineCore: the API server's and the worker's copies of the variable add nothing.
    assert bounds.read(tree((100, "api_server"), (102, "engine_core"), (103, "worker"))) == {
        ("engine_core", "xgrammar-cache"): 8 * MIB
    }


def test_each_engine_core_holds_a_cache_of_its_own(tmp_path):
    write_environ(tmp_path, 102, VLLM_XGRAMMAR_CACHE_MB="16")
    write_environ(tmp_path, 104, VLLM_XGRAMMAR_CACHE_MB="16")
    bounds = CacheBounds(ProcFS(tmp_path))
    assert bounds.read(tree((102, "engine_core"), (104, "engine_core"))) == {
        ("engine_core", "xgrammar-cache"): 32 * MIB
    }


def test_vllms_default_or_an_unreadable_environment_publishes_nothing(tmp_path):
    write_environ(tmp_path, 102, PATH="/usr/bin")  # left at vLLM's default 512 MiB
    bounds = CacheBounds(ProcFS(tmp_path))
    assert bounds.read(tree((102, "engine_core"))) == {}
    assert bounds.read(tree((105, "engine_core"))) == {}  # gone before its environment was read
    write_environ(tmp_path, 106, VLLM_XGRAMMAR_CACHE_MB="8")
    (tmp_path / "106" / "environ").chmod(0)
    # Root reads it anyway; as another user it is a PermissionError, which counts as no bound.
    assert bounds.read(tree((106, "engine_core"))) in ({}, {("engine_core", "xgrammar-cache"): 8 * MIB})
