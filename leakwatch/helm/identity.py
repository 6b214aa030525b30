"""How series are named and joined on Kubernetes: the one place the chart's scrape jobs, the rules'
selectors and host labels, and the model label the healer acts on are defined.

The chart's PodMonitors/ServiceMonitors relabel `job` to these fixed names (prometheus-operator
would otherwise call it <namespace>/<monitor name>, which depends on the release name), so the
rules can be generated before anyone installs the chart.
"""

from __future__ import annotations

import re

from ..core.metric_catalogue import rewrite_selectors
from ..core.topology import DCGM_JOB

# The `job` on Kubernetes of each of topology's scrape jobs (leakwatch/core/topology.py: CORE_JOBS and
# DCGM_JOB, keyed as compose and the native runner name them) that the chart's series carry: the
# targets the chart scrapes, and kube-prometheus-stack's node exporter. Prometheus and Alertmanager
# are kube-prometheus-stack's own. config/healer.yaml names remediable jobs by these keys too; the
# chart's healer is told their Kubernetes names.
JOBS = {
    "vllm": "leakwatch-vllm",
    "leakwatch": "leakwatch-exporter",
    "healer": "leakwatch-healer",
    "node": "node-exporter",  # kube-prometheus-stack's prometheus-node-exporter subchart
    # NVIDIA's dcgm-exporter chart installed as docs/kubernetes.md says (release dcgm-exporter): its
    # ServiceMonitor keeps the operator's default job, the Service's name.
    DCGM_JOB: "dcgm-exporter",
}
# The chart's templates call the exporter sidecar `exporter` (its port, and its key in facts.yaml).
FACTS_KEYS = {"leakwatch": "exporter"}


def facts_jobs() -> dict[str, str]:
    """JOBS as the chart's templates read them (facts.yaml's `jobs`)."""
    return {FACTS_KEYS.get(job, job): name for job, name in JOBS.items()}


# One replica is one pod: every join between vLLM, the exporter sidecar and DCGM (with
# dcgm-exporter's pod attribution) is on these. The node exporter's series carry its own pod, so
# node-level terms (swap, MemAvailable) do not join; a pod's memory limit bounds it instead.
HOST_LABELS = ["namespace", "pod"]

# Pod label naming the model profile; the healer evicts only pods carrying it.
MODEL_LABEL = "leakwatch.dev/model"

# The canary rollout (docs/canary.md). The canary's pods carry SIDE_LABEL=canary and their own
# component, so neither the stable Deployment's selector, its Service nor the healer (which acts on
# component=vllm only: the canary is judged, not healed) ever takes them for stable pods. The stable
# pods keep the labels they had without the canary: turning it on does not restart them, and the
# monitors label a vLLM pod without SIDE_LABEL as the stable side.
SIDE_LABEL = "leakwatch.dev/deployment"
COMPONENTS = {"stable": "vllm", "canary": "vllm-canary", "router": "canary-router"}


def pod_label_meta(label: str) -> str:
    """The service-discovery label Prometheus gives a pod label (every character outside
    [a-zA-Z0-9_] becomes `_`)."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


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


# -- one release among others ----------------------------------------------------------------------
# A cluster may run other GPU workloads, other teams' targets and several releases of this chart
# (in one namespace or several). The chart's monitors label every target they scrape with its
# release as <namespace>/<release> (unique in a cluster) and with the node exporter's instance on
# the pod's node; the generated rules carry RELEASE_PLACEHOLDER where the template puts this release.
RELEASE_LABEL = "leakwatch_release"
RELEASE_PLACEHOLDER = "__LEAKWATCH_RELEASE__"
RELEASE_MATCHER = f'{RELEASE_LABEL}="{RELEASE_PLACEHOLDER}"'
# kube-prometheus-stack's node exporter runs on the host network, so its `instance` is
# <node IP>:<port>; the monitors write that into NODE_LABEL from the pod's host IP.
NODE_LABEL = "node_instance"
NODE_EXPORTER_PORT = 9100

# Series the chart does not scrape: dcgm-exporter's (one per card, attributed to whichever pod holds
# it) and the node exporter's (one per node). They carry no release label, so they are kept where
# this release's vLLM pods are.
FOREIGN_PREFIXES = {"dcgm": "DCGM_FI_", "node": "node_"}


def release_pods(selector: str) -> str:
    """This release's serving pods, one series each (the vLLM target's `up`, present while the pod
    is scraped whether or not vLLM answers), selected by `selector`'s matchers."""
    return f'up{{job="{JOBS["vllm"]}", {selector}}}'


def scoped_series(name: str, body: str, ranged: bool, pods: str) -> str:
    """One series selector of a rule or panel, kept to the pods `pods` selects (matchers): ours get
    the matchers; a DCGM card counts only while one of those pods holds it, a node's figures only
    on the nodes they run on."""
    sel = f"{name}{{{body}}}" if body else name
    if not name.startswith(tuple(FOREIGN_PREFIXES.values())):
        return f"{name}{{{body + ', ' if body else ''}{pods}}}"
    if ranged:
        raise ValueError(f"{name}: a range over a series of another exporter cannot be scoped to a release's pods")
    if name.startswith(FOREIGN_PREFIXES["dcgm"]):
        return f"({sel} and on ({', '.join(HOST_LABELS)}) {release_pods(pods)})"
    nodes = f'label_replace({release_pods(pods)}, "instance", "$1", "{NODE_LABEL}", "(.*)")'
    return f"({sel} and on (instance) {nodes})"


def scope_expr(expr: str, pods: str) -> str:
    """`expr` with every series selector scoped as scoped_series says (a series such as `ALERTS` or
    `scrape_samples_scraped` counts as ours: its pods carry the matchers)."""
    return rewrite_selectors(expr, lambda name, body, ranged: scoped_series(name, body, ranged, pods))


def scoped_to_release(groups: list[dict]) -> list[dict]:
    """Rule groups that read only this release's series: every selector scoped to its pods, and
    every recorded series and alert labelled with the release (two releases record the same names;
    each reads back its own)."""
    scoped = []
    for group in groups:
        rules = []
        for rule in group["rules"]:
            labels = {**rule.get("labels", {}), RELEASE_LABEL: RELEASE_PLACEHOLDER}
            rules.append({**rule, "expr": scope_expr(rule["expr"], RELEASE_MATCHER), "labels": labels})
        scoped.append({**group, "rules": rules})
    return scoped
