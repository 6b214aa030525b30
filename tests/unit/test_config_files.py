"""Every config file read through leakwatch.core.config_schema: the committed file loads, and a misspelt
key, a missing one, a wrong type, an impossible value, broken YAML or a missing file is an error that
names the file and the key (nothing starts half-configured)."""

from __future__ import annotations

import pytest
import yaml

from leakwatch.core import settings
from leakwatch.core.errors import LeakwatchError
from leakwatch.drill import drill_settings
from leakwatch.heal import healer_settings
from leakwatch.leakcheck import verdict_thresholds

LOADERS = {
    "leak_check": verdict_thresholds,
    "drill": drill_settings,
    "healer": healer_settings,
}


def write(tmp_path, module, change):
    doc = yaml.safe_load(module.CONFIG_FILE.read_text())
    change(doc)
    path = tmp_path / module.CONFIG_FILE.name
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("name", LOADERS)
def test_the_committed_file_loads(name):
    assert LOADERS[name].load() is not None


BAD = [
    ("leak_check", lambda d: d["verdict"].update(confidance=0.9), "unknown key verdict.confidance"),
    ("leak_check", lambda d: d["verdict"].pop("confidence"), "missing required key verdict.confidence"),
    ("leak_check", lambda d: d["verdict"].update(confidence=1.5), "verdict.confidence must be in [0.5, 1)"),
    ("leak_check", lambda d: d["sampling"].update(max_points="many"), "sampling.max_points must be of type int"),
    ("leak_check", lambda d: d.pop("skip_points_until"), "missing required key skip_points_until"),
    ("leak_check", lambda d: d.update(warmup={"seconds": 600}), "unknown key warmup"),
    (
        "leak_check",
        lambda d: d["verdict"].update(min_growth_per_request="64MB"),
        "verdict.min_growth_per_request must be a size in IEC units (64B, 512KiB, 1.5MiB, 8GiB): '64MB' uses the "
        "decimal unit MB",
    ),
    ("leak_check", lambda d: d["verdict"].update(min_growth_per_request=64), "64 has no unit"),
    (
        "leak_check",
        lambda d: d["verdict"].update(min_growth_rate="10MiB"),
        "verdict.min_growth_rate must be a size per duration such as 48MiB/h",
    ),
    ("leak_check", lambda d: d["sampling"].update(max_gap=300), "sampling.max_gap must be a positive duration"),
    ("drill", lambda d: d["traffic"].update(leak_span="12 hours"), "traffic.leak_span must be a positive duration"),
    ("drill", lambda d: d["traffic"].update(leak_span="0s"), "traffic.leak_span must be a positive duration"),
    ("drill", lambda d: d.update(time_compression=0.5), "time_compression must be >= 1"),
    ("drill", lambda d: d["leak"].update(kept_per_request=True), "leak.kept_per_request must be a size in IEC units"),
    ("drill", lambda d: d["leak"].update(kept_per_request=6291456), "leak.kept_per_request must be a size"),
    ("drill", lambda d: d["leak"].update(cgroup_headroom="1.6GB"), "leak.cgroup_headroom must be a size in IEC"),
    ("drill", lambda d: d["leak"].update(cgroup_headroom="0B"), "leak.cgroup_headroom must be > 0 (got '0B')"),
    ("drill", lambda d: d["fast_leak"].update(kept_per_request="-6MiB"), "fast_leak.kept_per_request must be a size"),
    ("drill", lambda d: d.update(scrape_interval=2), "scrape_interval must be a positive duration such as 90s"),
    ("drill", lambda d: d["traffic"].update(request_rate=1000), "traffic.request_rate must be a count per duration"),
    ("drill", lambda d: d.update(traffic=[1]), "'traffic' must be a mapping"),
    ("healer", lambda d: d["remediable"].update(alerts=[]), "remediable.alerts must be a non-empty list"),
    ("healer", lambda d: d["remediable"].update(jobs=["bad job"]), "remediable.jobs must be a non-empty list"),
    ("healer", lambda d: d.update(max_restarts_per_hour=0), "max_restarts_per_hour must be >= 1"),
    ("healer", lambda d: d.update(max_body="10B"), "max_body must be at least 1KiB (got '10B')"),
    ("healer", lambda d: d.update(max_body="256kB"), "max_body must be a size in IEC units"),
    ("healer", lambda d: d.update(cooldown_s=900), "unknown key cooldown_s; valid keys of 'the file'"),
    ("healer", lambda d: d.update(cooldown=900), "cooldown must be a duration such as 90s, 2h or 1h30m (write 30s"),
    ("healer", lambda d: d["drain"].update(idle_wait=None), "drain.idle_wait must not be empty"),
    ("healer", lambda d: d["drain"].update(ready_timeout="0s"), "drain.ready_timeout must be a positive duration"),
]


@pytest.mark.parametrize(("name", "change", "message"), BAD)
def test_a_bad_value_names_the_file_and_the_key(tmp_path, name, change, message):
    path = write(tmp_path, LOADERS[name], change)
    with pytest.raises(LeakwatchError) as err:
        LOADERS[name].load(path)
    assert str(err.value).startswith(f"{path}: "), err.value
    assert message in str(err.value)


@pytest.mark.parametrize("name", LOADERS)
def test_broken_yaml_and_a_missing_file_are_clear(tmp_path, name):
    broken = tmp_path / "broken.yaml"
    broken.write_text("verdict: [unclosed\n")
    with pytest.raises(LeakwatchError, match="not valid YAML"):
        LOADERS[name].load(broken)
    with pytest.raises(LeakwatchError, match=r"cannot read the .* in .*missing\.yaml: No such file"):
        LOADERS[name].load(tmp_path / "missing.yaml")


STACK_BAD = [
    (lambda d: d["services"]["vllm"].update(port=70000), "services vllm needs port: a number in 1-65535"),
    (lambda d: d["services"]["healer"].pop("port_env"), "services healer needs port_env"),
    (
        lambda d: d["services"]["vllm"].update(shutdown_timeout=20),
        "services vllm shutdown_timeout must be a positive duration such as 90s, 2h or 1h30m (got 20)",
    ),
    (lambda d: d["services"]["vllm"].update(shutdown_timeout_s=20), "services vllm has unknown key shutdown_timeout_s"),
    (lambda d: d["prometheus"].update(retention="15 days"), "prometheus.retention must be a positive duration"),
    (lambda d: d.update(vllm_version=0.32), "vllm_version must be of type str"),
    (lambda d: d.update(bind="0.0.0.0"), "unknown key bind"),
]


@pytest.mark.parametrize(("change", "message"), STACK_BAD)
def test_a_bad_stack_file_names_the_service_and_the_key(tmp_path, change, message):
    doc = yaml.safe_load(settings.STACK_FILE.read_text())
    change(doc)
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(LeakwatchError) as err:
        settings.load(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value), err.value
