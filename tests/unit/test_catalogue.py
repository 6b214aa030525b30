"""The PromQL metric-name extraction that the rule and dashboard contract tests rely on."""

import pytest

from leakwatch.core.metric_catalogue import dcgm_metrics, exposed_names, metric_names, with_matcher
from leakwatch.leakcheck.collect import all_queries


@pytest.mark.parametrize(
    "expr, names",
    [
        ("up", {"up"}),
        ('rate(vllm:request_success_total{model_name="demo"}[5m])', {"vllm:request_success_total"}),
        (
            "histogram_quantile(0.9, sum by (le, model_name) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))",
            {"vllm:e2e_request_latency_seconds_bucket"},
        ),
        ("deriv(DCGM_FI_DEV_FB_USED[10m]) * 60 > 50", {"DCGM_FI_DEV_FB_USED"}),
        ("a / on (instance) group_left (model_name) b", {"a", "b"}),
        ('sum without (cpu, mode) (rate(node_cpu_seconds_total{mode!="idle"}[1m]))', {"node_cpu_seconds_total"}),
        ('label_replace(up, "dst", "$1", "job", "(.*)")', {"up"}),
        ('{__name__="process_resident_memory_bytes", job="vllm"}', {"process_resident_memory_bytes"}),
        ("x offset 1w / x", {"x"}),
        ('rate(x_total{model_name=~"$model"}[$__rate_interval])', {"x_total"}),
        ("max_over_time(a[1h:5m]) and bool b unless c", {"a", "b", "c"}),
        ("vector(1) > 0", set()),
    ],
)
def test_metric_names(expr, names):
    assert metric_names(expr) == names


def test_exposed_names_reads_histogram_suffixes():
    text = '# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 0\nh_sum 0\nh_count 0\nc_total 3\n'
    assert exposed_names(text) == {"h_bucket", "h_sum", "h_count", "c_total"}


def test_dcgm_list_has_framebuffer_metrics():
    metrics = dcgm_metrics()
    assert metrics["DCGM_FI_DEV_FB_USED"]["type"] == "gauge"
    assert "MiB" in metrics["DCGM_FI_DEV_FB_FREE"]["help"]
    assert "nvidia_smi_memory_used" not in metrics


def test_with_matcher_narrows_every_series_of_an_expression_to_one_deployment():
    m = 'deployment="canary"'
    assert with_matcher("sum(vllm:request_success_total)", m) == 'sum(vllm:request_success_total{deployment="canary"})'
    assert (
        with_matcher('max(process_start_time_seconds{job="vllm",})', m)
        == 'max(process_start_time_seconds{job="vllm", deployment="canary"})'
    )
    # Aggregations with a grouping before their argument, label lists, ranges, offsets, numbers,
    # strings (a `}` inside one too) and functions stay as they were.
    assert with_matcher(
        'histogram_quantile(0.9, sum by (le) (rate(x_bucket{path="a}b"}[5m] offset 1h))) > 1e3 and on (instance) up', m
    ) == (
        'histogram_quantile(0.9, sum by (le) (rate(x_bucket{path="a}b", deployment="canary"}[5m] offset 1h)))'
        ' > 1e3 and on (instance) up{deployment="canary"}'
    )
    assert (
        with_matcher('label_replace(sum(a) without (cpu), "role", "api_server", "", "")', m)
        == 'label_replace(sum(a{deployment="canary"}) without (cpu), "role", "api_server", "", "")'
    )
    assert with_matcher("sum(a)", "") == "sum(a)"
    # The names an expression selects are the same before and after.
    for expr in all_queries():
        assert metric_names(with_matcher(expr, m)) == metric_names(expr), expr
