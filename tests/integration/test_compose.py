"""compose.yaml, validated by the real Docker Compose v2 binary for every model profile."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from leakwatch.core import profiles
from leakwatch.core.paths import REPO_ROOT
from tests.support.compose_support import compose, policy_violations, resolved


@pytest.mark.parametrize("profile", profiles.available())
def test_compose_validates_for_each_profile(profile):
    result = compose("--profile", profile, "config", "--quiet", env={"GRAFANA_ADMIN_PASSWORD": "test-only"})
    assert result.returncode == 0, result.stderr
    config = resolved(profile)
    assert f"vllm-{profile}" in config["services"]
    others = [f"vllm-{p}" for p in profiles.available() if p != profile]
    assert not set(others) & set(config["services"]), "only the selected profile's vLLM may run"


@pytest.mark.parametrize("profile", profiles.available())
def test_images_pinned_and_ports_on_loopback_by_default(profile):
    assert policy_violations(resolved(profile)) == []


def test_policy_check_catches_unpinned_images_and_open_ports(tmp_path):
    doc = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())
    doc["services"]["prometheus"]["image"] = "prom/prometheus"
    doc["services"]["alertmanager"]["image"] = "prom/alertmanager:latest"
    doc["services"]["grafana"]["ports"] = ["3000:3000"]
    bad = tmp_path / "compose.yaml"
    bad.write_text(yaml.safe_dump(doc))
    for folder in ("prometheus", "alertmanager", "grafana"):  # bind-mount sources next to the copy
        if (REPO_ROOT / folder).is_dir():
            shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    problems = policy_violations(resolved("demo", compose_file=bad))
    assert any("prometheus: image 'prom/prometheus'" in p for p in problems)
    assert any("alertmanager: image 'prom/alertmanager:latest'" in p for p in problems)
    assert any(p.startswith("grafana: port 3000 bound to") for p in problems)


def test_bind_address_is_an_explicit_opt_in():
    config = resolved("demo", env={"BIND_ADDRESS": "0.0.0.0"})
    host_ips = {p["host_ip"] for s in config["services"].values() for p in s.get("ports", [])}
    assert host_ips == {"0.0.0.0"}


def test_compose_refuses_to_start_without_grafana_password():
    result = compose("--profile", "demo", "config", "--quiet", env={"GRAFANA_ADMIN_PASSWORD": ""})
    assert result.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in result.stderr and ".env" in result.stderr


def test_grafana_has_no_default_login():
    grafana = resolved("demo", env={"GRAFANA_ADMIN_PASSWORD": "from-env"})["services"]["grafana"]
    env = grafana["environment"]
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == "from-env"
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"


@pytest.mark.parametrize("profile", profiles.available())
def test_vllm_service_shape(profile):
    prof = profiles.load(profile)
    config = resolved(profile)
    vllm = config["services"][f"vllm-{profile}"]
    assert "vllm" in vllm["networks"]["default"]["aliases"]
    assert vllm.get("ipc") == "host" or vllm.get("shm_size")
    assert vllm["healthcheck"]["test"], "vLLM needs a healthcheck"
    assert vllm["restart"] == "unless-stopped"
    assert "hf-cache" in {v.get("source") for v in vllm["volumes"]}
    devices = vllm.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    if prof.needs_gpu:
        assert devices and devices[0]["capabilities"] == ["gpu"] and devices[0]["count"] == prof.gpu_count
        assert "dcgm-exporter" in config["services"]
    else:
        assert not devices
        assert "dcgm-exporter" not in config["services"]
    for name, dep in vllm.get("depends_on", {}).items():
        assert dep["condition"] == "service_completed_successfully"
        assert config["services"][name]["restart"] == "no"


def test_env_example_is_committed_and_env_is_ignored():
    assert (REPO_ROOT / ".env.example").is_file()
    assert "/.env" in (REPO_ROOT / ".gitignore").read_text().splitlines()
    example = (REPO_ROOT / ".env.example").read_text()
    assert re.search(r"^GRAFANA_ADMIN_PASSWORD=$", example, re.M), "the example must not carry a password"
