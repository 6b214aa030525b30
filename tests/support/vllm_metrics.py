"""What a running vLLM says about itself on its own /metrics (the truth the canary tests hold
Prometheus and the router to)."""

from __future__ import annotations

import requests
from prometheus_client.parser import text_string_to_metric_families


def requests_finished(vllm_url: str) -> float:
    """vllm:request_success_total summed over its finished reasons."""
    text = requests.get(f"{vllm_url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:request_success_total"
    )
