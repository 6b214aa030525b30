"""Which services the stack runs and how Prometheus reaches each of them, per runner.

The one list both runners use: adding a service here adds its scrape job to compose and native alike.
"""

from __future__ import annotations

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


def native_jobs(settings: StackSettings) -> list[ScrapeJob]:
    return [
        ScrapeJob(job, [f"127.0.0.1:{settings.service(service).port}"])
        for job, service in CORE_JOBS.items()
    ]


def compose_jobs(settings: StackSettings) -> list[ScrapeJob]:
    jobs = [
        ScrapeJob(job, [f"{COMPOSE_HOSTS[service]}:{settings.service(service).default_port}"])
        for job, service in CORE_JOBS.items()
    ]
    dcgm_port = settings.service("dcgm_exporter").default_port
    jobs.append(ScrapeJob("dcgm", [], dns_names=(COMPOSE_HOSTS["dcgm_exporter"],), dns_port=dcgm_port))
    return jobs
