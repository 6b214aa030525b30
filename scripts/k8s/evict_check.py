"""The restarter's contract on a real cluster (scripts/k8s/check.sh): evicting one of two replicas
is accepted (201); evicting the other while the first one's replacement is not ready yet is
refused by the PodDisruptionBudget (429, counted, nothing lost); a pod without the model label is
never touched. Uses ~/.kube/config, like the healer outside a cluster."""

from __future__ import annotations

import argparse
import sys
import time

sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0])

from leakwatch.heal.kubernetes_restarter import KubernetesRestarter
from leakwatch.heal.payload import Alert
from leakwatch.heal.restarters import RestartError
from leakwatch.helm.identity import MODEL_LABEL


def alert(namespace: str, pod: str) -> Alert:
    return Alert("firing", "HostMemoryLeak", {"namespace": namespace, "pod": pod}, "check", time.time())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    refused = []
    restarter = KubernetesRestarter.in_cluster(
        args.namespace, MODEL_LABEL, retries=0, poll_s=2, on_refused=lambda: refused.append(1)
    )
    restarter.check()
    pods = sorted(p.metadata.name for p in restarter._model_pods(args.model))
    if len(pods) != 2:
        print(f"expected 2 replicas of {args.model}, found {pods}", file=sys.stderr)
        return 1
    first, second = pods
    from threading import Thread

    result = {}
    worker = Thread(target=lambda: result.setdefault("first", restarter.restart(alert(args.namespace, first))))
    worker.start()
    time.sleep(5)  # the eviction of the first is accepted and its pod terminating
    try:
        restarter.restart(alert(args.namespace, second))
        print("FAIL: the second eviction was accepted although the budget allows one disruption", file=sys.stderr)
        return 1
    except RestartError as exc:
        print(f"second eviction refused as expected: {exc}")
    worker.join(900)
    if "first" not in result or not refused:
        print(f"FAIL: first eviction {result!r}, refusals {len(refused)}", file=sys.stderr)
        return 1
    print(f"first pod {first} evicted and gone in {result['first'].stop_s:.0f}s; refusals counted: {len(refused)}")
    if not restarter.wait_healthy(1200):
        print("FAIL: no ready replacement within 20 minutes", file=sys.stderr)
        return 1
    print("replacement ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
