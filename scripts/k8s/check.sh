#!/usr/bin/env bash
# The chart tests' checks against a REAL cluster (kind, or a GPU cluster), where the test suite uses
# offline rendering and a stand-in API server. Needs kubectl and helm on PATH, a kube context
# with kube-prometheus-stack's CRDs installed (docs/kubernetes.md), and the leakwatch image pushed
# where the nodes pull from (or `kind load docker-image leakwatch:<version>`).
#
#   scripts/k8s/check.sh [values file, default deploy/helm/leakwatch/values-demo.yaml]
#
# Environment: NAMESPACE (default leakwatch-check, created and deleted), RELEASE (default lwcheck),
# RELEASE_LABEL (kube-prometheus-stack's release name, default kube-prometheus-stack),
# KEEP=1 to leave the release installed. It stops by itself: every wait has a timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."

values=${1:-deploy/helm/leakwatch/values-demo.yaml}
ns=${NAMESPACE:-leakwatch-check}
release=${RELEASE:-lwcheck}
prom_release=${RELEASE_LABEL:-kube-prometheus-stack}
chart=deploy/helm/leakwatch
python=${PYTHON:-.venv/bin/python}
profile=$(basename "$values" .yaml); profile=${profile#values-}

for tool in kubectl helm; do
  command -v "$tool" >/dev/null || { echo "check: $tool is not on PATH" >&2; exit 2; }
done
kubectl version >/dev/null || { echo "check: no reachable cluster in the current kube context" >&2; exit 2; }

cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then
    helm uninstall "$release" -n "$ns" >/dev/null 2>&1 || true
    kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

echo "== 1. lint and server-side validation of every object (real schemas, CRDs included)"
helm lint --strict "$chart" -f "$values"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
token=$("$python" -c 'import secrets; print(secrets.token_urlsafe(32))')
kubectl -n "$ns" create secret generic leakwatch-healer --from-literal=token="$token" \
  --dry-run=client -o yaml | kubectl apply -f -
set_args=(--set healer.enabled=true --set healer.tokenSecret.name=leakwatch-healer
          --set alertmanagerConfig.enabled=true
          --set "monitoring.additionalLabels.release=$prom_release"
          --set "prometheusRule.additionalLabels.release=$prom_release"
          --set "models.$profile.replicas=2" --set healer.evictionRetries=0)
helm template "$release" "$chart" -n "$ns" -f "$values" "${set_args[@]}" | kubectl apply -n "$ns" --dry-run=server -f -

echo "== 2. install: two replicas, PodDisruptionBudget, healer"
helm upgrade --install "$release" "$chart" -n "$ns" -f "$values" "${set_args[@]}" --wait --timeout 20m
kubectl -n "$ns" get pods -l "leakwatch.dev/model=$profile" -o wide

echo "== 3. the Kubernetes restarter against the real Eviction API (201, then 429 from the PDB)"
"$python" scripts/k8s/evict_check.py --namespace "$ns" --model "$profile"

echo "== 4. the replacement serves: readiness on /v1/models"
kubectl -n "$ns" rollout status "deployment/$release-$profile" --timeout 20m
echo "check: all passed"
