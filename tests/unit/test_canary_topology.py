"""The native runner's canary topology (`make up CANARY=1`), as written down before anything starts:
which programs run, what Prometheus scrapes and labels, where the router sends requests, and what
the healer may act on. tests/soak/test_canary_live.py runs the same stack."""

from __future__ import annotations

import argparse

import pytest
import yaml

from leakwatch.canary.router import SIDES, Split, default_split
from leakwatch.core import profiles
from leakwatch.core.settings import load as load_settings
from leakwatch.core.state_layout import StateLayout
from leakwatch.core.topology import CANARY_SERVICES, DEPLOYMENT_LABEL, DEPLOYMENTS, native_jobs
from leakwatch.generate.prometheus_config import prometheus_config
from leakwatch.heal import healer_settings
from leakwatch.leakcheck import verdict_thresholds
from leakwatch.native.programs import stack_programs
from leakwatch.native.runner import NativeStack
from leakwatch.stack import command as stack_command

PORTS = {
    "VLLM_PORT": "18000",
    "VLLM_CANARY_PORT": "18001",
    "LEAKWATCH_EXPORTER_PORT": "19405",
    "LEAKWATCH_EXPORTER_CANARY_PORT": "19407",
    "CANARY_ROUTER_PORT": "18010",
}


@pytest.fixture
def ports(monkeypatch):
    for name, value in PORTS.items():
        monkeypatch.setenv(name, value)


def _programs(tmp_path, canary: bool, **kwargs):
    found = stack_programs(load_settings(), profiles.load("demo"), StateLayout(tmp_path), canary=canary, **kwargs)
    return {p.name: p for p in found}


def _option(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, word in enumerate(command) if word == flag]


def test_the_canary_is_a_second_vllm_of_the_same_profile_with_its_own_exporter_and_the_router(tmp_path, ports):
    plain, canary = _programs(tmp_path, False), _programs(tmp_path, True, canary_vllm_extra_args=["--seed", "7"])
    assert set(canary) - set(plain) == {"vllm-canary", "leakwatch-exporter-canary", "canary-router"}
    stable_vllm, canary_vllm = canary["vllm"].command, canary["vllm-canary"].command
    assert _option(stable_vllm, "--port") == ["18000"] and _option(canary_vllm, "--port") == ["18001"]
    # The same engine, only the candidate's own arguments differ.
    assert canary_vllm[: canary_vllm.index("--port")] == stable_vllm[: stable_vllm.index("--port")]
    assert canary_vllm[-2:] == ["--seed", "7"] and "7" not in stable_vllm
    assert canary["vllm-canary"].environment == canary["vllm"].environment
    exporter = canary["leakwatch-exporter-canary"].command
    assert _option(exporter, "--vllm-url") == ["http://127.0.0.1:18001"] and _option(exporter, "--port") == ["19407"]
    # Each exporter keeps its own restart count and baseline.
    assert _option(exporter, "--state-file") != _option(canary["leakwatch-exporter"].command, "--state-file")
    assert canary["canary-router"].service == "canary_router"
    assert _option(canary["canary-router"].command, "-f") == [str(StateLayout(tmp_path).router_config)]
    assert plain == {name: canary[name] for name in plain}  # the stable side is untouched


def test_prometheus_labels_each_sides_series_with_its_deployment(ports):
    settings = load_settings()
    jobs = {job.name: job for job in native_jobs(settings, canary=True)}
    config = prometheus_config(settings, list(jobs.values()), ["127.0.0.1:1"], [])
    scraped = {entry["job_name"]: entry["static_configs"] for entry in config["scrape_configs"]}
    assert scraped["vllm"] == [
        {"targets": ["127.0.0.1:18000"], "labels": {DEPLOYMENT_LABEL: "stable"}},
        {"targets": ["127.0.0.1:18001"], "labels": {DEPLOYMENT_LABEL: "canary"}},
    ]
    assert scraped["leakwatch"] == [
        {"targets": ["127.0.0.1:19405"], "labels": {DEPLOYMENT_LABEL: "stable"}},
        {"targets": ["127.0.0.1:19407"], "labels": {DEPLOYMENT_LABEL: "canary"}},
    ]
    # Only the sided jobs carry the label; without the canary nothing does.
    assert set(CANARY_SERVICES) == {"vllm", "leakwatch"}
    assert all(
        "labels" not in group for job, groups in scraped.items() if job not in CANARY_SERVICES for group in groups
    )
    plain = prometheus_config(settings, native_jobs(settings), ["127.0.0.1:1"], [])
    assert DEPLOYMENT_LABEL not in yaml.safe_dump(plain)


def test_check_compare_reads_the_label_the_scrape_config_writes():
    assert verdict_thresholds.load().compare_label == DEPLOYMENT_LABEL
    assert DEPLOYMENTS == SIDES == ("stable", "canary")


def test_the_router_sends_to_both_vllms_at_the_configured_split(tmp_path, ports):
    stack = NativeStack(StateLayout(tmp_path))
    config = stack._router_config("test")
    assert "bind 127.0.0.1:18010" in config
    assert default_split(stack.settings) == Split(10)
    assert "server stable 127.0.0.1:18000 weight 90 " in config
    assert "server canary 127.0.0.1:18001 weight 10 " in config
    assert f"stats socket {StateLayout(tmp_path).router_socket} mode 600 level admin" in config


def _healer_policy(programs) -> healer_settings.HealerConfig:
    """The policy the native healer runs with: config/healer.yaml plus its command's --target pins."""
    return healer_settings.with_targets(healer_settings.load(), _option(programs["healer"].command, "--target"))


@pytest.mark.parametrize("side", DEPLOYMENTS)
def test_the_healer_acts_on_the_stable_sides_leak_alert_and_never_on_the_canarys(tmp_path, ports, side):
    """The healer restarts the stable vLLM through supervisord: an alert about the canary's exporter
    must not restart it (the canary is judged by `check --compare`, not healed)."""
    programs = _programs(tmp_path, True)
    healer = programs["healer"].command
    assert _option(healer, "--vllm-url") == ["http://127.0.0.1:18000"]
    instance = {"stable": "127.0.0.1:19405", "canary": "127.0.0.1:19407"}[side]
    alert = {
        "alertname": "HostMemoryLeak",
        "remediate": "true",
        "job": "leakwatch",
        "instance": instance,
        DEPLOYMENT_LABEL: side,
    }
    refusal = _healer_policy(programs).refusal(alert)
    if side == "stable":
        assert refusal is None
    else:
        assert refusal is not None and "127.0.0.1:19407" in refusal


def test_canary_env_turns_the_option_on(monkeypatch):
    monkeypatch.setenv("CANARY", "1")
    parser = argparse.ArgumentParser()
    stack_command.add_arguments(parser)
    assert parser.parse_args(["up"]).canary is True
    monkeypatch.setenv("CANARY", "")
    parser = argparse.ArgumentParser()
    stack_command.add_arguments(parser)
    assert parser.parse_args(["up"]).canary is False


def test_the_drill_stack_takes_every_argument_up_passes_and_speeds_up_both_exporters(tmp_path, ports):
    """DrillStack overrides programs(): it must take what NativeStack.up passes (a clean-clone CI
    once failed every drill test on a TypeError here) and pace the canary's exporter too."""
    from leakwatch.drill.orchestrator import DrillStack

    stack = DrillStack(StateLayout(tmp_path))
    stack.compression = 60
    found = stack.programs(profiles.load("demo"), None, None, True, None, None)
    paced = {p.name for p in found if "--sample-interval" in p.command}
    assert paced == {"leakwatch-exporter", "leakwatch-exporter-canary"}
