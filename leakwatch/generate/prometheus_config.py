"""prometheus.yml for both runners, from config/stack.yaml.

The runners differ only in where targets live (compose service names vs 127.0.0.1 ports), so one
function builds both and the scrape jobs cannot drift apart.
"""

from __future__ import annotations

from ..core.settings import StackSettings
from ..core.topology import ScrapeJob

# Jobs that scrape a server behind our basic auth (leakwatch/core/webauth.py).
AUTHENTICATED_JOBS = ("prometheus", "alertmanager")


def prometheus_config(
    settings: StackSettings,
    jobs: list[ScrapeJob],
    alertmanager_targets: list[str],
    rule_files: list[str],
    basic_auth: dict | None = None,
) -> dict:
    """basic_auth: credentials for our own Prometheus and Alertmanager (their web config), used by the
    alerting config and by the jobs that scrape them."""
    prom = settings.prometheus
    scrape_configs = []
    for job in jobs:
        entry: dict = {"job_name": job.name}
        if job.metrics_path != "/metrics":
            entry["metrics_path"] = job.metrics_path
        if job.dns_names:
            entry["dns_sd_configs"] = [
                {"names": list(job.dns_names), "type": "A", "port": job.dns_port, "refresh_interval": "30s"}
            ]
            # Name the instance after the service, not the container's changing IP.
            entry["relabel_configs"] = [
                {
                    "source_labels": ["__meta_dns_name"],
                    "target_label": "instance",
                    "regex": "(.+)",
                    "replacement": f"$1:{job.dns_port}",
                }
            ]
        elif job.file_sd:
            entry["file_sd_configs"] = [{"files": list(job.file_sd), "refresh_interval": "30s"}]
        elif job.target_labels:
            entry["static_configs"] = [
                {"targets": [target], "labels": dict(job.target_labels.get(target, {}))} for target in job.targets
            ]
        else:
            entry["static_configs"] = [{"targets": list(job.targets)}]
        if basic_auth and job.name in AUTHENTICATED_JOBS:
            entry["basic_auth"] = dict(basic_auth)
        scrape_configs.append(entry)
    alertmanager: dict = {"static_configs": [{"targets": alertmanager_targets}]}
    if basic_auth:
        alertmanager["basic_auth"] = dict(basic_auth)
    return {
        "global": {
            "scrape_interval": prom["scrape_interval"],
            "evaluation_interval": prom["evaluation_interval"],
        },
        "rule_files": rule_files,
        "alerting": {"alertmanagers": [alertmanager]},
        "scrape_configs": scrape_configs,
    }
