"""The healer's Kubernetes restarter, through the official `kubernetes` client, against
STAND-IN API server (tests/support/kube_apiserver_standin.py: no API server can run here) that enforces
the Eviction contract (201, 429 for a PodDisruptionBudget, 404) and the chart's rendered Role.
scripts/k8s/check.sh runs the same restarter against a real cluster."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest

from leakwatch.heal.kubernetes_restarter import KubernetesRestarter
from leakwatch.heal.payload import Alert
from leakwatch.heal.restarters import RestartError, TargetRefused
from leakwatch.helm import engine, identity
from tests.support.kube_apiserver_standin import StandinApiServer, StandinCluster, StandinPDB, StandinPod

NAMESPACE = "serving"
RELEASE = {"app.kubernetes.io/instance": "leakwatch", "app.kubernetes.io/component": "vllm"}
MODEL = {identity.MODEL_LABEL: "demo", **RELEASE}


@pytest.fixture(scope="module")
def chart_role_rules() -> list[dict]:
    values = engine.load_values(
        engine.values_files()[0], overrides={"healer": {"enabled": True, "tokenSecret": {"name": "t"}}}
    )
    (role,) = [o for o in engine.render(values, namespace=NAMESPACE) if o["kind"] == "Role"]
    return role["rules"]


@pytest.fixture
def cluster(chart_role_rules) -> StandinCluster:
    c = StandinCluster(NAMESPACE, token="s3cret-for-the-standin", role_rules=chart_role_rules)
    for name in ("leakwatch-demo-aaaaa", "leakwatch-demo-bbbbb"):
        c.pods[name] = StandinPod(name, dict(MODEL))
    c.pods["postgres-0"] = StandinPod("postgres-0", {"app": "postgres"})
    # Issue 32 N4: another release's vLLM in the same namespace, and an unrelated pod carrying the key.
    c.pods["other-demo-ccccc"] = StandinPod("other-demo-ccccc", {**MODEL, "app.kubernetes.io/instance": "other"})
    c.pods["batch-job-ddddd"] = StandinPod("batch-job-ddddd", {identity.MODEL_LABEL: "anything"})
    return c


def alert(pod: str, namespace: str = NAMESPACE) -> Alert:
    return Alert(
        "firing",
        "HostMemoryLeak",
        {
            "alertname": "HostMemoryLeak",
            "namespace": namespace,
            "pod": pod,
            "job": identity.JOBS["leakwatch"],
            "severity": "critical",
            "remediate": "true",
        },
        "ab12",
        time.time(),
    )


def restarter(server: StandinApiServer, **kw) -> KubernetesRestarter:
    kw.setdefault("retry_interval_s", 0.05)
    kw.setdefault("poll_s", 0.05)
    kw.setdefault("gone_timeout_s", 10)
    kw.setdefault("pod_labels", RELEASE)
    return KubernetesRestarter(server.core_api(), NAMESPACE, identity.MODEL_LABEL, **kw)


def test_evicts_the_named_pod_and_waits_for_its_replacement(cluster):
    with StandinApiServer(cluster) as server:
        r = restarter(server)
        r.check()
        timing = r.restart(alert("leakwatch-demo-aaaaa"))
        assert "leakwatch-demo-aaaaa" not in cluster.pods
        assert timing.stop_s >= cluster.grace_s * 0.5
        assert r.wait_healthy(10)
        ready = [p for p in cluster.pods.values() if p.labels == MODEL and p.ready]
        assert len(ready) == 2
    evictions = [(m, p, s) for m, p, s in cluster.requests if p.endswith("/eviction")]
    assert evictions == [("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/leakwatch-demo-aaaaa/eviction", 201)]


def test_a_pdb_refusal_is_retried_and_counted(cluster):
    cluster.pdbs.append(StandinPDB(MODEL, max_unavailable=1))
    cluster.pods["leakwatch-demo-bbbbb"].ready = False  # one replica already down
    counted = []
    with StandinApiServer(cluster) as server:
        r = restarter(server, retries=2, on_refused=lambda: counted.append(1))
        with pytest.raises(RestartError, match="refused 3 times"):
            r.restart(alert("leakwatch-demo-aaaaa"))
    assert r.refused == len(counted) == 3
    assert [s for m, p, s in cluster.requests if p.endswith("/eviction")] == [429, 429, 429]
    assert "leakwatch-demo-aaaaa" in cluster.pods  # nothing lost


def test_a_pdb_that_frees_up_lets_the_retry_through(cluster):
    cluster.pdbs.append(StandinPDB(MODEL, max_unavailable=1))
    other = cluster.pods["leakwatch-demo-bbbbb"]
    other.ready = False

    def sleep(_s):
        other.ready = True  # the other replica became ready while the healer waited

    with StandinApiServer(cluster) as server:
        r = restarter(server, retries=3, sleep=sleep)
        r.restart(alert("leakwatch-demo-aaaaa"))
    assert [s for m, p, s in cluster.requests if p.endswith("/eviction")] == [429, 201]
    assert r.refused == 1


def test_a_single_replica_without_a_pdb_is_evicted_gracefully(cluster):
    del cluster.pods["leakwatch-demo-bbbbb"]
    with StandinApiServer(cluster) as server:
        r = restarter(server)
        r.restart(alert("leakwatch-demo-aaaaa"))
        assert r.wait_healthy(10)
    assert not any(m == "DELETE" for m, _, _ in cluster.requests)


def test_missing_pod_is_a_clear_error(cluster):
    with StandinApiServer(cluster) as server, pytest.raises(RestartError, match="does not exist"):
        restarter(server).restart(alert("leakwatch-demo-zzzzz"))


def test_a_pod_gone_between_reading_and_evicting_is_a_404(cluster):
    with StandinApiServer(cluster) as server:
        r = restarter(server)
        real_target = r.target

        def target_then_vanish(labels):
            found = real_target(labels)
            cluster.pods.pop(labels["pod"])
            return found

        r.target = target_then_vanish
        with pytest.raises(RestartError, match="vanished"):
            r.restart(alert("leakwatch-demo-aaaaa"))
    assert [s for m, p, s in cluster.requests if p.endswith("/eviction")] == [404]


def test_only_labelled_pods_in_its_namespace_that_the_alert_names(cluster):
    with StandinApiServer(cluster) as server:
        r = restarter(server)
        with pytest.raises(RestartError, match=r"no leakwatch\.dev/model label"):
            r.restart(alert("postgres-0"))
        with pytest.raises(RestartError, match="namespace 'default'"):
            r.restart(alert("leakwatch-demo-aaaaa", namespace="default"))
        with pytest.raises(RestartError, match="names no pod"):
            r.restart(Alert("firing", "GPUMemoryLeakSuspected", {"alertname": "x"}, "ab", 0.0))
        for pod, why in [
            ("other-demo-ccccc", "app.kubernetes.io/instance='other'"),
            ("batch-job-ddddd", "app.kubernetes.io/component=None, app.kubernetes.io/instance=None"),
        ]:
            with pytest.raises(TargetRefused, match=f"not this release's vLLM pod \\({re.escape(why)}"):
                r.restart(alert(pod))
    assert not any(p.endswith("/eviction") for _, p, _ in cluster.requests)
    assert {"postgres-0", "other-demo-ccccc", "batch-job-ddddd"} <= set(cluster.pods)


def test_the_chart_role_forbids_deleting_pods(cluster):
    """The stand-in authorises by the chart's Role: a delete (not granted) is refused."""
    from kubernetes.client.exceptions import ApiException

    with StandinApiServer(cluster) as server:
        with pytest.raises(ApiException) as caught:
            server.core_api().delete_namespaced_pod("leakwatch-demo-aaaaa", NAMESPACE)
        assert caught.value.status == 403
        with pytest.raises(ApiException) as caught:
            server.core_api(token="wrong").list_namespaced_pod(NAMESPACE)
        assert caught.value.status == 401


