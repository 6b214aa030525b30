"""leakwatch/core/durations.py: the one duration grammar of config files, flags and queries."""

from __future__ import annotations

import pytest

from leakwatch.core.durations import DurationError, format_duration, parse_duration
from leakwatch.core.errors import LeakwatchError


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90s", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("500ms", 0.5),
        ("1m500ms", 60.5),
        ("7d", 604800),
        ("2w", 1209600),
        ("1y", 31536000),
        (" 2H ", 7200),
        ("0s", 0),
    ],
)
def test_prometheus_units_and_fractions(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "90", "ten minutes", "1h 30m", "m", "5x", "-5m", "1h-"])
def test_anything_else_is_refused_with_examples(text):
    with pytest.raises(DurationError, match="is not a duration \\(examples: 90s, 15m, 1h30m, 7d\\)"):
        parse_duration(text)


def test_the_error_is_a_leakwatch_error_and_a_value_error():
    # The CLI prints LeakwatchErrors; argparse and Locust's option parser report ValueErrors.
    assert issubclass(DurationError, LeakwatchError) and issubclass(DurationError, ValueError)


def test_bare_seconds_only_where_asked():
    assert parse_duration("90", bare_seconds=True) == 90
    assert parse_duration(1.5, bare_seconds=True) == 1.5
    assert parse_duration("2h30m", bare_seconds=True) == 9000
    with pytest.raises(DurationError, match="examples: 90s, 15m, 1h30m, 7d, 90"):
        parse_duration("soon", bare_seconds=True)


def test_positive_refuses_zero():
    with pytest.raises(DurationError, match="must be positive"):
        parse_duration("0m", positive=True)


@pytest.mark.parametrize("seconds, text", [(5400, "1h30m"), (0.5, "500ms"), (604800, "1w"), (86400 + 61, "1d1m1s")])
def test_format_writes_the_shortest_prometheus_duration_and_reads_back(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)


def test_format_refuses_nothing():
    with pytest.raises(DurationError, match="must be positive"):
        format_duration(0.0001)
