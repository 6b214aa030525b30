"""Compose's Prometheus and Alertmanager behind the same basic auth as natively: the web config and
password as compose secrets, health checks that log in, Prometheus's alerting and self-scrapes and
Grafana's data sources with credentials. Validated statically; the compose end-to-end test (issue 13)
starts the containers."""

from __future__ import annotations

import yaml

from leakwatch.generate import compose_webauth
from leakwatch.paths import REPO_ROOT


def load(path: str) -> dict:
    return yaml.safe_load((REPO_ROOT / path).read_text())


def test_prometheus_and_alertmanager_run_with_the_web_config_and_log_in_to_check_health():
    doc = load("compose.yaml")
    assert doc["secrets"][compose_webauth.WEB_CONFIG_SECRET]["file"] == "./secrets/web-config.yml"
    assert doc["secrets"][compose_webauth.PASSWORD_SECRET]["file"] == "./secrets/web-password"
    for name in ("prometheus", "alertmanager"):
        service = doc["services"][name]
        assert f"--web.config.file={compose_webauth.WEB_CONFIG_PATH}" in service["command"]
        assert {compose_webauth.WEB_CONFIG_SECRET, compose_webauth.PASSWORD_SECRET} <= set(service["secrets"])
        check = service["healthcheck"]["test"]
        assert check[0] == "CMD-SHELL" and "leakwatch:$$(cat /run/secrets/web_password)@localhost" in check[1]
        assert "--web.enable-lifecycle" not in service["command"]
        assert "--web.enable-admin-api" not in service["command"]


def test_prometheus_sends_credentials_to_alertmanager_and_to_itself():
    prom = load("prometheus/prometheus.yml")
    expected = {"username": "leakwatch", "password_file": compose_webauth.PASSWORD_PATH}
    assert prom["alerting"]["alertmanagers"][0]["basic_auth"] == expected
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert jobs["prometheus"]["basic_auth"] == expected and jobs["alertmanager"]["basic_auth"] == expected
    assert "basic_auth" not in jobs["vllm"]  # credentials go only where they are asked for


def test_grafana_data_sources_log_in_with_the_secret():
    doc = load("compose.yaml")
    grafana = doc["services"]["grafana"]
    assert grafana["environment"][f"{compose_webauth.GRAFANA_PASSWORD_ENV}__FILE"] == compose_webauth.PASSWORD_PATH
    assert compose_webauth.PASSWORD_SECRET in grafana["secrets"]
    sources = load("grafana/provisioning/datasources/leakwatch.yml")["datasources"]
    for source in sources:
        assert source["basicAuth"] is True and source["basicAuthUser"] == "leakwatch"
        assert source["secureJsonData"]["basicAuthPassword"] == f"${{{compose_webauth.GRAFANA_PASSWORD_ENV}}}"
