"""The healer's allowlist (config/healer.yaml) and what routes to it cannot disagree: every rule
labelled for remediation is on the list, and the shipped Alertmanager routing (checked with the real
amtool) sends the healer exactly the allowed alerts."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from leakwatch.core.paths import REPO_ROOT
from leakwatch.heal import healer_settings

# Runs the real healer, supervisord, Alertmanager, Prometheus or amtool as processes.

RULES = REPO_ROOT / "prometheus" / "rules" / "leakwatch-alerts.yml"
ROUTES = REPO_ROOT / "alertmanager" / "alertmanager.yml"


def remediated_rules() -> set[str]:
    cfg = healer_settings.load()
    doc = yaml.safe_load(RULES.read_text())
    return {
        r["alert"]
        for g in doc["groups"]
        for r in g["rules"]
        if "alert" in r and r.get("labels", {}).get(cfg.label_name) == cfg.label_value
    }


def test_every_rule_labelled_for_remediation_is_on_the_allowlist_and_back():
    assert remediated_rules() == set(healer_settings.load().alerts)


def receivers(*labels: str) -> list[str]:
    result = subprocess.run(
        ["amtool", "config", "routes", "test", f"--config.file={ROUTES}", *labels],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(",")


@pytest.mark.parametrize("alertname", sorted(healer_settings.load().alerts))
@pytest.mark.parametrize("job", sorted(healer_settings.load().jobs))
def test_allowed_alerts_route_to_the_healer(alertname, job):
    assert "remediation" in receivers(f"alertname={alertname}", f"job={job}", "remediate=true", "severity=critical")


@pytest.mark.parametrize(
    "labels",
    [
        ["alertname=TotallyNotALeak", "job=leakwatch", "remediate=true"],
        ["alertname=HostMemoryLeak", "job=node", "remediate=true"],
        ["alertname=HostMemoryLeak", "remediate=true"],
        ["alertname=HostMemoryLeak", "job=leakwatch"],
    ],
)
def test_other_alerts_never_route_to_the_healer(labels):
    assert "remediation" not in receivers(*labels, "severity=critical")


def test_a_target_outside_the_jobs_is_refused(tmp_path):
    from leakwatch.core.errors import LeakwatchError

    cfg = healer_settings.load()
    with pytest.raises(LeakwatchError, match="JOB=INSTANCE"):
        healer_settings.with_targets(cfg, ["leakwatch"])
    narrowed = healer_settings.with_targets(cfg, ["leakwatch=127.0.0.1:9405"])
    base = {"remediate": "true", "alertname": "HostMemoryLeak", "job": "leakwatch"}
    assert narrowed.refusal({**base, "instance": "127.0.0.1:9405"}) is None
    assert "not this healer's" in narrowed.refusal({**base, "instance": "other-host:9405"})
    # Issue 32 N6: with targets named, a job without one is not this stack's (natively: no dcgm job).
    assert (
        narrowed.refusal({**base, "alertname": "GPUMemoryLeakSuspected", "job": "dcgm", "instance": "other-host:9400"})
        == "job 'dcgm' is not scraped by this healer's stack (its --target jobs: leakwatch)"
    )
    # Without any target, the job allowlist alone applies (compose: the dcgm job is scraped by DNS).
    assert cfg.refusal({**base, "job": "dcgm", "instance": "anything"}) is None
    bad = tmp_path / "healer.yaml"
    raw = yaml.safe_load(healer_settings.CONFIG_FILE.read_text())
    raw["remediable"]["alerts"] = []
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(LeakwatchError, match=r"remediable\.alerts"):
        healer_settings.load(bad)
