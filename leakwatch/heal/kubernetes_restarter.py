"""How the healer restarts a vLLM replica on Kubernetes: it evicts the pod the alert names through
the Eviction API (policy/v1), and the Deployment creates its replacement.

An eviction, unlike a delete, respects the pod's PodDisruptionBudget: the API server answers 429
while the budget allows no disruption (another replica is already down), and the healer retries
later and counts the refusal. A single-replica model has no budget (the chart renders none), and an
eviction of a pod no budget covers is a graceful delete: preStop, SIGTERM, vLLM's drain within
terminationGracePeriodSeconds. So the Role needs no `delete` on pods.

The healer acts only on a pod in its own namespace that carries the model label; the alert's
(namespace, pod) labels (the chart's rules join on them) say which one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..catalogue import METRICS_DIR
from ..errors import LeakwatchError
from .restarters import RestartError, RestartTiming

log = logging.getLogger("leakwatch.heal")

METRICS_CSV = METRICS_DIR / "leakwatch-healer-kubernetes.csv"
EVICTION_REFUSALS_METRIC = "leakwatch_healer_evictions_refused_total"


class KubernetesRestarter:
    """Evicts the alert's pod with the official `kubernetes` client, then waits until the pod is gone
    and the model has as many ready pods as before. Also the healer's probe (no vLLM URL: the
    replica is drained by its own preStop and --shutdown-timeout)."""

    acts_on_alert = True

    def __init__(
        self,
        api,
        namespace: str,
        model_label: str,
        retries: int = 5,
        retry_interval_s: float = 30.0,
        gone_timeout_s: float = 600.0,
        poll_s: float = 2.0,
        on_refused: Callable[[], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.api = api  # kubernetes.client.CoreV1Api
        self.namespace = namespace
        self.model_label = model_label
        self.retries = int(retries)
        self.retry_interval_s = float(retry_interval_s)
        self.gone_timeout_s = float(gone_timeout_s)
        self.poll_s = float(poll_s)
        self.on_refused = on_refused or (lambda: None)
        self.sleep = sleep
        self.refused = 0
        self._waiting_for: tuple[str, int] | None = None  # (model, ready pods before the eviction)

    @classmethod
    def in_cluster(cls, namespace: str, model_label: str, **kw) -> KubernetesRestarter:
        """With the pod's service account (the chart's Role), or ~/.kube/config outside a cluster."""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            try:
                config.load_kube_config()
            except (config.ConfigException, OSError) as exc:
                raise LeakwatchError(f"no Kubernetes credentials (in-cluster or kubeconfig): {exc}") from None
        return cls(client.CoreV1Api(), namespace, model_label, **kw)

    def describe(self) -> str:
        return f"the alert's pod in namespace {self.namespace} (label {self.model_label}) by eviction"

    def _api_error(self, exc: Exception) -> tuple[int | None, str]:
        status = getattr(exc, "status", None)
        reason = getattr(exc, "body", None) or getattr(exc, "reason", None) or str(exc)
        return status, str(reason)[:300]

    def _model_pods(self, model: str) -> list:
        return self.api.list_namespaced_pod(self.namespace, label_selector=f"{self.model_label}={model}").items

    def check(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.list_namespaced_pod(self.namespace, label_selector=self.model_label)
        except (ApiException, OSError) as exc:
            status, reason = self._api_error(exc)
            raise LeakwatchError(f"cannot list pods in {self.namespace}: HTTP {status} {reason}") from None

    def target(self, labels: dict[str, str]) -> tuple[str, str]:
        """(pod, model) the alert names, after checking it is ours to evict."""
        from kubernetes.client.exceptions import ApiException

        namespace, pod = labels.get("namespace"), labels.get("pod")
        if not pod or not namespace:
            raise RestartError("the alert names no pod (labels namespace and pod); refusing to guess one")
        if namespace != self.namespace:
            raise RestartError(
                f"the alert's pod is in namespace {namespace!r}, the healer acts only in {self.namespace!r}"
            )
        try:
            found = self.api.read_namespaced_pod(pod, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise RestartError(f"pod {self.namespace}/{pod} does not exist (already replaced?)") from None
            raise RestartError(
                f"reading pod {self.namespace}/{pod}: HTTP {exc.status} {self._api_error(exc)[1]}"
            ) from None
        model = (found.metadata.labels or {}).get(self.model_label)
        if not model:
            raise RestartError(f"pod {self.namespace}/{pod} has no {self.model_label} label; not a vLLM pod of ours")
        return pod, model

    def restart(self, alert=None) -> RestartTiming:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        if alert is None:
            raise RestartError("the Kubernetes restarter evicts the pod an alert names; no alert given")
        pod, model = self.target(alert.labels)
        ready_before = sum(_ready(p) for p in self._model_pods(model))
        body = client.V1Eviction(
            api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name=pod, namespace=self.namespace)
        )
        began = time.monotonic()
        for attempt in range(self.retries + 1):
            try:
                self.api.create_namespaced_pod_eviction(pod, self.namespace, body)
                break
            except ApiException as exc:
                if exc.status == 429:
                    self.refused += 1
                    self.on_refused()
                    log.warning(
                        "eviction of %s/%s refused by its PodDisruptionBudget (attempt %d of %d)",
                        self.namespace,
                        pod,
                        attempt + 1,
                        self.retries + 1,
                    )
                    if attempt < self.retries:
                        self.sleep(self.retry_interval_s)
                    continue
                if exc.status == 404:
                    raise RestartError(f"pod {self.namespace}/{pod} vanished before its eviction") from None
                raise RestartError(
                    f"evicting {self.namespace}/{pod}: HTTP {exc.status} {self._api_error(exc)[1]}"
                ) from None
        else:
            raise RestartError(
                f"eviction of {self.namespace}/{pod} refused {self.retries + 1} times "
                "(PodDisruptionBudget); the alert's repeat will try again"
            )
        evicted = time.monotonic()
        log.info("evicted %s/%s after %.1fs; waiting for it to drain and go", self.namespace, pod, evicted - began)
        self._wait_gone(pod)
        self._waiting_for = (model, max(ready_before, 1))
        # The drain is the pod's termination; the Deployment's replacement is awaited by wait_healthy.
        return RestartTiming(time.monotonic() - evicted, 0.0)

    def _wait_gone(self, pod: str) -> None:
        from kubernetes.client.exceptions import ApiException

        deadline = time.monotonic() + self.gone_timeout_s
        while time.monotonic() < deadline:
            try:
                self.api.read_namespaced_pod(pod, self.namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise RestartError(f"watching pod {self.namespace}/{pod} terminate: HTTP {exc.status}") from None
            self.sleep(self.poll_s)
        raise RestartError(f"pod {self.namespace}/{pod} still exists {self.gone_timeout_s:.0f}s after its eviction")

    # -- the healer's probe ------------------------------------------------------------------------

    def wait_idle(self, timeout_s: float) -> float | None:
        """The pod drains itself (preStop sleep, then vLLM's --shutdown-timeout): nothing to wait for."""
        return None

    def wait_healthy(self, timeout_s: float) -> bool:
        """True once the model has as many ready pods as before the eviction."""
        if self._waiting_for is None:
            return True
        model, want = self._waiting_for
        deadline = time.monotonic() + timeout_s
        while True:
            if sum(_ready(p) for p in self._model_pods(model)) >= want:
                self._waiting_for = None
                return True
            if time.monotonic() >= deadline:
                return False
            self.sleep(self.poll_s)


def _ready(pod) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status is None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
