"""Facts with one home that the rest reads (issue "'Defined once' still leaks"): compose's service
names and network aliases (core/topology.py), the chart's scrape jobs (keyed by topology's jobs),
and the files under the state folder (core/state_layout.py). tests/unit/test_layering.py checks that
no module outside the core writes them itself; this checks that the files the generators write and
the runners read agree with those homes."""

from __future__ import annotations

import yaml

from leakwatch.core import profiles
from leakwatch.core.paths import REPO_ROOT
from leakwatch.core.settings import load as load_settings
from leakwatch.core.state_layout import StateLayout
from leakwatch.core.topology import (
    COMPOSE_HOSTS,
    COMPOSE_SELF_SCRAPE,
    CORE_JOBS,
    DCGM_JOB,
    compose_jobs,
    compose_url,
    exporter_service,
    vllm_service,
)
from leakwatch.drill.compose_backend import write_override
from leakwatch.heal import healer_settings
from leakwatch.helm import identity
from leakwatch.helm.chart_files import CHART_DIR
from leakwatch.stack import compose_runner, local_images


def load(path) -> dict:
    return yaml.safe_load((REPO_ROOT / path).read_text())


def test_every_compose_host_is_a_service_or_an_alias_in_the_compose_files():
    names: set[str] = set()
    for path in ("compose.yaml", "compose.canary.yaml"):
        for name, service in load(path)["services"].items():
            names.add(name)
            networks = service.get("networks")
            if isinstance(networks, dict):
                names.update(networks.get("default", {}).get("aliases", []))
    assert set(COMPOSE_HOSTS.values()) - names == set()


def test_compose_scrapes_and_calls_each_service_by_its_compose_host():
    settings = load_settings()
    compose = load("compose.yaml")
    for job in compose_jobs(settings):
        for target in job.targets:
            host = target.rpartition(":")[0]
            service = CORE_JOBS[job.name]
            assert host == COMPOSE_SELF_SCRAPE.get(service, COMPOSE_HOSTS[service]), job
    exporter = compose["services"][exporter_service("demo")]
    healer = compose["services"][COMPOSE_HOSTS["healer"]]
    for command in (exporter["command"], healer["command"]):
        assert command[command.index("--vllm-url") + 1] == compose_url(settings, "vllm")


def test_each_profile_has_the_services_topology_names(tmp_path):
    services = load("compose.yaml")["services"]
    for name in profiles.available():
        assert services[exporter_service(name)]["pid"] == f"service:{vllm_service(name)}"
    # The compose drill overrides the services compose.yaml has, not services of its own.
    override = yaml.safe_load(write_override(tmp_path, "demo", 60.0, 1.0, 1024).read_text())["services"]
    assert set(override) <= set(services)
    assert {vllm_service("demo"), exporter_service("demo")} <= set(override)


def test_the_charts_jobs_are_topologys_jobs_under_kubernetes_names():
    assert set(identity.JOBS) <= set(CORE_JOBS) | {DCGM_JOB}
    # The healer's remediable jobs (compose's and native's names) each have a Kubernetes name.
    assert set(healer_settings.load().jobs) <= set(identity.JOBS)
    facts = yaml.safe_load((CHART_DIR / "files" / "generated" / "facts.yaml").read_text())
    assert sorted(facts["jobs"].values()) == sorted(identity.JOBS.values())
    assert facts["remediableJobs"] == sorted(identity.JOBS[job] for job in healer_settings.load().jobs)


def test_the_compose_runners_and_the_image_builds_files_follow_the_state_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LEAKWATCH_STATE_DIR", str(tmp_path))
    layout = StateLayout.current()
    assert layout.root == tmp_path.resolve()
    assert local_images._build_dir() == layout.docker == tmp_path.resolve() / "docker"
    assert compose_runner.router_admin_socket() == layout.compose_router_socket
    compose_runner._remember(local=True, model="demo")
    assert layout.compose_record.exists() and compose_runner.recorded()["model"] == "demo"
    compose_runner._forget()
    assert not layout.compose_record.exists()
