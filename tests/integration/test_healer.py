"""`leakwatch heal`: authentication, input validation, policy (idempotency, cooldown, rate limit) and
the restart itself, against a target run by a real supervisord."""

from __future__ import annotations

import os
import socket
import stat
import time

import pytest
import requests

from leakwatch.cli import main
from leakwatch.core.metric_catalogue import load_csv
from leakwatch.heal.healer_metrics import CSV
from leakwatch.heal.token import TOKEN_ENV, ensure_file
from tests.support.healer_support import TOKEN, alert, metric, notification, post, running_healer, supervised_standin
from tests.support.native_stack import environ


@pytest.fixture(scope="module")
def target():
    with supervised_standin() as t:
        yield t


@pytest.fixture
def healer(target):
    with running_healer(target) as running:
        yield running


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition not reached in time")


def no_action(url):
    assert metric(url, "leakwatch_healer_restarts_total", result="success") == 0
    assert metric(url, "leakwatch_healer_restarts_total", result="failed") == 0
    assert metric(url, "leakwatch_healer_remediation_in_progress") == 0


# -- start-up ------------------------------------------------------------------------------------


def test_refuses_to_start_without_a_token(capsys, tmp_path):
    with environ({TOKEN_ENV: ""}):
        assert main(["heal", "--port", "1"]) == 2
    assert "no healer token" in capsys.readouterr().err
    weak = tmp_path / "weak"
    weak.write_text("hunter2\n")
    assert main(["heal", "--token-file", str(weak)]) == 2
    assert "too weak" in capsys.readouterr().err
    loose = tmp_path / "loose"
    loose.write_text(TOKEN)
    loose.chmod(0o666)
    assert main(["heal", "--token-file", str(loose)]) == 2
    assert "writable by everyone" in capsys.readouterr().err
    assert main(["heal", "--token-file", str(tmp_path / "missing")]) == 2
    assert "cannot read the healer token file" in capsys.readouterr().err


def test_token_file_is_created_private_and_kept(tmp_path):
    path = ensure_file(tmp_path / "secrets" / "healer-token")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    first = path.read_text()
    assert len(first.strip()) >= 32
    assert ensure_file(path).read_text() == first
    # The compose secret: readable by the containers' users, behind a folder only this user enters.
    shared = ensure_file(tmp_path / "compose-secrets" / "healer-token", mode=0o644)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644
    assert stat.S_IMODE(shared.parent.stat().st_mode) == 0o700


# -- refusals ------------------------------------------------------------------------------------


# Fixed ids: the token is random per process, and xdist workers must collect the same test names.
@pytest.mark.parametrize(
    "token",
    [None, "", "x" * 43, TOKEN[:-1], TOKEN + "x", TOKEN.upper()],
    ids=["none", "empty", "wrong", "truncated", "extended", "upper-cased"],
)
def test_missing_or_wrong_token_is_401(healer, token):
    url, _ = healer
    resp = post(url, notification(alert()), token=token)
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    no_action(url)


def test_other_auth_schemes_are_401(healer):
    url, _ = healer
    resp = requests.post(
        f"{url}/alerts", json=notification(alert()), headers={"Authorization": f"Basic {TOKEN}"}, timeout=10
    )
    assert resp.status_code == 401


def test_huge_bodies_are_413_without_being_read(healer):
    url, h = healer
    limit = h.cfg.max_body_bytes
    resp = post(url, b"{" + b" " * limit + b"}")
    assert resp.status_code == 413
    # A declared length is enough: the body is never read.
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(
            f"POST /alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {10**9}\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")
    assert metric(url, "leakwatch_healer_notifications_total", outcome="too_large") == 2
    no_action(url)


def test_bodies_without_length_or_json_type_are_refused(healer):
    url, _ = healer
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"POST /alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 411")
    assert post(url, notification(alert()), headers={"Content-Type": "text/plain"}).status_code == 415
    no_action(url)


