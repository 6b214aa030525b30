"""leakwatch/core/sizes.py: the one size and rate grammar of config files (IEC units, no bare numbers,
no decimal units), and what the loader makes of a bad size in a file."""

from __future__ import annotations

import pytest
import yaml

from leakwatch.core import alert_config, config_schema
from leakwatch.core.config_schema import Key, duration_key, rate_key, size_key
from leakwatch.core.errors import LeakwatchError
from leakwatch.core.sizes import SizeError, parse_rate, parse_size

MIB = 1024 * 1024


@pytest.mark.parametrize(
    "text, size",
    [
        ("64B", 64),
        ("0B", 0),
        ("512KiB", 512 * 1024),
        ("48MiB", 48 * MIB),
        ("1.5MiB", 1.5 * MIB),
        ("0.3MiB", 0.3 * MIB),  # thresholds may fall between bytes
        ("8GiB", 8 * 1024 * MIB),
        ("1TiB", 1024**4),
        (" 24MiB ", 24 * MIB),
    ],
)
def test_iec_units_and_fractions(text, size):
    assert parse_size(text) == size


def test_sizes_are_computed_as_the_rules_did():
    """number x unit, in that order: the rendered rules stay byte-identical (0.3 MiB is 314572.8)."""
    assert parse_size("0.3MiB") == 0.3 * MIB == 314572.8
    assert parse_size("1.5MiB") == 1.5 * MIB


@pytest.mark.parametrize(
    "value, message",
    [
        ("48MB", "'48MB' uses the decimal unit MB (1,000,000 bytes), which leakwatch does not take"),
        ("48MB", "write 48MiB if you meant that"),
        ("2GB", "write 2GiB if you meant that"),
        ("512kB", "(1,000 bytes)"),
        ("-1MiB", "'-1MiB' is negative; a size is at least 0B"),
        ("48", "'48' has no unit: write a size with an IEC unit, e.g. 48MiB or 48B"),
        (48, "48 has no unit: write a size with an IEC unit, e.g. 48MiB or 48B"),
        (1.5, "1.5 has no unit"),
        ("1.5XiB", "'1.5XiB' has an unknown unit 'XiB' (units: B, KiB, MiB, GiB, TiB)"),
        ("48mib", "did you mean 48MiB?"),
        ("48M", "did you mean 48MiB?"),
        ("48 MiB", "'48 MiB' is not a size: write the number and its unit together, 48MiB"),
        ("48MiB of it", "is not a size (examples: 64B, 512KiB, 1.5MiB, 8GiB)"),
        ("lots", "is not a size"),
        ("", "is not a size"),
        (True, "is not a size"),
    ],
)
def test_a_bad_size_says_what_is_wrong(value, message):
    with pytest.raises(SizeError) as err:
        parse_size(value)
    assert message in str(err.value)


def test_the_error_is_a_leakwatch_error_and_a_value_error():
    assert issubclass(SizeError, LeakwatchError) and issubclass(SizeError, ValueError)


@pytest.mark.parametrize(
    "text, size, per, value",
    [
        ("48MiB/h", True, 1.0, 48 * MIB / 3600),  # bytes per second, as the rules computed it
        ("10MiB/h", True, 3600.0, 10 * MIB),  # per hour: exactly the amount
        ("10MiB/1h", True, 3600.0, 10 * MIB),
        ("512KiB/30m", True, 3600.0, 1024 * 1024),
        ("5/h", False, 1.0, 5 / 3600),
        ("1000/d", False, 86400.0, 1000),
        ("0.5/m", False, 60.0, 0.5),
    ],
)
def test_rates(text, size, per, value):
    assert parse_rate(text, size=size, per=per) == value


@pytest.mark.parametrize(
    "value, size, message",
    [
        ("48MiB", True, "'48MiB' is not a rate: write an amount per duration"),
        (48, True, "e.g. 48MiB/h"),
        ("48/h", True, "'48' has no unit"),
        ("48MB/h", True, "decimal unit MB"),
        ("48MiB/hour", True, "'hour' is not a duration such as h, 30m or 1d"),
        ("48MiB/0s", True, "'0s' is not a duration"),
        ("5MiB/h", False, "is not a count per duration (examples: 5/h, 1000/d)"),
        ("-5/h", False, "negative"),
        ("5/", False, "is not a rate"),
        ("nan/h", False, "is not a count per duration"),
        ("1e3/d", False, "is not a count per duration"),
    ],
)
def test_a_bad_rate_says_what_is_wrong(value, size, message):
    with pytest.raises(SizeError) as err:
        parse_rate(value, size=size)
    assert message in str(err.value)


SCHEMA = {
    "limit": size_key(check=config_schema.positive, whole=True),
    "threshold": size_key(),
    "growth": rate_key(size=True, per=3600.0),
    "wait": duration_key(),
    "pause": duration_key(allow_zero=True),
    "section": {"inner": size_key()},
    "count": Key(config_schema.INT),
}
GOOD = {
    "limit": "1.6GiB",
    "threshold": "0.3MiB",
    "growth": "10MiB/h",
    "wait": "15m",
    "pause": "0s",
    "section": {"inner": "1KiB"},
    "count": 3,
}


