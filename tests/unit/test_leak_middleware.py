"""The leak drill middleware in a real ASGI app (FastAPI, as vLLM's API server uses it)."""

from __future__ import annotations

import importlib

import pytest

MIB = 1 << 20


def rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def app_with_leak(monkeypatch):
    """A FastAPI app with the middleware loaded the way vLLM's --middleware loads it."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    def clear():
        for key in ("LEAKWATCH_LEAK_BYTES_PER_REQUEST", "LEAKWATCH_LEAK_MODE", "LEAKWATCH_LEAK_PATH_PREFIX"):
            monkeypatch.delenv(key, raising=False)

    def build(**env):
        clear()
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("LEAKWATCH_LEAK_DEVICE", "cpu")
        module = importlib.reload(importlib.import_module("leakwatch.drill.leak_middleware"))
        app = FastAPI()
        app.middleware("http")(module.leak_memory)

        @app.post("/v1/completions")
        def completions():
            return {"ok": True}

        @app.get("/health")
        def health():
            return {}

        return module, TestClient(app)

    yield build
    clear()  # leave the module as vLLM would import it without drill settings
    importlib.reload(importlib.import_module("leakwatch.drill.leak_middleware"))


def test_keep_mode_holds_real_resident_memory_per_request(app_with_leak):
    module, client = app_with_leak(LEAKWATCH_LEAK_BYTES_PER_REQUEST=str(8 * MIB))
    before = rss()
    for _ in range(5):
        assert client.post("/v1/completions").status_code == 200
    assert module.leaked_bytes() == 40 * MIB
    assert rss() - before >= 38 * MIB  # written pages: resident, not lazily mapped


def test_release_mode_gives_the_memory_back(app_with_leak):
    module, client = app_with_leak(LEAKWATCH_LEAK_BYTES_PER_REQUEST=str(8 * MIB), LEAKWATCH_LEAK_MODE="release")
    before = rss()
    for _ in range(5):
        client.post("/v1/completions")
    assert module.leaked_bytes() == 0
    assert rss() - before < 8 * MIB


def test_the_header_picks_the_mode_per_request(app_with_leak):
    module, client = app_with_leak(LEAKWATCH_LEAK_BYTES_PER_REQUEST=str(MIB))
    client.post("/v1/completions", headers={"X-Leakwatch-Leak-Mode": "release"})
    client.post("/v1/completions", headers={"X-Leakwatch-Leak-Mode": "off"})
    client.post("/v1/completions")
    assert module.leaked_bytes() == MIB
    bad = client.post("/v1/completions", headers={"X-Leakwatch-Leak-Mode": "sometimes"})
    assert bad.status_code == 400 and "keep, release, off" in bad.text


def test_only_matching_paths_leak_and_zero_bytes_is_off(app_with_leak):
    module, client = app_with_leak(LEAKWATCH_LEAK_BYTES_PER_REQUEST=str(MIB))
    client.get("/health")
    assert module.leaked_bytes() == 0
    module, client = app_with_leak()
    client.post("/v1/completions")
    assert module.leaked_bytes() == 0


@pytest.mark.parametrize(
    "env, message",
    [
        ({"LEAKWATCH_LEAK_BYTES_PER_REQUEST": "2MB"}, "LEAKWATCH_LEAK_BYTES_PER_REQUEST='2MB' is not a whole number"),
        ({"LEAKWATCH_LEAK_BYTES_PER_REQUEST": "-1"}, "must be >= 0"),
        ({"LEAKWATCH_LEAK_BYTES_PER_REQUEST": "1", "LEAKWATCH_LEAK_MODE": "leaky"}, "leak mode 'leaky'"),
    ],
)
def test_bad_settings_stop_the_server_at_start(app_with_leak, env, message):
    with pytest.raises(ValueError, match=message):
        app_with_leak(**env)


def test_bad_device_is_rejected(monkeypatch):
    from leakwatch.drill import leak_middleware

    monkeypatch.setenv("LEAKWATCH_LEAK_DEVICE", "tpu")
    with pytest.raises(ValueError, match="LEAKWATCH_LEAK_DEVICE='tpu'"):
        leak_middleware.device()
