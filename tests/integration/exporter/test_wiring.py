"""The exporter in both runners: a native program with a health path, a scrape job for each runner,
and a compose service per model profile inside that profile's vLLM PID namespace."""

from __future__ import annotations

import re

import pytest

from leakwatch.core import profiles
from leakwatch.core.paths import REPO_ROOT
from leakwatch.core.settings import load as load_settings
from leakwatch.core.state_layout import StateLayout
from leakwatch.core.topology import compose_jobs, native_jobs
from leakwatch.exporter.server import HEALTH_PATH
from leakwatch.native.programs import stack_programs
from tests.support.compose_support import resolved


def test_native_stack_runs_the_exporter_against_its_vllm(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_PORT", "18000")
    monkeypatch.setenv("LEAKWATCH_EXPORTER_PORT", "19405")
    programs = {p.name: p for p in stack_programs(load_settings(), profiles.load("demo"), StateLayout(tmp_path))}
    exporter = programs["leakwatch-exporter"]
    assert exporter.service == "leakwatch_exporter"
    assert load_settings().service("leakwatch_exporter").health_path == HEALTH_PATH
    command = " ".join(exporter.command)
    assert "-m leakwatch exporter" in command
    assert "--vllm-url http://127.0.0.1:18000" in command and "--port 19405" in command
    assert "--listen-address 127.0.0.1" in command
    assert f"--state-file {tmp_path / 'data' / 'leakwatch-exporter.json'}" in command


def test_both_runners_scrape_the_exporter(monkeypatch):
    monkeypatch.setenv("LEAKWATCH_EXPORTER_PORT", "19405")
    settings = load_settings()
    native = {job.name: job.targets for job in native_jobs(settings)}
    compose = {job.name: job.targets for job in compose_jobs(settings)}
    assert native["leakwatch"] == ["127.0.0.1:19405"]
    assert compose["leakwatch"] == ["leakwatch-exporter:9405"]


@pytest.mark.parametrize("profile", profiles.available())
def test_compose_exporter_per_profile(profile):
    prof = profiles.load(profile)
    config = resolved(profile)
    name = f"leakwatch-exporter-{profile}"
    exporter = config["services"][name]
    others = {f"leakwatch-exporter-{p}" for p in profiles.available() if p != profile}
    assert not others & set(config["services"])
    assert exporter["pid"] == f"service:vllm-{profile}"
    assert exporter["read_only"] is True and exporter["cgroup"] == "host"
    assert exporter["image"] == "leakwatch:0.1.0" and exporter["build"]["dockerfile"] == "docker/leakwatch.Dockerfile"
    assert exporter["build"]["args"]["BASE_IMAGE"] == load_settings().service("leakwatch_exporter").extra["base_image"]
    assert "leakwatch-exporter" in exporter["networks"]["default"]["aliases"]
    assert exporter["command"][:2] == ["--vllm-url", "http://vllm:8000"]
    # The state file outlives the container, which a vLLM restart takes down with its PID namespace.
    state = exporter["command"][exporter["command"].index("--state-file") + 1]
    mounts = {v["target"]: v for v in exporter["volumes"]}
    assert state.startswith("/var/lib/leakwatch/") and mounts["/var/lib/leakwatch"]["source"] == "leakwatch-state"
    assert not mounts["/var/lib/leakwatch"].get("read_only")
    assert [p["host_ip"] for p in exporter["ports"]] == ["127.0.0.1"]
    assert HEALTH_PATH in " ".join(exporter["healthcheck"]["test"])
    has_gpus = bool(exporter.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices"))
    assert has_gpus == prof.needs_gpu


def test_dockerfile_takes_its_base_from_stack_yaml():
    dockerfile = (REPO_ROOT / "docker" / "leakwatch.Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE$", dockerfile, re.M) and "FROM ${BASE_IMAGE}" in dockerfile
    assert 'pip install -e ".[gpu,k8s]"' in dockerfile
    assert 'ENTRYPOINT ["leakwatch", "exporter"]' in dockerfile
    base = load_settings().service("leakwatch_exporter").extra["base_image"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base), base
