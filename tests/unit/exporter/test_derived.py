"""Baseline, restarts and the retention ratio as a state machine over samples (docs/exporter.md)."""

from __future__ import annotations

from leakwatch.exporter.derived import DerivedState, Sample
from leakwatch.exporter.vllm_scrape import VllmStats

MIB = 1 << 20
API = (100, 1100)


def sample(t, served, in_flight=0, host=None, gpu=None, identity=API, healthy=True, up=True, tokens=0.0):
    return Sample(
        time=t,
        identity=identity,
        vllm=VllmStats(series=400, requests_served=served, in_flight=in_flight, tokens_processed=tokens)
        if up
        else None,
        healthy=healthy,
        host={"api_server": 600 * MIB} if host is None else host,
        gpu=gpu,
    )


def test_baseline_waits_for_warm_up_health_and_an_idle_moment():
    state = DerivedState(warmup_requests=10)
    state.update(sample(0, 9))
    assert state.baseline is None  # not warmed up
    state.update(sample(1, 10, healthy=False))
    assert state.baseline is None  # engine not healthy
    state.update(sample(2, 12, in_flight=3))
    assert state.baseline is None  # requests in flight
    state.update(sample(3, 15, host={"api_server": 610 * MIB}, gpu={"0": 20 * MIB}))
    assert state.baseline.requests == 15 and state.baseline.time == 3
    assert state.baseline.host == {"api_server": 610 * MIB} and state.baseline.gpu == {"0": 20 * MIB}
    state.update(sample(4, 25, host={"api_server": 630 * MIB}))
    assert state.baseline.time == 3  # taken once
    assert state.requests_since_baseline(sample(5, 25)) == 10


def test_a_never_idle_server_gets_its_baseline_after_the_wait():
    state = DerivedState(warmup_requests=5, baseline_idle_wait_s=60)
    state.update(sample(0, 5, in_flight=8))
    state.update(sample(59, 50, in_flight=8))
    assert state.baseline is None
    state.update(sample(60, 60, in_flight=8))
    assert state.baseline.requests == 60


def test_a_new_api_server_is_a_restart_and_drops_the_baseline():
    state = DerivedState(warmup_requests=1)
    state.update(sample(0, 5))
    assert state.baseline and state.restarts == 0
    state.update(sample(1, 0, identity=(300, 9000)))
    assert state.restarts == 1 and state.baseline is None
    state.update(sample(2, 3, identity=(300, 9000)))
    assert state.baseline.requests == 3 and state.restarts == 1


def test_vllm_gone_drops_the_baseline_and_its_return_counts_once():
    state = DerivedState(warmup_requests=1)
    state.update(sample(0, 5))
    state.update(sample(1, 0, identity=None, up=False, host={}))
    assert state.baseline is None and state.restarts == 0
    state.update(sample(2, 0, identity=None, up=False, host={}))
    state.update(sample(3, 0, identity=(300, 9000)))
    assert state.restarts == 1
    state.update(sample(4, 1, identity=(300, 9000)))
    assert state.restarts == 1 and state.baseline is not None


def test_the_first_tree_seen_is_not_a_restart():
    state = DerivedState()
    state.update(sample(0, 0, identity=None, up=False))
    state.update(sample(1, 0))
    assert state.restarts == 0


def test_a_counter_that_goes_back_drops_the_baseline():
    state = DerivedState(warmup_requests=1)
    state.update(sample(0, 50))
    state.update(sample(1, 2))
    assert state.baseline.requests == 2 and state.restarts == 0


