"""Thousands of generated requests at a running healer: it never answers 5xx, keeps serving, and
never restarts anything unless a firing alert carries the remediation label and the right token."""

from __future__ import annotations

import json
import time

import pytest
import requests
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.healer_support import TOKEN, alert, metric, notification, post, running_healer, supervised_standin

EXAMPLES = 1500
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)
label_values = st.text(max_size=20)
# Labels that never say remediate="true" (absent, other values, look-alikes).
unlabelled = st.dictionaries(
    st.sampled_from(["alertname", "severity", "remediate", "Remediate", "remediate ", "job", "instance"]),
    label_values.filter(lambda v: v != "true"),
    max_size=6,
)
fingerprints = st.text("0123456789abcdefXYZ-", min_size=0, max_size=70)
times = st.sampled_from(
    [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.123456789Z",
        "0001-01-01T00:00:00Z",
        "not a time",
        "",
        "2026-13-45T99:99:99Z",
        "2026-01-01T00:00:00",
    ]
) | st.text(max_size=30)


@st.composite
def alert_like(draw, labels=unlabelled):
    doc = {
        "status": draw(st.sampled_from(["firing", "resolved", "FIRING", "", "pending"]) | st.text(max_size=8)),
        "labels": draw(labels | json_values),
        "fingerprint": draw(fingerprints | json_values),
        "startsAt": draw(times | json_values),
    }
    # Drop or retype some fields.
    for key in draw(st.lists(st.sampled_from(list(doc)), max_size=2, unique=True)):
        del doc[key]
    return doc


@st.composite
def notification_like(draw, alerts=alert_like()):
    doc = {
        "version": draw(st.sampled_from(["4", 4, "3", None, ""])),
        "status": draw(st.sampled_from(["firing", "resolved"])),
        "alerts": draw(st.lists(alerts, max_size=5) | json_values),
    }
    return doc


# Well-formed notifications whose alerts are not labelled for remediation (wrong value or absent).
near_valid = st.lists(
    st.builds(
        alert,
        status=st.sampled_from(["firing", "resolved"]),
        remediate=st.sampled_from([None, "false", "TRUE", "yes", ""]),
        fingerprint=st.text("0123456789abcdef", min_size=1, max_size=16),
        name=st.text(st.characters(min_codepoint=65, max_codepoint=122), min_size=1, max_size=20),
        starts_at=st.floats(0, 2e9),
    ),
    min_size=1,
    max_size=4,
).map(lambda alerts: notification(*alerts))
bodies = (
    st.binary(max_size=400)
    | json_values.map(lambda v: json.dumps(v).encode())
    | (notification_like() | near_valid).map(lambda v: json.dumps(v).encode())
)
# Header values the HTTP client can send at all (printable ASCII).
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=50)
tokens = st.sampled_from([None, "", TOKEN[:-1], TOKEN + " x", "Bearer", "x" * 43]) | header_text
content_types = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "text/plain", "", "application/x-www-form-urlencoded"]
)


@pytest.fixture(scope="module")
def target():
    with supervised_standin() as t:
        yield t


def alive(url: str) -> bool:
    return requests.get(f"{url}/healthz", timeout=5).status_code == 200


def test_fuzzed_requests_never_crash_and_never_act(target):
    """Any body with any token, and any body without the remediation label with the right token."""
    pid = target.pid()
    sent = {"n": 0}
    with running_healer(target) as (url, _):

        @FUZZ_SETTINGS
        @given(
            body=bodies, token=st.one_of(st.just(TOKEN), st.just(TOKEN), st.just(TOKEN), tokens), ctype=content_types
        )
        def check(body, token, ctype):
            headers = {"Content-Type": ctype} if ctype else {}
            resp = post(url, body, token=token, headers=headers)
            sent["n"] += 1
            assert resp.status_code < 500, (resp.status_code, resp.text, body[:200])
            assert resp.status_code in (200, 400, 401, 411, 413, 415, 422), resp.status_code
            if token != TOKEN:
                assert resp.status_code == 401

        check()
        assert alive(url)
        outcomes = {
            o: metric(url, "leakwatch_healer_notifications_total", outcome=o)
            for o in (
                "unauthorized",
                "bad_request",
                "invalid_schema",
                "not_remediable",
                "no_action",
                "unsupported_media_type",
            )
        }
        print("fuzz outcomes:", outcomes)
        # The generator reaches every layer: auth, JSON, schema, the label check and the policy.
        assert all(count > 0 for count in outcomes.values()), outcomes
        assert metric(url, "leakwatch_healer_alerts_total", decision="remediate") == 0
        assert metric(url, "leakwatch_healer_restarts_total", result="success") == 0
        assert metric(url, "leakwatch_healer_restarts_total", result="failed") == 0
    assert target.pid() == pid
    assert sent["n"] >= EXAMPLES


def test_fuzzed_valid_notifications_never_storm(target):
    """Well-formed remediation alerts in random mixes, repeated like Alertmanager repeats them: at most
    one restart (the cooldown), every answer 2xx or a reasoned 422."""
    pid = target.pid()
    started = time.time()
    with running_healer(target) as (url, healer):
        firing = st.builds(
            lambda fp, age, status, label: alert(
                status=status, fingerprint=fp, starts_at=started - age, remediate=label
            ),
            st.text("0123456789abcdef", min_size=1, max_size=16),
            st.floats(0, 7200),
            st.sampled_from(["firing", "resolved"]),
            st.sampled_from(["true", "true", None]),
        )

        @settings(
            max_examples=500,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(alerts=st.lists(firing, min_size=1, max_size=4))
        def check(alerts):
            resp = post(url, notification(*alerts))
            assert resp.status_code in (200, 202, 422), resp.text
            unlabelled_firing = any(a["status"] == "firing" and "remediate" not in a["labels"] for a in alerts)
            assert (resp.status_code == 422) == unlabelled_firing

        check()
        if healer.worker is not None:
            healer.worker.join(timeout=120)
        assert alive(url)
        assert metric(url, "leakwatch_healer_alerts_total", decision="remediate") == 1
        assert metric(url, "leakwatch_healer_restarts_total", result="success") == 1
    assert target.pid() != pid
