"""The shipped Prometheus and Alertmanager configs pass the real promtool and amtool."""

from __future__ import annotations

import subprocess

import pytest

from leakwatch.core.paths import ALERTMANAGER_DIR, PROMETHEUS_DIR
from leakwatch.core.state_layout import StateLayout
from leakwatch.heal import token as heal_token
from leakwatch.native.runner import NativeStack


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", ["prometheus.yml", "prometheus-canary.yml"])
def test_compose_prometheus_config_passes_promtool(name):
    result = run("promtool", "check", "config", str(PROMETHEUS_DIR / name))
    assert result.returncode == 0, result.stdout + result.stderr


def test_native_prometheus_config_passes_promtool(tmp_path):
    stack = NativeStack(StateLayout(tmp_path))
    stack.layout.make_dirs()
    stack._render_configs([])
    result = run("promtool", "check", "config", str(stack.layout.conf / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "127.0.0.1:" in (stack.layout.conf / "prometheus.yml").read_text()


def test_alertmanager_config_passes_amtool():
    result = run("amtool", "check-config", str(ALERTMANAGER_DIR / "alertmanager.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_config(tmp_path):
    # Guard against a check that cannot fail (e.g. promtool missing and the call swallowed).
    bad = tmp_path / "prometheus.yml"
    bad.write_text("scrape_configs:\n  - job_name: x\n    scrape_interval: often\n")
    assert run("promtool", "check", "config", str(bad)).returncode != 0


def test_native_alertmanager_config_passes_amtool_and_keeps_its_token_private(tmp_path):
    stack = NativeStack(StateLayout(tmp_path))
    stack.layout.make_dirs()
    stack._render_configs([])
    rendered = stack.layout.conf / "alertmanager.yml"
    result = run("amtool", "check-config", str(rendered))
    assert result.returncode == 0, result.stdout + result.stderr
    text = rendered.read_text()
    assert f"credentials_file: {stack.layout.healer_token}" in text
    assert "url: http://127.0.0.1:" in text and "/alerts" in text
    token = stack.layout.healer_token
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text().strip()) >= heal_token.MIN_LENGTH
    # A second start keeps the token the healer already knows.
    before = token.read_text()
    stack._render_configs([])
    assert token.read_text() == before


def test_amtool_rejects_a_broken_config(tmp_path):
    bad = tmp_path / "alertmanager.yml"
    bad.write_text("route:\n  receiver: nobody\nreceivers:\n  - name: default\n")
    assert run("amtool", "check-config", str(bad)).returncode != 0
