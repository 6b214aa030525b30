"""No unauthenticated path to a restart: a real Alertmanager 0.25 (Debian) with our generated web config
(basic auth, bcrypt) and the repository's routing, in front of a real `leakwatch heal` process and a
supervised stand-in. Restarts are counted from the stand-in's own start log."""

from __future__ import annotations

import contextlib
import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest
import requests
import yaml

from leakwatch.core import webauth
from leakwatch.core.ports import free_port
from leakwatch.core.topology import HEALER_WEBHOOK_PATH
from leakwatch.generate.alertmanager_config import alertmanager_config
from tests.support.healer_support import healer_process, supervised_standin, wait_for

# Runs the real healer, supervisord, Alertmanager, Prometheus or amtool as processes.

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"


@contextlib.contextmanager
def real_alertmanager(folder, healer_url: str, token_file):
    password_file, web_config = webauth.ensure(folder / "secrets")
    config = folder / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_config(healer_url + HEALER_WEBHOOK_PATH, str(token_file))))
    port = free_port()
    log = open(folder / "alertmanager.log", "w")
    proc = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={config}",
            f"--storage.path={folder / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            f"--web.config.file={web_config}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    auth = (webauth.USER, webauth.read_password(password_file))

    def ready():
        try:
            return requests.get(f"{url}/-/ready", auth=auth, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(ready, timeout=60, what="Alertmanager ready")
        yield url, auth
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def remediation_alert(**labels) -> list[dict]:
    now = datetime.now(timezone.utc)
    return [
        {
            "labels": {
                "alertname": "HostMemoryLeak",
                "severity": "critical",
                "remediate": "true",
                "job": "leakwatch",
                "instance": "127.0.0.1:9405",
                "role": "api",
                **labels,
            },
            "annotations": {"summary": "forged"},
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(hours=1)).isoformat(),
        }
    ]


@pytest.mark.skipif(not __import__("os").path.exists(ALERTMANAGER), reason="Debian's prometheus-alertmanager")
def test_alertmanager_refuses_unauthenticated_alerts_and_silences_and_only_authenticated_ones_restart(tmp_path):
    with (
        supervised_standin() as target,
        healer_process(target, tmp_path, "--target", "leakwatch=127.0.0.1:9405", cooldown="0s") as healer,
        real_alertmanager(tmp_path, healer.url, tmp_path / "token") as (am, auth),
    ):
        before = len(target.starts())
        # The attack of the issue: an unauthenticated alert labelled for remediation, and a 30-day silence.
        resp = requests.post(f"{am}/api/v2/alerts", json=remediation_alert(), timeout=10)
        assert resp.status_code == 401, resp.text
        now = datetime.now(timezone.utc)
        silence = {
            "matchers": [{"name": "alertname", "value": ".+", "isRegex": True}],
            "createdBy": "attacker",
            "comment": "x",
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(days=30)).isoformat(),
        }
        assert requests.post(f"{am}/api/v2/silences", json=silence, timeout=10).status_code == 401
        assert requests.get(f"{am}/api/v2/alerts", timeout=10).status_code == 401
        assert (
            requests.post(
                f"{am}/api/v2/alerts", json=remediation_alert(), auth=("leakwatch", "guess" * 4), timeout=10
            ).status_code
            == 401
        )
        # A forged alert with the credentials of Alertmanager but another name never reaches the healer:
        # the generated route carries the same allowlist.
        assert (
            requests.post(
                f"{am}/api/v2/alerts", json=remediation_alert(alertname="TotallyNotALeak"), auth=auth, timeout=10
            ).status_code
            == 200
        )
        assert requests.get(f"{am}/api/v2/silences", auth=auth, timeout=10).json() == []
        time.sleep(15)  # the remediation route's group_wait is 10 s
        assert len(target.starts()) == before
        assert "TotallyNotALeak" not in healer.log_text()
        # Positive control: the same alert, authenticated, goes the whole way and restarts the target once.
        assert requests.post(f"{am}/api/v2/alerts", json=remediation_alert(), auth=auth, timeout=10).status_code == 200
        wait_for(lambda: len(target.starts()) == before + 1, timeout=90, what="the restart via Alertmanager")
        time.sleep(3)
        assert len(target.starts()) == before + 1


def test_the_generated_web_config_passes_promtool_and_is_private(tmp_path):
    password_file, web_config = webauth.ensure(tmp_path / "secrets")
    result = subprocess.run(["promtool", "check", "web-config", str(web_config)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert oct(web_config.stat().st_mode & 0o777) == "0o600"
    assert oct(password_file.stat().st_mode & 0o777) == "0o600"
    assert webauth.read_password(password_file) not in web_config.read_text()
    # Kept across runs; a stale hash (password changed by the operator) is rewritten.
    first = web_config.read_text()
    assert webauth.ensure(tmp_path / "secrets")[1].read_text() == first
    password_file.write_text("a-new-password-of-the-operator\n")
    assert webauth.ensure(tmp_path / "secrets")[1].read_text() != first
