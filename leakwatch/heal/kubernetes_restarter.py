"""How the healer restarts a vLLM replica on Kubernetes: it evicts the pod the alert names through
the Eviction API (policy/v1), and the Deployment creates its replacement.

An eviction, unlike a delete, respects the pod's PodDisruptionBudget: the API server answers 429
while the budget allows no disruption (another replica is already down), and the healer retries
later and counts the refusal. A single-replica model has no budget (the chart renders none), and an
eviction of a pod no budget covers is a graceful delete: preStop, SIGTERM, vLLM's drain within
terminationGracePeriodSeconds. So the Role needs no `delete` on pods.

The healer acts only on a pod of its own release: in its namespace, carrying the model label and
every `--pod-label` the chart passes (its release's instance label and the vLLM component). The
alert's (namespace, pod) labels (the chart's rules join on them) say which one. Every API call has a
request timeout: an API server that does not answer fails the restart instead of holding the healer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..core.errors import LeakwatchError
from ..core.metric_catalogue import METRICS_DIR
from .restarters import RestartError, RestartTiming, TargetRefused

log = logging.getLogger("leakwatch.heal")

# Seconds per API call (connect + read): an eviction or a read answers in well under a second.
REQUEST_TIMEOUT_S = 10.0


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
        pod_labels: dict[str, str] | None = None,
        retries: int = 5,
        retry_interval_s: float = 30.0,
        gone_timeout_s: float = 600.0,
        poll_s: float = 2.0,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        on_refused: Callable[[], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.api = api  # kubernetes.client.CoreV1Api
        self.namespace = namespace
        self.model_label = model_label
        self.pod_labels = dict(pod_labels or {})  # what else a pod of this release carries
        self.request_timeout_s = float(request_timeout_s)
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
        scope = ", ".join(f"{k}={v}" for k, v in sorted(self.pod_labels.items()))
        return f"the alert's pod in namespace {self.namespace} (label {self.model_label}{', ' + scope if scope else ''}) by eviction"

    def _api_error(self, exc: Exception) -> tuple[int | None, str]:
        status = getattr(exc, "status", None)
        reason = getattr(exc, "body", None) or getattr(exc, "reason", None) or str(exc)
        return status, str(reason)[:300]

    def _call(self, what: str, method, *args, **kwargs):
        """One API call with the request timeout; an ApiException goes to the caller, a timeout or a
        refused connection becomes a RestartError that says what did not answer."""
        import urllib3

        try:
            return method(*args, **kwargs, _request_timeout=self.request_timeout_s)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise RestartError(
                f"{what}: the API server did not answer within {self.request_timeout_s:g}s ({type(exc).__name__})"
            ) from None

    def _selector(self, model: str | None = None) -> str:
        labels = {**self.pod_labels, self.model_label: model} if model else self.pod_labels
        terms = [f"{k}={v}" for k, v in sorted(labels.items())]
        return ",".join(terms if model else [self.model_label, *terms])

    def _model_pods(self, model: str) -> list:
        return self._call(
            f"listing the {model} pods",
            self.api.list_namespaced_pod,
            self.namespace,
            label_selector=self._selector(model),
        ).items

    def check(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._call(
                f"listing pods in {self.namespace}",
                self.api.list_namespaced_pod,
                self.namespace,
                label_selector=self._selector(),
            )
        except ApiException as exc:
            status, reason = self._api_error(exc)
            raise LeakwatchError(f"cannot list pods in {self.namespace}: HTTP {status} {reason}") from None
        except RestartError as exc:
            raise LeakwatchError(str(exc)) from None

    def target(self, labels: dict[str, str]) -> tuple[str, str]:
        """(pod, model) the alert names, after checking it is this release's to evict: TargetRefused
        when it is not, RestartError when the API server cannot tell now."""
        from kubernetes.client.exceptions import ApiException

        namespace, pod = labels.get("namespace"), labels.get("pod")
        if not pod or not namespace:
            raise TargetRefused("the alert names no pod (labels namespace and pod); refusing to guess one")
        if namespace != self.namespace:
            raise TargetRefused(
                f"the alert's pod is in namespace {namespace!r}, the healer acts only in {self.namespace!r}"
            )
        try:
            found = self._call(f"reading pod {self.namespace}/{pod}", self.api.read_namespaced_pod, pod, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise TargetRefused(f"pod {self.namespace}/{pod} does not exist (already replaced?)") from None
            raise RestartError(
                f"reading pod {self.namespace}/{pod}: HTTP {exc.status} {self._api_error(exc)[1]}"
            ) from None
        pod_labels = found.metadata.labels or {}
        model = pod_labels.get(self.model_label)
        if not model:
            raise TargetRefused(f"pod {self.namespace}/{pod} has no {self.model_label} label; not a vLLM pod of ours")
        foreign = {k: pod_labels.get(k) for k, v in self.pod_labels.items() if pod_labels.get(k) != v}
        if foreign:
            raise TargetRefused(
                f"pod {self.namespace}/{pod} is not this release's vLLM pod "
                f"({', '.join(f'{k}={v!r}' for k, v in sorted(foreign.items()))}; want "
                f"{', '.join(f'{k}={v}' for k, v in sorted(self.pod_labels.items()))})"
            )
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
                self._call(
                    f"evicting {self.namespace}/{pod}",
                    self.api.create_namespaced_pod_eviction,
                    pod,
                    self.namespace,
                    body,
                )
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
                self._call(
                    f"watching pod {self.namespace}/{pod} terminate", self.api.read_namespaced_pod, pod, self.namespace
                )
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