def burst(state, t0, before, peak, after, idle_s=30, served0=100, key="api_server"):
    """idle sample, two busy samples (peak on the second), then idle until the ratio is due."""
    state.update(sample(t0, served0, host={key: before}))
    state.update(sample(t0 + 1, served0 + 5, in_flight=4, host={key: (before + peak) // 2}))
    state.update(sample(t0 + 2, served0 + 10, in_flight=4, host={key: peak}))
    state.update(sample(t0 + 3, served0 + 12, host={key: after}))  # counter moved: still busy
    state.update(sample(t0 + 4, served0 + 12, host={key: after}))  # idle from here
    state.update(sample(t0 + 4 + idle_s - 1, served0 + 12, host={key: after}))
    return served0 + 12


def test_retention_of_a_leak_is_one_and_of_released_memory_near_zero():
    state = DerivedState(warmup_requests=0, retention_idle_s=30, retention_min_gain_bytes=8 * MIB)
    served = burst(state, 0, before=600 * MIB, peak=700 * MIB, after=700 * MIB)
    assert state.retention.ratios == {}  # idle for 29 s only
    state.update(sample(34, served, host={"api_server": 700 * MIB}))
    assert state.retention.ratios == {("host", "api_server"): 1.0}
    served = burst(state, 100, before=700 * MIB, peak=800 * MIB, after=710 * MIB, served0=served)
    state.update(sample(134, served, host={"api_server": 710 * MIB}))
    assert abs(state.retention.ratios[("host", "api_server")] - 0.1) < 1e-9
    assert state.retention.rated_bursts == 2


def test_two_leaking_bursts_in_a_row_are_told_apart_by_the_rated_count():
    """Both read 1: only the count says a second burst was rated (what a scraper waits on)."""
    state = DerivedState(warmup_requests=0, retention_idle_s=10, retention_min_gain_bytes=8 * MIB)
    served = burst(state, 0, before=600 * MIB, peak=700 * MIB, after=700 * MIB, idle_s=10)
    state.update(sample(14, served, host={"api_server": 700 * MIB}))
    assert (state.retention.ratios[("host", "api_server")], state.retention.rated_bursts) == (1.0, 1)
    served = burst(state, 50, before=700 * MIB, peak=800 * MIB, after=800 * MIB, idle_s=10, served0=served)
    state.update(sample(64, served, host={"api_server": 800 * MIB}))
    assert (state.retention.ratios[("host", "api_server")], state.retention.rated_bursts) == (1.0, 2)


def test_retention_is_clamped_and_noise_bursts_leave_it_unchanged():
    state = DerivedState(warmup_requests=0, retention_idle_s=10, retention_min_gain_bytes=8 * MIB)
    served = burst(state, 0, before=600 * MIB, peak=700 * MIB, after=550 * MIB, idle_s=10)
    state.update(sample(14, served, host={"api_server": 550 * MIB}))
    assert state.retention.ratios[("host", "api_server")] == 0.0
    # A burst that gained 1 MiB: a ratio of noise, so the last one stays.
    served = burst(state, 50, before=550 * MIB, peak=551 * MIB, after=551 * MIB, idle_s=10, served0=served)
    state.update(sample(64, served, host={"api_server": 551 * MIB}))
    assert state.retention.ratios[("host", "api_server")] == 0.0
    assert state.retention.rated_bursts == 1


def test_a_burst_no_sample_fell_inside_has_no_ratio():
    """One busy sample that saw nothing in flight: the requests may all have come and gone before
    it, so its memory says nothing about the peak."""
    state = DerivedState(warmup_requests=0, retention_idle_s=5, retention_min_gain_bytes=MIB)
    state.update(sample(0, 10, host={"api_server": 600 * MIB}))
    state.update(sample(1, 40, host={"api_server": 640 * MIB}))  # 30 requests came and went
    state.update(sample(7, 40, host={"api_server": 640 * MIB}))
    assert state.retention.ratios == {}
    assert state.retention.rated_bursts == 0


def test_a_burst_whose_counter_moved_on_both_sides_of_a_sample_is_rated_without_in_flight():
    """A fast model: the engine gauge reads 0 at every sample, but requests finished before the
    second sample and after it, so that sample fell inside the burst and its memory is a peak."""
    state = DerivedState(warmup_requests=0, retention_idle_s=5, retention_min_gain_bytes=MIB)
    state.update(sample(0, 10, host={"api_server": 600 * MIB}))
    state.update(sample(1, 25, host={"api_server": 640 * MIB}))
    assert state.retention.rated_bursts == 0
    state.update(sample(2, 40, host={"api_server": 620 * MIB}))
    state.update(sample(3, 40, host={"api_server": 610 * MIB}))  # idle from here
    state.update(sample(8, 40, host={"api_server": 610 * MIB}))
    assert state.retention.ratios == {("host", "api_server"): 0.25}  # (610 - 600) / (640 - 600)
    assert state.retention.rated_bursts == 1


def test_a_burst_whose_first_sample_looked_idle_is_measured_from_the_memory_before_it():
    """Requests arrived and hold their allocations, none finished and the engine gauge read 0 (the
    CI failure of the stack test's control run): that sample looks idle. The burst is still measured
    from the memory before the requests came, and tokens generated mark the next sample busy."""
    state = DerivedState(warmup_requests=0, retention_idle_s=5, retention_min_gain_bytes=MIB)
    state.update(sample(0, 10, tokens=500, host={"api_server": 600 * MIB}))
    state.update(sample(1, 10, tokens=500, host={"api_server": 632 * MIB}))  # 16 requests, none done
    state.update(sample(2, 10, tokens=900, host={"api_server": 640 * MIB}))  # tokens moved: busy
    state.update(sample(3, 12, tokens=1300, host={"api_server": 620 * MIB}))
    state.update(sample(4, 26, tokens=1300, host={"api_server": 600 * MIB}))
    state.update(sample(5, 26, tokens=1300, host={"api_server": 600 * MIB}))  # idle from here
    state.update(sample(10, 26, tokens=1300, host={"api_server": 600 * MIB}))
    assert state.retention.ratios == {("host", "api_server"): 0.0}  # (600 - 600) / (640 - 600)
    assert state.retention.rated_bursts == 1


def test_token_counters_alone_keep_a_burst_open():
    """Long generations: no request finishes for a while and the gauges read 0 between steps, but
    tokens keep coming; the burst does not end, so its idle wait starts after the last token."""
    state = DerivedState(warmup_requests=0, retention_idle_s=5, retention_min_gain_bytes=MIB)
    state.update(sample(0, 10, tokens=0, host={"api_server": 600 * MIB}))
    for t in range(1, 9):
        state.update(sample(t, 10, tokens=100 * t, host={"api_server": 650 * MIB}))
    state.update(sample(9, 11, tokens=800, host={"api_server": 600 * MIB}))  # done
    state.update(sample(10, 11, tokens=800, host={"api_server": 600 * MIB}))  # idle from here
    state.update(sample(14, 11, tokens=800, host={"api_server": 600 * MIB}))
    assert state.retention.rated_bursts == 0  # idle for 4 s only
    state.update(sample(15, 11, tokens=800, host={"api_server": 600 * MIB}))
    assert state.retention.ratios == {("host", "api_server"): 0.0}


def test_more_traffic_during_the_idle_wait_extends_the_burst():
    state = DerivedState(warmup_requests=0, retention_idle_s=10, retention_min_gain_bytes=MIB)
    state.update(sample(0, 10, host={"api_server": 600 * MIB}))
    state.update(sample(1, 12, in_flight=2, host={"api_server": 650 * MIB}))
    state.update(sample(2, 12, host={"api_server": 620 * MIB}))
    state.update(sample(5, 14, in_flight=1, host={"api_server": 700 * MIB}))  # busy again
    state.update(sample(13, 14, host={"api_server": 610 * MIB}))
    assert state.retention.ratios == {}  # idle only from this sample on
    state.update(sample(24, 14, host={"api_server": 610 * MIB}))
    assert abs(state.retention.ratios[("host", "api_server")] - 0.1) < 1e-9  # peak 700, not 650


def test_gpu_and_host_ratios_side_by_side_and_a_restart_clears_them():
    state = DerivedState(warmup_requests=0, retention_idle_s=1, retention_min_gain_bytes=MIB)
    mem = lambda host, gpu: {"host": {"worker": host * MIB}, "gpu": {"0": gpu * MIB}}
    state.update(sample(0, 1, **mem(100, 1000)))
    state.update(sample(1, 2, in_flight=1, **mem(200, 1100)))
    state.update(sample(2, 2, **mem(150, 1100)))
    state.update(sample(3, 2, **mem(150, 1100)))
    assert state.retention.ratios == {("host", "worker"): 0.5, ("gpu", "0"): 1.0}
    state.update(sample(4, 0, identity=(7, 7), **mem(100, 1000)))
    assert state.retention.ratios == {}
    assert state.retention.rated_bursts == 1  # a counter: a restart does not take it back