@pytest.mark.parametrize(
    "body, status",
    [
        (b"{not json", 400),
        (b"\xff\xfe\x00", 400),
        (b"[" * 100000 + b"]" * 100000, 400),  # too deep for the parser: refused, not a crash
        (b"[]", 422),
        (b'{"version": "3", "alerts": []}', 422),
        (b'{"version": "4", "alerts": []}', 422),
        (b'{"version": "4", "alerts": [1]}', 422),
        (
            b'{"version": "4", "alerts": [{"status": "firing", "labels": {"alertname": "X", "remediate": "true"}, '
            b'"startsAt": "2026-01-01T00:00:00Z"}]}',
            422,
        ),  # no fingerprint
        (
            b'{"version": "4", "alerts": [{"status": "burning", "labels": {"alertname": "X"}, "fingerprint": "ab", '
            b'"startsAt": "2026-01-01T00:00:00Z"}]}',
            422,
        ),
        (
            b'{"version": "4", "alerts": [{"status": "firing", "labels": {"alertname": 5}, "fingerprint": "ab", '
            b'"startsAt": "2026-01-01T00:00:00Z"}]}',
            422,
        ),
        (
            b'{"version": "4", "alerts": [{"status": "firing", "labels": {"alertname": "X", "remediate": "true"}, '
            b'"fingerprint": "ab", "startsAt": "yesterday"}]}',
            422,
        ),
    ],
)
def test_malformed_and_wrong_schema_bodies_are_4xx(healer, body, status):
    url, _ = healer
    resp = post(url, body)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]
    no_action(url)


def test_unknown_alerts_are_422_and_never_acted_on(healer):
    url, _ = healer
    for labels in (
        {"remediate": None},
        {"remediate": "false"},
        {"remediate": "TRUE"},
        {"name": "Watchdog", "remediate": None},
    ):
        resp = post(url, notification(alert(**labels)))
        assert resp.status_code == 422, resp.text
        assert "not labelled remediate" in resp.json()["error"]
    # One unlabelled firing alert spoils the whole notification: misrouting is surfaced, not half-acted on.
    assert post(url, notification(alert(), alert(fingerprint="ff", remediate=None))).status_code == 422
    assert metric(url, "leakwatch_healer_notifications_total", outcome="not_remediable") == 5
    no_action(url)


def test_resolved_alerts_are_200_and_no_action(healer):
    url, _ = healer
    resp = post(
        url, notification(alert(status="resolved"), alert(status="resolved", remediate=None), status="resolved")
    )
    assert resp.status_code == 200 and resp.json()["action"] == "none"
    assert metric(url, "leakwatch_healer_alerts_total", decision="resolved") == 2
    no_action(url)


