"""The drill's pieces that need no vLLM: time-scaled Alertmanager timings, its settings file, the
memory cgroup it puts vLLM in (a real cgroup on this machine)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from leakwatch.core.errors import LeakwatchError
from leakwatch.core.settings import load as load_settings
from leakwatch.drill import drill_settings
from leakwatch.drill.cgroup_limit import MemoryCgroup
from leakwatch.generate.alertmanager_config import compose_alertmanager_config
from leakwatch.heal.alertmanager import localize

AM = {
    "route": {
        "receiver": "default",
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "4h",
        "routes": [
            {"matchers": ['remediate="true"'], "receiver": "remediation", "continue": True},
            {"matchers": ['severity="critical"'], "receiver": "page", "repeat_interval": "1h"},
        ],
    },
    "receivers": [
        {"name": "default"},
        {"name": "page"},
        {
            "name": "remediation",
            "webhook_configs": [
                {
                    "url": "http://healer:9406/alerts",
                    "send_resolved": True,
                    "http_config": {
                        "authorization": {"type": "Bearer", "credentials_file": "/run/secrets/healer_token"}
                    },
                }
            ],
        },
    ],
}


def test_alertmanager_timings_scale_and_the_healer_route_repeats_fast():
    out = drill_settings.scaled_alertmanager(AM, 60, repeat_s=5)
    assert out["route"]["group_wait"] == "1s"  # 30 s / 60, at least 1 s
    assert out["route"]["group_interval"] == "5s"  # 5 m / 60
    assert out["route"]["repeat_interval"] == "240s"  # 4 h / 60
    healer_route, page_route = out["route"]["routes"]
    assert healer_route["repeat_interval"] == "5s"
    assert page_route["repeat_interval"] == "60s"
    assert AM["route"]["group_wait"] == "30s"  # the production document is left alone


def test_the_production_routing_scales_and_still_passes_amtool(tmp_path):
    out = drill_settings.scaled_alertmanager(compose_alertmanager_config(load_settings()), 60, repeat_s=5)
    watchdog = next(r for r in out["route"]["routes"] if 'alertname="Watchdog"' in r["matchers"])
    assert watchdog["group_wait"] == "0s"  # zero stays zero
    assert watchdog["repeat_interval"] == "5s"  # 5 m / 60
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(out))
    result = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_config_without_the_healer_receiver_is_refused():
    with pytest.raises(LeakwatchError, match="no webhook receiver for the healer"):
        drill_settings.scaled_alertmanager(
            {"route": {"receiver": "default"}, "receivers": [{"name": "default"}]}, 60, 5
        )


def test_the_webhook_is_pointed_at_the_stack_healer_and_its_token_file():
    out = localize(AM, "http://127.0.0.1:4242", "/state/secrets/healer-token")
    hook = out["receivers"][2]["webhook_configs"][0]
    assert hook["url"] == "http://127.0.0.1:4242/alerts"
    assert hook["http_config"]["authorization"] == {"type": "Bearer", "credentials_file": "/state/secrets/healer-token"}
    assert AM["receivers"][2]["webhook_configs"][0]["url"] == "http://healer:9406/alerts"


def test_drill_settings_are_consistent():
    cfg = drill_settings.load()
    # The rules' shortest window (10 min) must span at least four scrapes once compressed.
    assert 600 / cfg.time_compression >= 4 * cfg.scrape_interval_s
    assert cfg.wall(cfg.control_span_s) >= 60 and 0 < cfg.max_estimate_error <= 0.15
    assert cfg.bytes_per_request > 0 and cfg.cgroup_headroom_bytes > 100 * cfg.bytes_per_request


def test_memory_cgroup_limits_a_real_process():
    group = MemoryCgroup.create(f"leakwatch-test-{os.getpid()}")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        group.adopt([proc.pid])
        assert str(proc.pid) in (group.path / "cgroup.procs").read_text().split()
        group.set_limit(256 * 2**20)
        limit_file = "memory.limit_in_bytes" if group.version == 1 else "memory.max"
        assert int((group.path / limit_file).read_text()) == 256 * 2**20
        assert group.usage() >= 0
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        group.remove()
    assert not group.path.exists()


def test_memory_cgroup_counts_the_oom_killers_work():
    """What the fast-leak drill watches: a process that outgrows its cgroup's limit is ended by the
    kernel's OOM killer, and oom_kills() counts it (swap off for the cgroup, so it cannot hide there)."""
    group = MemoryCgroup.create(f"leakwatch-test-oom-{os.getpid()}")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline(); x = bytearray(512 * 2**20); print(len(x))"],
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        group.adopt([proc.pid])
        group.set_limit(128 * 2**20)
        assert group.limit() == 128 * 2**20
        swap = group.path / ("memory.swap.max" if group.version == 2 else "memory.memsw.limit_in_bytes")
        if swap.exists():
            swap.write_text("0" if group.version == 2 else str(128 * 2**20))
        assert group.oom_kills() == 0
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == -9
        assert group.oom_kills() == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        group.remove()


def test_the_fast_leak_variant_exhausts_its_headroom_within_the_hour():
    """config/drill.yaml's fast_leak: its leak would use up the headroom in 20-60 production minutes
    (a fast leak, yet later than the rule's window, warm-up and `for`), and its compression leaves
    the fast rules at least four scrapes per slice."""
    from leakwatch.core import alert_config
    from leakwatch.rules.profile_values import warmup_after_ready_s

    fast = drill_settings.load().as_fast_leak()
    assert fast.control_span_s == 0
    minutes = fast.cgroup_headroom_bytes / (fast.bytes_per_request * fast.requests_per_day / 1440)
    host = alert_config.load().section("host")
    earliest = (host.seconds("runout_window") + warmup_after_ready_s() + host.seconds("runout_for")) / 60
    assert earliest + 15 < minutes < 60, (earliest, minutes)
    slice_s = host.seconds("runout_window") / host.slices("runout_slices") / fast.time_compression
    assert slice_s >= 4 * fast.scrape_interval_s


def test_the_canary_drill_gives_the_canary_enough_requests_for_its_own_check():
    """config/drill.yaml's canary: at the router's default split the canary side is expected to serve
    what its own check needs (compare.requests_for_a_check: min_requests after the warm-up, with two
    standard deviations to spare), so a verdict can come within the span; the compression leaves the
    check's warm-up several scrapes long."""
    from leakwatch.canary.router import default_split
    from leakwatch.core.settings import load as load_settings
    from leakwatch.leakcheck import verdict_thresholds
    from leakwatch.leakcheck.compare import requests_for_a_check

    canary = drill_settings.load().as_canary()
    assert canary.control_span_s == 0
    check = verdict_thresholds.load()
    share = default_split(load_settings()).weights["canary"] / 100
    expected_on_canary = canary.requests_per_day * canary.leak_span_s / 86400 * share
    assert expected_on_canary >= requests_for_a_check(check), expected_on_canary
    assert canary.wall(check.warmup_seconds) >= 4 * canary.scrape_interval_s