def test_the_loader_hands_the_readers_numbers(tmp_path):
    path = tmp_path / "units.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    values = config_schema.load(path, SCHEMA, "the test settings")
    assert values == {
        "limit": 1717986918,  # 1.6 GiB is 1717986918.4 bytes: a whole-byte size rounds
        "threshold": 0.3 * MIB,
        "growth": 10 * MIB,
        "wait": 900.0,
        "pause": 0.0,
        "section": {"inner": 1024.0},
        "count": 3,
    }
    assert isinstance(values["limit"], int)
    assert GOOD["limit"] == "1.6GiB"  # the written values are left alone


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("limit", "1.6GB", "limit must be a size in IEC units (64B, 512KiB, 1.5MiB, 8GiB): '1.6GB' uses the decimal"),
        ("limit", "0B", "limit must be > 0 (got '0B')"),
        ("threshold", 48, "threshold must be a size in IEC units (64B, 512KiB, 1.5MiB, 8GiB): 48 has no unit"),
        (
            "threshold",
            "-1MiB",
            "threshold must be a size in IEC units (64B, 512KiB, 1.5MiB, 8GiB): '-1MiB' is negative",
        ),
        ("growth", "10MiB", "growth must be a size per duration such as 48MiB/h: '10MiB' is not a rate"),
        ("wait", 900, "wait must be a positive duration such as 90s, 2h or 1h30m (write 30s, not 30) (got 900)"),
        ("wait", "0s", "wait must be a positive duration such as 90s, 2h or 1h30m (got '0s')"),
        ("pause", "a while", "pause must be a duration such as 90s, 2h or 1h30m (got 'a while')"),
        ("wait", None, "wait must not be empty"),
    ],
)
def test_a_bad_unit_in_a_file_names_the_file_and_the_key(tmp_path, key, value, message):
    path = tmp_path / "units.yaml"
    path.write_text(yaml.safe_dump({**GOOD, key: value}))
    with pytest.raises(LeakwatchError) as err:
        config_schema.load(path, SCHEMA, "the test settings")
    assert str(err.value) == f"{path}: {message}" or str(err.value).startswith(f"{path}: {message}"), err.value


def test_a_nested_bad_size_names_its_section(tmp_path):
    path = tmp_path / "units.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "section": {"inner": "1.5XiB"}}))
    with pytest.raises(LeakwatchError, match=r"section\.inner must be a size .*'1\.5XiB' has an unknown unit 'XiB'"):
        config_schema.load(path, SCHEMA, "the test settings")


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("gpu", "fast_min_growth", "48MB", "gpu.fast_min_growth must be a size in IEC units"),
        (
            "gpu",
            "fast_min_growth",
            48,
            "gpu.fast_min_growth must be a size in IEC units (64B, 512KiB, 1.5MiB, 8GiB): 48",
        ),
        (
            "gpu",
            "fast_min_growth_rate",
            "48MiB",
            "gpu.fast_min_growth_rate must be a size per duration such as 48MiB/h",
        ),
        ("host", "release_min", "-1MiB", "host.release_min must be a size in IEC units"),
        ("metrics", "series_min_growth_rate", 5, "metrics.series_min_growth_rate must be a count per duration"),
        ("serving", "ttft_limit", 2.5, "serving.ttft_limit must be a positive duration such as 90s"),
        ("gpu", "fast_min_growth_mib", 48, "unknown key gpu.fast_min_growth_mib; valid keys of 'gpu'"),
        ("settling_after_start", "host", "20", "settling_after_start.host must be a duration such as 90s"),
    ],
)
def test_a_bad_value_in_the_alert_thresholds_names_the_file_and_the_key(tmp_path, section, key, value, message):
    raw = yaml.safe_load(alert_config.ALERTS_FILE.read_text())
    raw[section][key] = value
    path = tmp_path / "alerts.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(LeakwatchError) as err:
        alert_config.load(path=path)
    assert str(err.value).startswith(f"{path}: {message}"), err.value


def test_the_alert_thresholds_are_read_as_bytes_and_seconds():
    t = alert_config.load()
    gpu, serving = t.section("gpu"), t.section("serving")
    assert gpu.size("fast_min_growth") == 48 * MIB
    assert gpu.bytes_per_second("fast_min_growth_rate") == 48 * MIB / 3600
    assert gpu.seconds("fast_window") == 1800
    assert serving.num("ttft_limit") == 2.5 and serving.num("itl_limit") == 0.2
    # A drill's compressed clock: durations shrink, rates grow, sizes and latency limits stay.
    fast = alert_config.load(time_scale=1 / 60)
    assert fast.section("gpu").seconds("fast_window") == 30
    assert fast.section("gpu").bytes_per_second("fast_min_growth_rate") == pytest.approx(48 * MIB / 60)
    assert fast.section("gpu").size("fast_min_growth") == 48 * MIB
    assert fast.section("serving").num("ttft_limit") == 2.5
    assert fast.settling_after_start_s("host") == 20
