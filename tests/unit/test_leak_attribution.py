"""Bytes per triggering request: which endpoint's requests explain a leak (leakcheck/attribution.py),
and the plateau forecast of a declared cache bound (leakcheck/bounded.py)."""

from __future__ import annotations

import numpy as np
import pytest

from leakwatch.leakcheck import attribution, bounded, verdict_thresholds
from leakwatch.leakcheck.analysis import LEAK, NO_LEAK, analyse
from leakwatch.leakcheck.series import MemorySeries, Timeline

STEP = 15.0
T0 = 1_700_000_000.0
KB = 1000


def traffic(seed: int, hours: float = 4.0):
    """Two endpoints whose mix changes: /v1/responses in 20-minute bursts, chat completions steady
    with its own slower wave (as a day's mix moves), Poisson arrivals per scrape."""
    rng = np.random.default_rng(seed)
    t = T0 + np.arange(0.0, hours * 3600 + STEP / 2, STEP)
    minutes = (t - T0) / 60.0
    responses_rate = np.where((minutes // 20) % 2 == 0, 0.6, 0.05)
    chat_rate = 0.5 + 0.4 * np.sin(minutes / 37.0)
    responses = np.cumsum(rng.poisson(responses_rate * STEP))
    chat = np.cumsum(rng.poisson(chat_rate * STEP))
    return rng, t, responses.astype(float), chat.astype(float)


def noise(rng, n: int, sigma: float, ar: float = 0.5) -> np.ndarray:
    e, out = 0.0, np.empty(n)
    for i in range(n):
        e = ar * e + rng.normal(0.0, sigma * np.sqrt(1 - ar * ar))
        out[i] = e
    return out


def counters(t, **by_handler):
    return {f"/v1/{name.replace('_', '/')}": (t, values) for name, values in by_handler.items()}


@pytest.fixture(scope="module")
def cfg():
    return verdict_thresholds.load()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_growth_on_responses_only_is_attributed_to_it(cfg, seed):
    rng, t, responses, chat = traffic(seed)
    memory = 1.5e9 + 8 * KB * responses + noise(rng, len(t), 300 * KB)
    seg = np.zeros(len(t), dtype=int)
    result = attribution.attribute(t, memory, seg, counters(t, responses=responses, chat_completions=chat), cfg)
    assert result.endpoint == "POST /v1/responses", result.reason
    assert result.bytes_per_request.low < 8 * KB < result.bytes_per_request.high
    assert result.bytes_per_request.estimate == pytest.approx(8 * KB, rel=0.05)
    (chat_fit,) = [e for e in result.endpoints if e.endpoint == "POST /v1/chat/completions"]
    assert chat_fit.verdict == attribution.DOES_NOT
    assert "other endpoints' requests do not explain it" in result.reason


def test_endpoints_that_did_not_move_are_skipped(cfg):
    rng, t, responses, chat = traffic(4)
    memory = 1.5e9 + 8 * KB * responses + noise(rng, len(t), 300 * KB)
    idle = np.full(len(t), 3.0)  # three embeddings before the window, none in it
    result = attribution.attribute(
        t,
        memory,
        np.zeros(len(t), dtype=int),
        counters(t, responses=responses, chat_completions=chat, embeddings=idle),
        cfg,
    )
    assert result.skipped == ["POST /v1/embeddings"]
    assert result.endpoint == "POST /v1/responses"


@pytest.mark.parametrize("seed", [5, 6])
def test_growth_unrelated_to_any_endpoint_is_not_attributed(cfg, seed):
    """Memory climbs with time (a timer's allocations, a background thread) while the requests come
    and go: no endpoint explains it."""
    rng, t, responses, chat = traffic(seed)
    memory = 1.5e9 + 40e6 * (t - T0) / 3600 + noise(rng, len(t), 300 * KB)
    result = attribution.attribute(
        t, memory, np.zeros(len(t), dtype=int), counters(t, responses=responses, chat_completions=chat), cfg
    )
    assert result.endpoint is None, result.reason
    assert result.reason.startswith("no endpoint's requests explain it: it follows time"), result.reason


def test_lockstep_traffic_is_said_to_be_undecidable(cfg):
    """Both endpoints at the same steady rate: their counters and the clock move together, and the
    answer must say it cannot tell them apart instead of naming one."""
    rng = np.random.default_rng(7)
    t = T0 + np.arange(0.0, 4 * 3600 + STEP / 2, STEP)
    responses = np.arange(len(t)) * 4.0
    chat = np.arange(len(t)) * 6.0
    memory = 1.5e9 + 8 * KB * responses + noise(rng, len(t), 300 * KB)
    result = attribution.attribute(
        t, memory, np.zeros(len(t), dtype=int), counters(t, responses=responses, chat_completions=chat), cfg
    )
    assert result.endpoint is None
    assert "cannot tell it apart" in result.reason


def test_restarts_split_the_endpoint_fit_into_segments(cfg):
    """The counters and memory reset at a restart: the fit stays within segments."""
    rng, t, responses, chat = traffic(8)
    half = len(t) // 2
    seg = (np.arange(len(t)) >= half).astype(int)
    responses = np.where(seg == 1, responses - responses[half], responses)
    chat = np.where(seg == 1, chat - chat[half], chat)
    memory = 1.5e9 + 8 * KB * responses + noise(rng, len(t), 300 * KB)
    result = attribution.attribute(t, memory, seg, counters(t, responses=responses, chat_completions=chat), cfg)
    assert result.endpoint == "POST /v1/responses"
    assert result.bytes_per_request.estimate == pytest.approx(8 * KB, rel=0.05)


def _engine_core(memory, t, requests, headroom):
    timeline = Timeline.build(t, requests)
    series = [MemorySeries("host/engine_core", "host", {"role": "engine_core"}, "synthetic", t, memory, headroom)]
    return timeline, series


MIB = 1048576


def test_bounded_forecast_while_the_cache_fills(cfg):
    """EngineCore grows 8 KiB per new schema towards an 8 MiB xgrammar bound: LEAK for now, and the
    forecast says where it levels off against the headroom."""
    rng = np.random.default_rng(9)
    t = T0 + np.arange(0.0, 2 * 3600 + STEP / 2, STEP)
    requests = np.cumsum(rng.poisson(0.05 * STEP, len(t))).astype(float)  # ~360 schemas, ~2.9 MiB
    memory = 1e9 + 8 * 1024 * requests + noise(rng, len(t), 20 * KB)
    timeline, series = _engine_core(memory, t, requests, 2e9)
    cfg_small = cfg.with_overrides(min_growth_bytes_per_hour=512 * 1024)
    result = analyse(timeline, series, cfg_small, start=t[0], end=t[-1], step=STEP)
    (r,) = result.series
    assert r.verdict == LEAK, r.reason
    grown = float(memory[-1] - memory[0])
    bounded.annotate(r, {"engine_core": {"xgrammar-cache": 8 * MIB}}, {"engine_core": grown})
    assert r.bounded.outcome == bounded.FITS
    assert r.bounded.text.startswith("bounded cache xgrammar-cache: at most 8 MiB (VLLM_XGRAMMAR_CACHE_MB); grown ")
    assert r.bounded.text.endswith("below the headroom 1907 MiB: no action needed")
    assert r.as_dict()["bounded_caches"]["outcome"] == "fits"

    bounded.annotate(r, {"engine_core": {"xgrammar-cache": 8 * MIB}}, {"engine_core": grown})
    tight = bounded.forecast("engine_core", {"xgrammar-cache": 8 * MIB}, grown, "baseline", 1 * MIB)
    assert tight.outcome == bounded.RUNS_OUT and tight.text.endswith("it would run out before levelling off")
    beyond = bounded.forecast("engine_core", {"xgrammar-cache": 2 * MIB}, grown, "baseline", 2e9)
    assert beyond.outcome == bounded.BEYOND and "the leak stands" in beyond.text


def test_bounded_forecast_only_for_leaking_roles_with_bounds(cfg):
    rng = np.random.default_rng(10)
    t = T0 + np.arange(0.0, 2 * 3600 + STEP / 2, STEP)
    requests = np.cumsum(rng.poisson(0.05 * STEP, len(t))).astype(float)
    memory = 1e9 + noise(rng, len(t), 20 * KB)
    timeline, series = _engine_core(memory, t, requests, 2e9)
    (r,) = analyse(timeline, series, cfg, start=t[0], end=t[-1], step=STEP).series
    assert r.verdict == NO_LEAK
    bounded.annotate(r, {"engine_core": {"xgrammar-cache": 8 * MIB}}, {"engine_core": 0.0})
    assert r.bounded is None and r.as_dict()["bounded_caches"] is None


def test_a_cache_that_filled_then_levelled_off_is_no_leak(cfg):
    """Grow-then-flat: the cache fills in the first 40 minutes of a 2-hour window, then every schema
    is a cache hit. The later part is flat, so the check's own rule says NO-LEAK."""
    rng = np.random.default_rng(11)
    t = T0 + np.arange(0.0, 2 * 3600 + STEP / 2, STEP)
    requests = np.cumsum(rng.poisson(0.5 * STEP, len(t))).astype(float)
    filled = np.minimum(8 * 1024 * requests, 8 * MIB)
    memory = 1e9 + filled + noise(rng, len(t), 20 * KB)
    assert filled[len(t) // 3] == 8 * MIB  # full within the first third
    timeline, series = _engine_core(memory, t, requests, 2e9)
    cfg_small = cfg.with_overrides(min_growth_bytes_per_hour=512 * 1024)
    (r,) = analyse(timeline, series, cfg_small, start=t[0], end=t[-1], step=STEP).series
    assert r.verdict == NO_LEAK and "did not grow in the later part" in r.reason, r.reason
