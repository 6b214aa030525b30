"""Which services the stack runs and how Prometheus reaches each of them, per runner.

The one list both runners use: adding a service here adds its scrape job to compose and native alike.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .settings import StackSettings

# supervisord's program name for vLLM in the native runner (the healer's restarter stops and starts it).
VLLM_PROGRAM = "vllm"
# ... for the healer (drills that must not be healed stop it) and the canary router.
HEALER_PROGRAM = "healer"
CANARY_ROUTER_PROGRAM = "canary-router"

# The canary rollout's two sides (docs/canary.md): HAProxy's server names in the router and the
# values of the `deployment` label Prometheus puts on each side's series.
DEPLOYMENTS = ("stable", "canary")
DEPLOYMENT_LABEL = "deployment"
# With the canary, these jobs scrape one target per side: the stable one is the job's own service,
# the canary one this service in config/stack.yaml.
CANARY_SERVICES = {"vllm": "vllm_canary", "leakwatch": "leakwatch_exporter_canary"}
VLLM_CANARY_PROGRAM = "vllm-canary"

# Prometheus job name -> service in config/stack.yaml. Always present in both runners.
CORE_JOBS = {
    "prometheus": "prometheus",
    "alertmanager": "alertmanager",
    "node": "node_exporter",
    "vllm": "vllm",
    "healer": "healer",
    "leakwatch": "leakwatch_exporter",
}


# How Prometheus reaches one job (leakwatch.generate.prometheus_config writes it out).
@dataclass(frozen=True)
class ScrapeJob:
    name: str
    targets: list[str]
    metrics_path: str = "/metrics"
    # Compose discovers optional services (e.g. DCGM on GPU profiles) by DNS, so a service that is
    # not running has no target at all instead of a target that is down.
    dns_names: tuple[str, ...] = ()
    dns_port: int | None = None
    # Services that write their own target file while they run (a load test) use file_sd: no file,
    # no target, so nothing sits `down` when they are not running.
    file_sd: tuple[str, ...] = ()
    # Labels Prometheus adds to one target's series (static targets only), e.g. its deployment.
    target_labels: dict[str, dict[str, str]] = field(default_factory=dict)


# Compose service names (DNS names on the compose network), by service in config/stack.yaml. Every
# compose file names these services by them (the keys of its `services:`, or a network alias).
COMPOSE_HOSTS = {
    "prometheus": "prometheus",
    "alertmanager": "alertmanager",
    "node_exporter": "node-exporter",
    "vllm": "vllm",
    "dcgm_exporter": "dcgm-exporter",
    "healer": "healer",
    "leakwatch_exporter": "leakwatch-exporter",  # network alias of the selected profile's exporter
    "docker_socket_proxy": "docker-socket-proxy",
    # The canary rollout (compose.canary.yaml): network aliases of the selected profile's canary side.
    "vllm_canary": "vllm-canary",
    "leakwatch_exporter_canary": "leakwatch-exporter-canary",
    "canary_router": "canary-router",
    "grafana": "grafana",
}
# Prometheus scrapes itself on its own loopback, not through its name on the compose network.
COMPOSE_SELF_SCRAPE = {"prometheus": "localhost"}
# Scraped only where a GPU profile runs it (compose finds it by DNS; the chart by its own job).
DCGM_JOB = "dcgm"
# Where Alertmanager posts remediation alerts to the healer, in every runner and the chart.
HEALER_WEBHOOK_PATH = "/alerts"


def compose_address(settings: StackSettings, service: str) -> str:
    """host:port of a service from another container on the compose network."""
    return f"{COMPOSE_HOSTS[service]}:{settings.service(service).default_port}"


def compose_url(settings: StackSettings, service: str) -> str:
    """A service's URL from another container on the compose network."""
    return f"http://{compose_address(settings, service)}"


def _compose_scrape_address(settings: StackSettings, service: str) -> str:
    """Where compose's Prometheus scrapes a service: its compose address, or its own loopback."""
    if service in COMPOSE_SELF_SCRAPE:
        return f"{COMPOSE_SELF_SCRAPE[service]}:{settings.service(service).default_port}"
    return compose_address(settings, service)


def _job_of(service: str) -> str:
    return ({service: job for job, service in CORE_JOBS.items()} | {"dcgm_exporter": DCGM_JOB})[service]


def compose_target(settings: StackSettings, service: str) -> dict[str, str]:
    """The job and instance labels Prometheus gives a service's series under compose."""
    return {"instance": _compose_scrape_address(settings, service), "job": _job_of(service)}


# The label on every profile's vLLM container: what the healer restarts, and all the socket proxy
# lets it see, within its compose project (Docker's own label).
VLLM_CONTAINER_LABEL = "io.leakwatch.role=vllm"
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"


def profile_service(service: str, profile: str) -> str:
    """compose's service running `service` (config/stack.yaml) for one model profile: the network
    alias every profile's service of that kind carries (COMPOSE_HOSTS), then the profile's name."""
    return f"{COMPOSE_HOSTS[service]}-{profile}"


def vllm_service(profile: str) -> str:
    """compose's service for a profile's vLLM."""
    return profile_service("vllm", profile)


