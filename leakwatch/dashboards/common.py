"""Variables and annotations several dashboards share."""

from __future__ import annotations

from .board import Annotation, Query, Variable
from .queries import VLLM, VLLM_PROCESS, per_side, quantile, sides

MODEL = Variable(
    name="model",
    label="Model",
    selector="vllm:num_requests_running",
    label_name="model_name",
    description="The served model name(s) (vLLM's model_name label).",
)
INSTANCE = Variable(
    name="instance",
    label="vLLM instance",
    selector='vllm:num_requests_running{model_name=~"$model"}',
    label_name="instance",
    description="The vLLM server(s) serving the selected models, as Prometheus scrapes them.",
)

FIRING_ALERTS = Annotation(
    name="Firing alerts",
    expr='ALERTS{alertstate="firing"}',
    title_format="{{alertname}}",
    text_format="{{severity}}: {{alertname}}",
    tag_keys="alertname,severity",
    colour="red",
)
VLLM_RESTARTS = Annotation(
    name="vLLM restarts",
    expr=f"changes(process_start_time_seconds{{{VLLM_PROCESS}}}[2m]) > 0",
    title_format="vLLM restarted",
    text_format="new API-server process on {{instance}}",
    tag_keys="instance",
    colour="orange",
)
# The healer's restarts (config/metrics/leakwatch-healer.csv): when it drained and restarted vLLM.
HEALER_RESTARTS = Annotation(
    name="Healer restarts",
    expr="changes(leakwatch_healer_last_restart_timestamp_seconds[2m]) > 0",
    title_format="healer restarted vLLM",
    text_format="drain and restart by leakwatch heal ({{instance}})",
    tag_keys="instance",
    colour="purple",
)


def percentiles(
    histogram: str, qs=(0.5, 0.9, 0.99), prefix: str = "", by: str = "model_name", selector: str = VLLM
) -> tuple[Query, ...]:
    """One query per percentile of a histogram, legends such as "p90 demo" ("canary p90 demo" per
    side of a canary)."""
    labels = (by,) if by else ()
    return tuple(
        Query(
            per_side(quantile(q, histogram, sides(by), selector), f"{prefix}p{round(q * 100)}", *labels), "{{series}}"
        )
        for q in qs
    )


def running_and_waiting(prefix: str = "") -> tuple[Query, Query]:
    def gauge(what: str) -> Query:
        return Query(
            per_side(f"sum by ({sides()}) (vllm:num_requests_{what}{{{VLLM}}})", f"{prefix}{what}"), "{{series}}"
        )

    return gauge("running"), gauge("waiting")
