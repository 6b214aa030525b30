"""The drill's compose backend: the same injection and time compression as the native drill
(leakwatch/drill/orchestrator.py), as a compose override on top of compose.yaml (+ compose.local.yaml).

The override, written into a private folder, changes only what a drill changes natively:
- vLLM gets the leak middleware (the repository mounted read-only on its PYTHONPATH) and its settings;
- the exporter samples faster by the compression (as DrillStack does natively);
- Prometheus scrapes and evaluates every `scrape_interval_s` with the time-compressed rules;
- Alertmanager runs the production routing with its timings compressed.
Everything else (the healer, the socket proxy, networks, volumes) is the production stack's.
"""

from __future__ import annotations

from pathlib import Path

from ..core import yamlfmt
from ..core.paths import REPO_ROOT
from ..core.settings import load as load_settings
from ..core.topology import COMPOSE_HOSTS, exporter_service, vllm_service
from ..generate.alertmanager_config import compose_alertmanager_config
from ..generate.compose import SOURCE_DIR, compose_document, compose_prometheus_config
from . import leak_middleware
from .drill_settings import scaled_alertmanager, with_scrape_interval, write_rules

MIDDLEWARE = "leakwatch.drill.leak_middleware.leak_memory"
HEADER = "Drill override for compose (leakwatch/drill/compose_backend.py), written at run time - do not commit."


def write_override(
    folder: Path,
    profile: str,
    compression: float,
    scrape_interval_s: float,
    bytes_per_request: int,
    path_prefix: str = "/v1/completions",
    device: str = "cpu",
) -> Path:
    """Writes the drill's Prometheus/Alertmanager configs and the override file into `folder`;
    returns the override's path (pass it to compose after compose.yaml)."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    settings = with_scrape_interval(load_settings(), scrape_interval_s)
    rules = folder / "rules"
    write_rules(rules, compression, scrape_interval_s)
    (folder / "prometheus.yml").write_text(yamlfmt.dump(compose_prometheus_config(settings), HEADER))
    am = scaled_alertmanager(compose_alertmanager_config(settings), compression, repeat_s=5.0)
    (folder / "alertmanager.yml").write_text(yamlfmt.dump(am, HEADER))
    for path in [folder, rules, *folder.rglob("*")]:  # the containers' users (nobody) read them
        path.chmod(0o755 if path.is_dir() else 0o644)

    base = compose_document()["services"]
    vllm, exporter = vllm_service(profile), exporter_service(profile)
    override = {
        "services": {
            vllm: {
                "command": [*base[vllm]["command"], "--middleware", MIDDLEWARE],
                "environment": {
                    "PYTHONPATH": SOURCE_DIR,
                    leak_middleware.BYTES_ENV: str(bytes_per_request),
                    leak_middleware.PREFIX_ENV: path_prefix,
                    leak_middleware.DEVICE_ENV: device,
                },
                "volumes": [f"{REPO_ROOT}:{SOURCE_DIR}:ro"],
            },
            exporter: {
                "command": [
                    *base[exporter]["command"],
                    "--sample-interval",
                    f"{max(5.0 / compression, 0.5):g}",
                    "--smaps-interval",
                    f"{max(60.0 / compression, 1.0):g}",
                    "--baseline-idle-wait",
                    f"{max(60.0 / compression, 2.0):g}",
                ]
            },
            COMPOSE_HOSTS["prometheus"]: {
                "volumes": [
                    f"{folder / 'prometheus.yml'}:/etc/prometheus/prometheus.yml:ro",
                    f"{rules}:/etc/prometheus/rules:ro",
                ]
            },
            COMPOSE_HOSTS["alertmanager"]: {
                "volumes": [f"{folder / 'alertmanager.yml'}:/etc/alertmanager/alertmanager.yml:ro"]
            },
        }
    }
    path = folder / "compose.drill.yaml"
    path.write_text(yamlfmt.dump(override, HEADER))
    return path
