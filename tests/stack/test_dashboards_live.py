"""Every dashboard query against the real stack: each metric it names is one the real exporters
emit (the catalogue), and with traffic sent each panel returns data from the real Prometheus over
the dashboard's default time range, with variables resolved the way Grafana resolves them."""

from __future__ import annotations

import time
import warnings

import pytest
import requests

from leakwatch.catalogue import PROMETHEUS_SYNTHETIC, exporter_metrics, metric_names, recorded_names
from leakwatch.dashboards import boards
from leakwatch.dashboards.loadtest import loadgen_series
from leakwatch.dashboards.live import resolve_variables, run_annotation, run_panel, scrape_interval_s, variable_values

pytestmark = pytest.mark.stack

BOARDS = boards()
CPU_PANELS = [(b, p) for b in BOARDS for p in b.panels() if not p.gpu]
GPU_PANELS = [(b, p) for b in BOARDS for p in b.panels() if p.gpu]
EXPORTER = set(exporter_metrics())
# Sent twice, so the second time its prefix is served from vLLM's prefix cache.
PROMPT = "The lighthouse keeper counted the ships that passed each night, and wrote their names " * 4


def _complete(stack, model: str, stream: bool, tokens: int = 24) -> requests.Response:
    resp = requests.post(f"{stack.vllm_url}/v1/completions", timeout=120, stream=stream,
                         json={"model": model, "prompt": PROMPT, "max_tokens": tokens, "stream": stream})
    if stream:
        for _ in resp.iter_lines():
            pass
    return resp


@pytest.fixture(scope="module")
def traffic(native_stack):
    """Sends ordinary traffic after Prometheus has scraped vLLM (so rates see it as an increase),
    plus two calls with a wrong model name (the failed-calls panels), and waits until Prometheus has
    scraped the result. Returns the time the dashboards are evaluated at."""
    prom = native_stack.prometheus
    model = native_stack.model
    selector = f'vllm:request_success_total{{model_name="{model}"}}'
    before = prom.wait_for(f"sum({selector})", timeout=180)
    done = float(before[0]["value"][1])
    sent = 12
    for i in range(sent):
        assert _complete(native_stack, model, stream=i % 2 == 1).status_code == 200
    for _ in range(2):
        assert _complete(native_stack, "no-such-model", stream=False).status_code == 404
    prom.wait_for(f"sum({selector}) >= {done + sent}", timeout=120)
    prom.wait_for('sum(http_requests_total{status="4xx"}) >= 2', timeout=120)
    # One more scrape of every target, so each series has a sample after the traffic.
    time.sleep(scrape_interval_s() + 1)
    return time.time()


@pytest.fixture(scope="module")
def variables(native_stack, traffic):
    prom = native_stack.prometheus
    resolved = {}
    for board in BOARDS:
        resolved[board.uid] = resolve_variables(prom, board, traffic - 3600, traffic)
    return resolved


def exporter_running(metric_catalogue) -> bool:
    return bool(EXPORTER & metric_catalogue)


def test_every_metric_a_dashboard_uses_is_one_an_exporter_emits(metric_catalogue):
    allowed = metric_catalogue | EXPORTER | (loadgen_series() or set()) | recorded_names() | PROMETHEUS_SYNTHETIC
    unknown = [
        f"{where}: {sorted(metric_names(expr) - allowed)}"
        for board in BOARDS for where, expr in board.queries() if metric_names(expr) - allowed
    ]
    assert unknown == []
    # The catalogue is a live scrape, not a list that accepts anything.
    assert "vllm:kv_cache_usage_perc" in metric_catalogue and "node_memory_MemAvailable_bytes" in metric_catalogue
    assert "vllm:gpu_cache_usage_perc" not in allowed and "nvidia_smi_memory_used" not in allowed


def test_variables_list_the_running_model_and_instance(native_stack, variables):
    for board in BOARDS:
        names = {v.name for v in board.variables}
        if "model" in names:
            assert variables[board.uid]["model"] == [native_stack.model], board.uid
        if "instance" in names and board.uid != "leakwatch-gpu":
            assert variables[board.uid]["instance"] == [f"127.0.0.1:{native_stack.env['VLLM_PORT']}"], board.uid


def test_gpu_panels_are_listed_and_are_the_only_ones_excluded():
    assert GPU_PANELS, "the GPU-only list must not be empty"
    assert {id(p) for _, p in GPU_PANELS} == {id(p) for b in BOARDS for p in b.panels() if p.gpu}
    assert len(CPU_PANELS) + len(GPU_PANELS) == sum(len(b.panels()) for b in BOARDS)
    assert {b.uid for b, _ in GPU_PANELS} >= {"leakwatch-gpu", "leakwatch-memory"}


@pytest.mark.parametrize("board, panel", CPU_PANELS, ids=[f"{b.uid}:{p.title}" for b, p in CPU_PANELS])
def test_panel_has_data_over_the_default_range(board, panel, native_stack, traffic, variables, metric_catalogue):
    values = variable_values(variables[board.uid])
    results = run_panel(native_stack.prometheus, board, panel, values, traffic)
    for result in results:
        assert result.error is None, f"{result.ref_id}: {result.error}\n{result.expr}"
        if result.has_data:
            continue
        if metric_names(result.expr) & EXPORTER and not exporter_running(metric_catalogue):
            # Pending on the memory exporter (`leakwatch exporter`, whose series are the contract in
            # config/metrics/leakwatch-exporter.csv): until a target serves them such a query is
            # empty. As soon as one does, it must have data like every other query.
            warnings.warn(f"pending on the memory exporter: {board.uid} / {panel.title} {result.ref_id}")
            continue
        pytest.fail(
            f"{board.uid} / {panel.title} query {result.ref_id}: {result.series} series, no finite value "
            f"over the default range ({board.time_from})\n{result.expr}"
        )


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b.uid)
def test_annotation_queries_run(board, native_stack, traffic, variables):
    values = variable_values(variables[board.uid])
    for annotation in board.annotations:
        assert run_annotation(native_stack.prometheus, board, annotation, values, traffic) is None, annotation.name


def test_cli_check_reports_every_serving_panel_with_data(native_stack, traffic, capsys):
    from leakwatch.cli import main

    code = main(["dashboards", "check", "--prometheus", native_stack.prometheus.base_url, "--dashboard", "leakwatch-serving"])
    out = capsys.readouterr().out
    panels = len(next(b for b in BOARDS if b.uid == "leakwatch-serving").panels())
    assert code == 0, out
    assert f"leakwatch-serving: {panels}/{panels} panels have data" in out
    assert main(["dashboards", "check", "--prometheus", native_stack.prometheus.base_url, "--dashboard", "nope"]) == 2