def test_the_healer_evicts_the_pod_its_notification_names(cluster, tmp_path):
    """The whole healer: a remediable notification for one pod makes it evict exactly that pod."""
    from leakwatch.heal import healer_settings
    from leakwatch.heal.decisions import Healer
    from leakwatch.heal.healer_metrics import HealerMetrics
    from leakwatch.heal.policy import Policy

    policy = healer_settings.load()  # its remediable jobs under the chart's names, as the chart tells the healer
    cfg = dataclasses.replace(policy, jobs=tuple(identity.JOBS[job] for job in policy.jobs))
    with StandinApiServer(cluster) as server:
        r = restarter(server)
        healer = Healer(cfg, "token", Policy(cfg, tmp_path / "state.json"), r, r, HealerMetrics())
        status, outcome, _ = healer.notify([alert("leakwatch-demo-bbbbb")])
        assert (status, outcome) == (202, "accepted")
        healer.worker.join(30)
    assert "leakwatch-demo-bbbbb" not in cluster.pods and "leakwatch-demo-aaaaa" in cluster.pods
    assert healer.metrics.restarts.labels("success")._value.get() == 1


def _healer(restarter_: KubernetesRestarter, tmp_path):
    from leakwatch.heal import healer_settings
    from leakwatch.heal.decisions import Healer
    from leakwatch.heal.healer_metrics import HealerMetrics
    from leakwatch.heal.policy import Policy

    policy = healer_settings.load()  # its remediable jobs under the chart's names, as the chart tells the healer
    cfg = dataclasses.replace(policy, jobs=tuple(identity.JOBS[job] for job in policy.jobs))
    return Healer(cfg, "token", Policy(cfg, tmp_path / "state.json"), restarter_, restarter_, HealerMetrics())


