"""Which services the stack runs and how Prometheus reaches each of them, per runner.

The one list both runners use: adding a service here adds its scrape job to compose and native alike.
"""

from __future__ import annotations

from pathlib import Path

from .generate.prometheus_config import ScrapeJob
from .settings import StackSettings

# Prometheus job name -> service in config/stack.yaml. Always present in both runners.
CORE_JOBS = {
    "prometheus": "prometheus",
    "alertmanager": "alertmanager",
    "node": "node_exporter",
    "vllm": "vllm",
    "healer": "healer",
    "leakwatch": "leakwatch_exporter",
}

# Compose service names (DNS names on the compose network).
COMPOSE_HOSTS = {
    "prometheus": "localhost",
    "alertmanager": "alertmanager",
    "node_exporter": "node-exporter",
    "vllm": "vllm",
    "dcgm_exporter": "dcgm-exporter",
    "healer": "healer",
    "leakwatch_exporter": "leakwatch-exporter",  # network alias of the selected profile's exporter
}


# A running load test (`locust -f loadtest/`) writes loadgen-*.json into a targets folder and removes
# it when it quits (leakwatch.loadgen.discovery): compose reads ./prometheus/targets.
LOADGEN_JOB = "loadgen"
LOADGEN_FILES = "loadgen-*.json"
COMPOSE_TARGETS_DIR = "/etc/prometheus/targets"


def native_jobs(settings: StackSettings, targets_dir: Path | None = None) -> list[ScrapeJob]:
    jobs = [ScrapeJob(job, [f"127.0.0.1:{settings.service(service).port}"]) for job, service in CORE_JOBS.items()]
    if targets_dir is not None:
        jobs.append(ScrapeJob(LOADGEN_JOB, [], file_sd=(str(Path(targets_dir) / LOADGEN_FILES),)))
    return jobs


def compose_jobs(settings: StackSettings) -> list[ScrapeJob]:
    jobs = [
        ScrapeJob(job, [f"{COMPOSE_HOSTS[service]}:{settings.service(service).default_port}"])
        for job, service in CORE_JOBS.items()
    ]
    dcgm_port = settings.service("dcgm_exporter").default_port
    jobs.append(ScrapeJob("dcgm", [], dns_names=(COMPOSE_HOSTS["dcgm_exporter"],), dns_port=dcgm_port))
    jobs.append(ScrapeJob(LOADGEN_JOB, [], file_sd=(f"{COMPOSE_TARGETS_DIR}/{LOADGEN_FILES}",)))
    return jobs
