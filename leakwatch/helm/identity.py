"""How series are named and joined on Kubernetes: the one place the chart's scrape jobs, the rules'
selectors and host labels, and the model label the healer acts on are defined.

The chart's PodMonitors/ServiceMonitors relabel `job` to these fixed names (prometheus-operator
would otherwise call it <namespace>/<monitor name>, which depends on the release name), so the
rules can be generated before anyone installs the chart.
"""

from __future__ import annotations

# `job` of each target the chart scrapes, and kube-prometheus-stack's node exporter.
JOBS = {
    "vllm": "leakwatch-vllm",
    "exporter": "leakwatch-exporter",
    "healer": "leakwatch-healer",
    "node": "node-exporter",  # kube-prometheus-stack's prometheus-node-exporter subchart
    # NVIDIA's dcgm-exporter chart installed as docs/kubernetes.md says (release dcgm-exporter): its
    # ServiceMonitor keeps the operator's default job, the Service's name.
    "dcgm": "dcgm-exporter",
}

# config/healer.yaml names remediable jobs as compose and the native runner scrape them; the chart's
# healer is told their Kubernetes names.
REMEDIABLE_JOB_NAMES = {"leakwatch": JOBS["exporter"], "dcgm": JOBS["dcgm"]}

# One replica is one pod: every join between vLLM, the exporter sidecar and DCGM (with
# dcgm-exporter's pod attribution) is on these. The node exporter's series carry its own pod, so
# node-level terms (swap, MemAvailable) do not join; a pod's memory limit bounds it instead.
HOST_LABELS = ["namespace", "pod"]

# Pod label naming the model profile; the healer evicts only pods carrying it.
MODEL_LABEL = "leakwatch.dev/model"


def rule_selectors(base: dict[str, str]) -> dict[str, str]:
    """config/alerts.yaml's selectors with the scrape jobs renamed to the chart's."""
    selectors = dict(base)
    selectors["vllm"] = f'job="{JOBS["vllm"]}"'
    selectors["node"] = f'job="{JOBS["node"]}"'
    return selectors


# Alerts of the compose/native stacks that kube-prometheus-stack already ships under the same names
# (TargetDown, Watchdog, PrometheusRuleFailures) or its own (AlertmanagerFailedToSendAlerts): in a
# shared cluster ours would duplicate them, and our TargetDown (`up == 0`) would page for every
# target of every team. The chart leaves them out; a down exporter sidecar or vLLM is still
# kube-prometheus-stack's TargetDown, and vLLM's own is VLLMDown.
LEFT_TO_KUBE_PROMETHEUS_STACK = ("TargetDown", "Watchdog", "PrometheusRuleFailures", "AlertmanagerNotificationsFailing")


def without_kube_prometheus_stack_alerts(groups: list[dict]) -> list[dict]:
    """Rule groups less the alerts above (a group left empty goes too)."""
    kept = []
    for group in groups:
        rules = [r for r in group["rules"] if r.get("alert") not in LEFT_TO_KUBE_PROMETHEUS_STACK]
        if rules:
            kept.append({**group, "rules": rules})
    return kept
