"""The user plans of both shapes and the option parsing that feeds them."""

from __future__ import annotations

import pytest

from leakwatch.loadgen.options import LoadgenOptions, OptionError, parse_duration
from leakwatch.loadgen.shapes import HighConcurrencyPlan, ProductionDayPlan
from tests.support.loadgen_options import parsed


def test_high_concurrency_steps_up_holds_and_steps_down():
    plan = HighConcurrencyPlan(streams=256, step=64, step_s=10, hold_s=30)
    timeline = [plan.users_at(t) for t in range(0, 120, 5)]
    assert timeline == [
        64,
        64,
        128,
        128,
        192,
        192,
        256,
        256,  # ramp-up, 4 steps
        256,
        256,
        256,
        256,
        256,
        256,  # hold
        192,
        192,
        128,
        128,
        64,
        64,  # ramp-down
        None,
        None,
        None,
        None,
    ]
    assert plan.duration_s == 110 and plan.phase_at(45) == "hold" and plan.phase_at(200) == "done"


def test_a_step_that_does_not_divide_the_target_stops_at_the_target():
    plan = HighConcurrencyPlan(streams=100, step=32, step_s=1, hold_s=1)
    assert [plan.users_at(t + 0.5) for t in range(4)] == [32, 64, 96, 100]
    assert plan.users_at(4.5) == 100 and plan.users_at(5.5) == 68


def test_production_day_keeps_its_pool_until_the_day_and_the_drain_are_over():
    plan = ProductionDayPlan(pool=16, real_duration_s=60, drain_s=30)
    assert plan.users_at(0) == plan.users_at(59.9) == 16
    assert plan.users_at(61, in_flight=3) == 16  # let in-flight requests finish
    assert plan.users_at(61, in_flight=0) is None
    assert plan.users_at(91, in_flight=3) is None


def test_the_defaults_describe_the_brief():
    opts = LoadgenOptions.from_parsed(parsed())
    assert opts.shape == "production-day" and opts.api == "chat"
    assert opts.arrivals.requests_per_day == 1000 and opts.arrivals.real_duration_s == 86400
    assert opts.high_concurrency.streams == 256
    assert "1000 requests/day" in opts.describe_shape()


def test_a_compressed_day():
    opts = LoadgenOptions.from_parsed(parsed(time_compression=720, day_length="72h", diurnal_amplitude=0.5))
    assert opts.arrivals.real_duration_s == 360 and opts.production_day.real_duration_s == 360
    assert "diurnal" in opts.describe_shape()


def test_prompt_scale_for_all_or_per_workload():
    assert LoadgenOptions.from_parsed(parsed(prompt_scale="0.5")).prompt_scale("code") == 0.5
    opts = LoadgenOptions.from_parsed(parsed(prompt_scale="code=0.1, creative=2"))
    assert (opts.prompt_scale("code"), opts.prompt_scale("creative")) == (0.1, 2.0)
    assert LoadgenOptions.from_parsed(parsed(prompt_scale="code=0.1")).prompt_scale("creative") == 1.0


@pytest.mark.parametrize(
    "overrides, words",
    [
        (dict(load_shape="storm"), "--load-shape: 'storm' is not one of"),
        (dict(api="embeddings"), "--api"),
        (dict(requests_per_day=0), "--requests-per-day: must be greater than 0"),
        (dict(streams=0), "--streams: must be at least 1"),
        (dict(diurnal_amplitude=2), "--diurnal-amplitude"),
        (dict(day_length="a while"), "--day-length: 'a while' is not a duration"),
        (dict(hold="-5"), "hold"),
        (dict(prompt_scale="chat=0.1"), "--prompt-scale: unknown workload 'chat'"),
        (dict(prompt_scale="code=0"), "--prompt-scale: must be greater than 0"),
        (dict(metrics_port=70000), "--metrics-port"),
        (dict(time_compression="fast"), "--time-compression: not a number"),
    ],
)
def test_bad_settings_name_the_option(overrides, words):
    with pytest.raises(OptionError, match=words.replace("(", r"\(")):
        LoadgenOptions.from_parsed(parsed(**overrides))


def test_durations():
    assert parse_duration("90") == 90 and parse_duration("1.5") == 1.5
    assert parse_duration("2h30m") == 9000 and parse_duration("3d") == 259200 and parse_duration("45s") == 45
    with pytest.raises(ValueError):
        parse_duration("10 minutes")
