"""Grafana provisioning as compose runs it: every path the provisioning files use is mounted (read
from the config the real Docker Compose binary resolves), the data sources point at compose's
services, and every dashboard query uses the provisioned Prometheus uid."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import pytest
import yaml

from leakwatch.core.paths import PROMETHEUS_DIR
from leakwatch.dashboards.files import DASHBOARDS_DIR, DATASOURCES_FILE, PROVIDER_FILE, PROVISIONING_DIR
from leakwatch.dashboards.provisioning import PROVISIONING_PATH
from tests.support.compose_support import resolved

# The provisioning subfolders Grafana reads, by what they hold.
KINDS = {"datasources": "datasources", "providers": "dashboards"}


def bind_mounts(grafana_service: dict) -> dict[PurePosixPath, Path]:
    """Container path -> host path of the service's bind mounts."""
    return {
        PurePosixPath(v["target"]): Path(v["source"])
        for v in grafana_service.get("volumes", [])
        if v.get("type") == "bind"
    }


def host_path(mounts: dict[PurePosixPath, Path], container_path: str) -> Path | None:
    """The host file or folder behind a container path, through the deepest mount holding it."""
    path = PurePosixPath(container_path)
    best = max((m for m in mounts if path == m or m in path.parents), key=lambda m: len(m.parts), default=None)
    return None if best is None else mounts[best] / path.relative_to(best)


def provisioning_problems(config: dict) -> list[str]:
    """Paths the provisioning uses that compose does not mount where Grafana looks."""
    mounts = bind_mounts(config["services"]["grafana"])
    problems = []
    provisioning_host = host_path(mounts, PROVISIONING_PATH)
    if provisioning_host is None:
        return [f"{PROVISIONING_PATH} is not mounted"]
    for path in sorted(PROVISIONING_DIR.rglob("*.yml")):
        document = yaml.safe_load(path.read_text())
        kind = next(k for k in KINDS if k in document)
        want = provisioning_host.resolve() / KINDS[kind] / path.name
        if want != path.resolve():
            problems.append(
                f"{path}: Grafana reads {kind} from {PROVISIONING_PATH}/{KINDS[kind]}, which is {want} on the host"
            )
        for provider in document.get("providers", []):
            folder = host_path(mounts, provider["options"]["path"])
            if folder is None:
                problems.append(f"{path}: provider path {provider['options']['path']} is not mounted")
            elif sorted(p.name for p in folder.glob("*.json")) != sorted(p.name for p in DASHBOARDS_DIR.glob("*.json")):
                problems.append(
                    f"{path}: {provider['options']['path']} is {folder} on the host, not grafana/dashboards"
                )
    return problems


@pytest.fixture(scope="module")
def compose_config() -> dict:
    return resolved("demo")


def test_compose_mounts_every_provisioning_path(compose_config):
    assert provisioning_problems(compose_config) == []
    assert all(v["read_only"] for v in compose_config["services"]["grafana"]["volumes"] if v["type"] == "bind")


def test_mount_check_catches_a_missing_dashboards_mount(compose_config):
    broken = json.loads(json.dumps(compose_config))
    broken["services"]["grafana"]["volumes"] = [
        v for v in broken["services"]["grafana"]["volumes"] if "dashboards" not in v.get("target", "")
    ]
    assert any("not mounted" in p or "not grafana/dashboards" in p for p in provisioning_problems(broken))


def test_data_sources_point_at_compose_services(compose_config):
    services = compose_config["services"]
    for source in yaml.safe_load(DATASOURCES_FILE.read_text())["datasources"]:
        url = urlparse(source["url"])
        assert url.hostname in services, source
        listen = [a for a in services[url.hostname]["command"] if a.startswith("--web.listen-address=")]
        assert listen == [f"--web.listen-address=:{url.port}"], (source["name"], listen)


def test_rate_interval_matches_the_scrape_interval():
    prometheus = yaml.safe_load(DATASOURCES_FILE.read_text())["datasources"][0]
    scrape = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())["global"]["scrape_interval"]
    assert prometheus["type"] == "prometheus" and prometheus["jsonData"]["timeInterval"] == scrape


def _datasource_refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("datasource"), dict):
            yield node["datasource"]
        for value in node.values():
            yield from _datasource_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _datasource_refs(item)


@pytest.mark.parametrize("path", sorted(DASHBOARDS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_query_uses_the_provisioned_prometheus(path):
    provisioned = next(
        s for s in yaml.safe_load(DATASOURCES_FILE.read_text())["datasources"] if s["type"] == "prometheus"
    )
    document = json.loads(path.read_text())
    variable = next(v for v in document["templating"]["list"] if v["name"] == "datasource")
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    assert variable["current"]["value"] == provisioned["uid"]
    refs = list(_datasource_refs(document))
    assert len(refs) > 10
    assert all(ref == {"type": "prometheus", "uid": "${datasource}"} for ref in refs)


def test_provider_loads_into_one_folder_and_keeps_the_source_authoritative():
    provider = yaml.safe_load(PROVIDER_FILE.read_text())["providers"][0]
    assert provider["type"] == "file" and provider["folder"] == "leakwatch"
    assert provider["allowUiUpdates"] is False
