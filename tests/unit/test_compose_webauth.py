"""Compose's Prometheus and Alertmanager behind the same basic auth as natively: the web config and
password as compose secrets, health checks that log in, Prometheus's alerting and self-scrapes and
Grafana's data sources with credentials. Validated statically; the compose end-to-end test (issue 13)
starts the containers."""

from __future__ import annotations

import yaml

from leakwatch.core.paths import REPO_ROOT
from leakwatch.generate import compose_webauth


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


def test_our_tools_find_the_compose_password_when_no_native_stack_has_one(tmp_path, monkeypatch):
    """`leakwatch check` against compose's Prometheus on the default port logs in with
    ./secrets/web-password; a native stack's own password, when there is one, comes first."""
    from leakwatch.core import paths, webauth
    from leakwatch.core.settings import load as load_settings

    compose_secrets = tmp_path / "compose-secrets"
    webauth.ensure(compose_secrets, mode=0o644)
    monkeypatch.setattr(paths, "COMPOSE_SECRETS_DIR", compose_secrets)
    monkeypatch.setenv("LEAKWATCH_STATE_DIR", str(tmp_path / "native"))
    monkeypatch.delenv(webauth.PASSWORD_FILE_ENV, raising=False)
    url = f"http://127.0.0.1:{load_settings().service('prometheus').port}/api/v1/query"
    compose_password = (compose_secrets / webauth.PASSWORD_FILE).read_text().strip()
    assert webauth.auth_for(url) == (webauth.USER, compose_password)

    native_password_file, _ = webauth.ensure(tmp_path / "native" / "secrets")
    assert webauth.auth_for(url) == (webauth.USER, native_password_file.read_text().strip())
    # Never to another host or port.
    assert webauth.auth_for("http://203.0.113.9:9090/api/v1/query") is None
    assert webauth.auth_for("http://127.0.0.1:1/api/v1/query") is None