def test_wrong_paths_and_methods(healer):
    url, _ = healer
    assert (
        requests.post(f"{url}/", json={}, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code == 404
    )
    assert requests.put(f"{url}/alerts", json={}, timeout=10).status_code == 405
    assert requests.get(f"{url}/healthz", timeout=10).status_code == 200
    no_action(url)


# -- acting ----------------------------------------------------------------------------------------


def test_a_remediation_alert_drains_and_restarts_once(target, tmp_path):
    """Valid alert -> 202 and one restart; Alertmanager's repeats of it -> no second restart; a new
    episode inside the cooldown -> none either; an alert that began before the restart -> handled."""
    before = target.pid()
    with running_healer(target, state_file=tmp_path / "state.json") as (url, _healer):
        first = alert(starts_at=time.time() - 120)
        resp = post(url, notification(first))
        assert resp.status_code == 202, resp.text
        assert resp.json()["alerts"][0]["decision"] == "remediate"
        for _ in range(5):  # repeats while the restart runs and after it
            assert post(url, notification(first)).json()["alerts"][0]["decision"] == "duplicate"
        wait_for(lambda: metric(url, "leakwatch_healer_restarts_total", result="success") == 1)
        assert target.pid() != before
        restarted_at = metric(url, "leakwatch_healer_last_restart_timestamp_seconds")
        assert restarted_at > time.time() - 120
        assert metric(url, "leakwatch_healer_last_restart_duration_seconds") > 0
        assert metric(url, "leakwatch_healer_requests_in_flight_at_stop") == 0

        earlier = alert(fingerprint="0badc0de", starts_at=restarted_at - 30)
        later = alert(fingerprint="0badc0de", starts_at=time.time())
        decisions = post(url, notification(earlier)).json()["alerts"][0]["decision"]
        assert decisions == "handled_by_restart"
        assert post(url, notification(later)).json()["alerts"][0]["decision"] == "cooldown"
        assert post(url, notification(first)).json()["alerts"][0]["decision"] == "duplicate"
        assert metric(url, "leakwatch_healer_restarts_total", result="success") == 1
        pid_after = target.pid()

    # A restarted healer remembers: the same episode and the cooldown still hold.
    with running_healer(target, state_file=tmp_path / "state.json") as (url, _):
        assert post(url, notification(first)).json()["alerts"][0]["decision"] == "duplicate"
        assert (
            post(url, notification(alert(fingerprint="77", starts_at=time.time()))).json()["alerts"][0]["decision"]
            == "cooldown"
        )
        assert metric(url, "leakwatch_healer_last_restart_timestamp_seconds") == pytest.approx(restarted_at, abs=5)
    assert target.pid() == pid_after


def test_rate_limit_caps_restarts_per_hour(target):
    with running_healer(target, cooldown_s=0.0, max_restarts_per_hour=2) as (url, _):
        decisions = []
        for i in range(3):
            resp = post(url, notification(alert(fingerprint=f"{i + 1:x}", starts_at=time.time())))
            decisions.append(resp.json()["alerts"][0]["decision"])
            wait_for(lambda: metric(url, "leakwatch_healer_remediation_in_progress") == 0)
            time.sleep(0.01)
        assert decisions == ["remediate", "remediate", "rate_limited"]
        assert metric(url, "leakwatch_healer_restarts_total", result="success") == 2
        assert metric(url, "leakwatch_healer_restarts_last_hour") == 2


def test_a_failed_restart_is_counted_and_logged(target, caplog):
    target.rpc().stopProcess("vllm", True)
    try:
        with running_healer(target, ready_timeout_s=2.0) as (url, healer):
            healer.restarter.program = "no-such-program"
            assert post(url, notification(alert(starts_at=time.time()))).status_code == 202
            wait_for(lambda: metric(url, "leakwatch_healer_restarts_total", result="failed") == 1)
            assert metric(url, "leakwatch_healer_remediation_in_progress") == 0
            # supervisord answered (it knows no such program): reconciling gives up at once, says so.
            wait_for(lambda: metric(url, "leakwatch_healer_reconciles_total", found="failed") == 1, timeout=30)
        assert "restart failed" in caplog.text
        assert "reconciling after the failed restart failed" in caplog.text
    finally:
        target.rpc().startProcess("vllm", True)


def test_metrics_match_the_contract(healer):
    url, _ = healer
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(f"{url}/metrics", timeout=10).text
    exposed = {f.name + ("_total" if f.type == "counter" else ""): f for f in text_string_to_metric_families(text)}
    contract = load_csv(CSV)
    assert set(exposed) == set(contract)
    for name, row in contract.items():
        assert exposed[name].type == row["type"], name
        labels = {k for s in exposed[name].samples for k in s.labels}
        assert labels == set(row["labels"]), name


def test_healer_cli_serves_until_sigterm(target, tmp_path):
    """The real `leakwatch heal` process: reads its token file, answers, exits on SIGTERM."""
    import signal
    import subprocess
    import sys

    from leakwatch.core.ports import free_port

    token_file = ensure_file(tmp_path / "token")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leakwatch",
            "heal",
            "--token-file",
            str(token_file),
            "--port",
            str(port),
            "--supervisor-socket",
            str(target.layout.supervisor_socket),
            "--vllm-url",
            target.url,
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LEAKWATCH_HEALER_TOKEN": ""},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _up(url), timeout=30)
        good = token_file.read_text().strip()
        assert post(url, notification(alert(remediate=None)), token=good).status_code == 422
        assert post(url, notification(alert()), token=TOKEN).status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert "healer listening on" in proc.stderr.read()


def _up(url) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False