def test_another_releases_pod_costs_no_cap_and_no_cooldown(cluster, tmp_path):
    """Issue 32 N5: the target is checked before the restart is claimed, so a misdirected alert is
    refused (422, Alertmanager does not retry) and the genuine one right after still restarts."""
    with StandinApiServer(cluster) as server:
        healer = _healer(restarter(server), tmp_path)
        for pod in ("other-demo-ccccc", "batch-job-ddddd", "leakwatch-demo-zzzzz"):
            status, outcome, body = healer.notify([alert(pod)])
            assert (status, outcome) == (422, "not_remediable"), body
        assert healer.policy.restarts_last_hour() == 0 and not healer.policy.state.seen
        genuine = alert("leakwatch-demo-aaaaa")
        status, outcome, _ = healer.notify([genuine])
        assert (status, outcome) == (202, "accepted")
        healer.worker.join(30)
        # Alertmanager repeats the episode while its series go stale: the evicted pod is gone, and the
        # repeat is a duplicate (200), not a refusal it would count as a failed notification.
        status, outcome, body = healer.notify([genuine])
        assert (status, outcome) == (200, "no_action"), body
        assert body["alerts"][0]["decision"] == "duplicate"
    assert healer.metrics.alerts.labels("not_remediable")._value.get() == 3
    assert {"other-demo-ccccc", "batch-job-ddddd"} <= set(cluster.pods) and "leakwatch-demo-aaaaa" not in cluster.pods


def test_an_unresponsive_api_server_fails_the_restart_instead_of_holding_the_healer(cluster, tmp_path):
    """Issue 32 N3: every API call has a request timeout. The eviction gets no answer: the restart
    fails, is counted, and the healer is free for the next episode (not `in_progress` for ever)."""
    cluster.hang_on = ("/eviction",)
    with StandinApiServer(cluster) as server:
        healer = _healer(restarter(server, request_timeout_s=0.5), tmp_path)
        status, outcome, _ = healer.notify([alert("leakwatch-demo-aaaaa")])
        assert (status, outcome) == (202, "accepted")
        healer.worker.join(45)  # a bound far above the timeout; the stand-in holds the request for 60 s
        assert not healer.worker.is_alive(), f"the healer still waits on the API server: {cluster.hung}"
        assert cluster.hung == [f"/api/v1/namespaces/{NAMESPACE}/pods/leakwatch-demo-aaaaa/eviction"]
        assert healer.metrics.restarts.labels("failed")._value.get() == 1
        assert not healer.policy.in_progress


def test_an_unresponsive_api_server_at_the_target_check_claims_nothing(cluster, tmp_path):
    """The target check before the claim gets no answer: 503, so Alertmanager retries, and nothing
    is claimed; once the API server answers, the retry restarts."""
    cluster.hang_on = ("/pods/leakwatch-demo-aaaaa",)
    with StandinApiServer(cluster) as server:
        healer = _healer(restarter(server, request_timeout_s=0.5), tmp_path)
        status, outcome, _ = healer.notify([alert("leakwatch-demo-aaaaa")])
        assert (status, outcome) == (503, "unavailable")
        assert healer.policy.restarts_last_hour() == 0 and not healer.policy.in_progress
        cluster.answer_again.set()
        status, outcome, _ = healer.notify([alert("leakwatch-demo-aaaaa")])
        assert (status, outcome) == (202, "accepted")
        healer.worker.join(30)
    assert "leakwatch-demo-aaaaa" not in cluster.pods
