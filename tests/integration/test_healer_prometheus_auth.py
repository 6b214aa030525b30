"""The native runner's Prometheus (its real command line from leakwatch/native/programs.py, Debian's
Prometheus 2.42) asks for basic auth on every endpoint and has no lifecycle or admin API unless opted in."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest
import requests

from leakwatch.core import profiles, webauth, yamlfmt
from leakwatch.core.ports import free_port
from leakwatch.core.settings import load as load_settings
from leakwatch.core.state_layout import StateLayout
from leakwatch.core.topology import native_jobs
from leakwatch.generate.prometheus_config import prometheus_config
from leakwatch.native.programs import LIFECYCLE_ENV, stack_programs
from tests.support.healer_support import wait_for
from tests.support.native_stack import environ, short_state_dir

pytestmark = [
    pytest.mark.skipif(not os.path.exists("/usr/bin/prometheus"), reason="Debian's prometheus"),
]


@contextlib.contextmanager
def native_prometheus(lifecycle: bool = False):
    layout = StateLayout(short_state_dir("lw-prom-"))
    layout.make_dirs()
    env = {"PROMETHEUS_PORT": str(free_port()), LIFECYCLE_ENV: "1" if lifecycle else ""}
    with environ(env):
        settings = load_settings()
        password_file, _ = webauth.ensure(layout.secrets)
        conf = prometheus_config(
            settings,
            native_jobs(settings),
            [f"127.0.0.1:{free_port()}"],
            [],
            basic_auth=webauth.basic_auth_config(str(password_file)),
        )
        (layout.conf / "prometheus.yml").write_text(yamlfmt.dump(conf, "test"))
        program = next(p for p in stack_programs(settings, profiles.load("demo"), layout) if p.name == "prometheus")
        log = open(layout.logs / "prometheus.log", "w")
        proc = subprocess.Popen(program.command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{env['PROMETHEUS_PORT']}"
    auth = (webauth.USER, webauth.read_password(password_file))
    try:

        def ready():
            try:
                return requests.get(f"{url}/-/ready", auth=auth, timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(ready, timeout=90, what="Prometheus ready")
        yield url, auth, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        import shutil

        shutil.rmtree(layout.root, ignore_errors=True)


def test_prometheus_asks_for_credentials_and_has_no_lifecycle_api():
    with native_prometheus() as (url, auth, proc):
        for path in ("/api/v1/query?query=up", "/-/ready", "/metrics", "/graph"):
            assert requests.get(f"{url}{path}", timeout=10).status_code == 401, path
        assert (
            requests.get(
                f"{url}/api/v1/query", params={"query": "up"}, auth=("leakwatch", "x" * 20), timeout=10
            ).status_code
            == 401
        )
        assert (
            requests.get(f"{url}/api/v1/query", params={"query": "up"}, auth=auth, timeout=10).json()["status"]
            == "success"
        )
        # The attack of the issue: /-/quit. Refused without credentials, and off even with them.
        assert requests.post(f"{url}/-/quit", timeout=10).status_code == 401
        assert requests.post(f"{url}/-/quit", auth=auth, timeout=10).status_code == 403
        admin = requests.post(f"{url}/api/v1/admin/tsdb/snapshot", auth=auth, timeout=10)
        assert "admin APIs disabled" in admin.json()["error"], admin.text
        assert proc.poll() is None


def test_the_lifecycle_api_is_an_explicit_opt_in():
    with native_prometheus(lifecycle=True) as (url, auth, _proc):
        assert requests.post(f"{url}/-/reload", auth=auth, timeout=30).status_code == 200
        assert requests.post(f"{url}/-/reload", timeout=10).status_code == 401