# Every profile's vLLM service starts with this (the healer maps one to its exporter by it).
VLLM_SERVICE_PREFIX = vllm_service("")


def exporter_service(profile: str) -> str:
    """compose's service for the exporter beside a profile's vLLM (in its PID namespace)."""
    return profile_service("leakwatch_exporter", profile)


def vllm_canary_service(profile: str) -> str:
    """compose's service for a profile's canary vLLM (compose.canary.yaml). Not named like the stable
    one (`vllm-<profile>`): the socket proxy's restart rule matches those names, and the healer never
    restarts the canary."""
    return profile_service(CANARY_SERVICES["vllm"], profile)


def exporter_canary_service(profile: str) -> str:
    """compose's service for the exporter beside a profile's canary vLLM."""
    return profile_service(CANARY_SERVICES["leakwatch"], profile)


def compose_container(project: str, service: str) -> str:
    """compose's name for a service's (single) container."""
    return f"{project}-{service}-1"


COMPOSE_SERVICE_LABEL = "com.docker.compose.service"


def docker_restart_wait_s(settings: StackSettings) -> int:
    """Docker's `t` when the healer restarts vLLM: seconds between SIGTERM and SIGKILL, vLLM's drain
    plus a margin. The healer sends exactly this and the socket proxy lets nothing else through
    (t=0 would kill vLLM with requests in flight)."""
    return int(settings.service("vllm").shutdown_timeout_s) + 15


def vllm_container_list_query(project: str, label: str = VLLM_CONTAINER_LABEL) -> str:
    """The one Docker listing query the socket proxy accepts, and exactly what the healer sends:
    the project's running vLLM containers."""
    filters = {"label": [f"{COMPOSE_PROJECT_LABEL}={project}", label], "status": ["running"]}
    return "filters=" + urllib.parse.quote(json.dumps(filters, separators=(",", ":")), safe="")


# A running load test (`locust -f loadtest/`) writes loadgen-*.json into a targets folder and removes
# it when it quits (leakwatch.loadgen.file_sd): compose reads ./prometheus/targets.
LOADGEN_JOB = "loadgen"
LOADGEN_FILES = "loadgen-*.json"
COMPOSE_TARGETS_DIR = "/etc/prometheus/targets"


# How the stack's own tools reach its servers on this host, and the names that all mean this host.
LOOPBACK_ADDRESS = "127.0.0.1"
LOOPBACK_HOSTS = (LOOPBACK_ADDRESS, "localhost", "::1")
WILDCARD_ADDRESSES = ("0.0.0.0", "::")


def reachable_host(bind_address: str) -> str:
    """The address that reaches, from this host, a server listening on `bind_address` (one that
    listens on every address is reached on the loopback)."""
    return LOOPBACK_ADDRESS if bind_address in WILDCARD_ADDRESSES else bind_address


def native_address(settings: StackSettings, service: str) -> str:
    """host:port of a service from the native stack's other processes (and its Prometheus)."""
    return f"{LOOPBACK_ADDRESS}:{settings.service(service).port}"


def native_url(settings: StackSettings, service: str) -> str:
    """A service's URL from the native stack's other processes."""
    return f"http://{native_address(settings, service)}"


def native_target(settings: StackSettings, service: str) -> dict[str, str]:
    """The job and instance labels Prometheus gives a service's series in the native stack."""
    return {"instance": native_address(settings, service), "job": _job_of(service)}


def _core_jobs(canary: bool, target: Callable[[str], str]) -> list[ScrapeJob]:
    """CORE_JOBS with `target(service)` as each one's address. canary: vLLM's and the exporter's jobs
    scrape both sides, each target labelled with its deployment; without it no target carries the label."""
    jobs = []
    for job, service in CORE_JOBS.items():
        if canary and job in CANARY_SERVICES:
            sides = dict(zip(DEPLOYMENTS, (service, CANARY_SERVICES[job]), strict=True))
            targets = {target(svc): {DEPLOYMENT_LABEL: side} for side, svc in sides.items()}
            jobs.append(ScrapeJob(job, list(targets), target_labels=targets))
        else:
            jobs.append(ScrapeJob(job, [target(service)]))
    return jobs


def native_jobs(settings: StackSettings, targets_dir: Path | None = None, canary: bool = False) -> list[ScrapeJob]:
    jobs = _core_jobs(canary, lambda service: native_address(settings, service))
    if targets_dir is not None:
        jobs.append(ScrapeJob(LOADGEN_JOB, [], file_sd=(str(Path(targets_dir) / LOADGEN_FILES),)))
    return jobs


def compose_jobs(settings: StackSettings, canary: bool = False) -> list[ScrapeJob]:
    """canary: prometheus/prometheus-canary.yml's jobs (compose.canary.yaml)."""
    jobs = _core_jobs(canary, lambda service: _compose_scrape_address(settings, service))
    dcgm_port = settings.service("dcgm_exporter").default_port
    jobs.append(ScrapeJob(DCGM_JOB, [], dns_names=(COMPOSE_HOSTS["dcgm_exporter"],), dns_port=dcgm_port))
    jobs.append(ScrapeJob(LOADGEN_JOB, [], file_sd=(f"{COMPOSE_TARGETS_DIR}/{LOADGEN_FILES}",)))
    return jobs
