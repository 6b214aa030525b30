"""The generated dashboards: valid under Grafana 11.6's types, every query parsed by the real
promtool, GPU-only panels flagged exactly, no vLLM names that vLLM removed."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import subprocess

import pytest
import yaml

from leakwatch.core.durations import parse_duration
from leakwatch.core.errors import LeakwatchError
from leakwatch.core.metric_catalogue import gpu_only_names, metric_names
from leakwatch.core.settings import load as load_settings
from leakwatch.dashboards import boards
from leakwatch.dashboards.board import layout
from leakwatch.dashboards.files import DASHBOARDS_DIR
from leakwatch.dashboards.queries import expand
from leakwatch.dashboards.validate import SCHEMA_VERSION, dashboard_problems, file_problems

BOARDS = boards()
# Metric names vLLM has removed; dashboards that still use them go blank (the anchors' mistake).
REMOVED_VLLM_NAMES = {
    "vllm:gpu_cache_usage_perc",
    "vllm:cpu_cache_usage_perc",
    "vllm:time_per_output_token_seconds",
    "vllm:num_requests_swapped",
    "vllm:gpu_prefix_cache_hit_rate",
    "vllm:cpu_prefix_cache_hit_rate",
    "vllm:avg_prompt_throughput_toks_per_s",
    "vllm:avg_generation_throughput_toks_per_s",
}


def test_every_dashboard_is_generated_and_nothing_else():
    assert sorted(p.name for p in DASHBOARDS_DIR.glob("*.json")) == sorted(b.file_name for b in BOARDS)
    assert len(BOARDS) == 4


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b.uid)
def test_dashboard_json_loads_under_grafana_11_6_types(board):
    path = DASHBOARDS_DIR / board.file_name
    assert file_problems(path) == []
    document = json.loads(path.read_text())
    assert document["schemaVersion"] == SCHEMA_VERSION == 41
    assert document["uid"] == board.uid
    assert len([p for p in document["panels"] if p["type"] != "row"]) == len(board.panels())


def test_uids_and_titles_are_unique_across_dashboards():
    assert len({b.uid for b in BOARDS}) == len(BOARDS)
    assert len({b.title for b in BOARDS}) == len(BOARDS)


def test_sdk_is_the_build_for_the_grafana_compose_runs():
    image = load_settings().service("grafana").image  # grafana/grafana:11.6.1
    grafana_minor = ".".join(image.rsplit(":", 1)[1].split(".")[:2])
    sdk = importlib.metadata.version("grafana-foundation-sdk")  # 1769699379!11.6.0
    assert ".".join(sdk.split("!")[1].split(".")[:2]) == grafana_minor


def _memory_document():
    return json.loads((DASHBOARDS_DIR / "leakwatch-memory.json").read_text())


def _first(document, kind):
    return next(p for p in document["panels"] if p["type"] == kind)


MUTATIONS = {
    "unknown panel key": (lambda d: _first(d, "stat").update(colour="red"), "not a field of Grafana 11.6"),
    "wrong type": (lambda d: _first(d, "stat")["gridPos"].update(w="4"), "expected an integer"),
    "bad enum in typed options": (
        lambda d: _first(d, "stat")["options"].update(graphMode="sparkle"),
        "BigValueGraphMode",
    ),
    "unknown unit": (lambda d: _first(d, "timeseries")["fieldConfig"]["defaults"].update(unit="bytez"), "unit 'bytez'"),
    "no description": (lambda d: _first(d, "timeseries").update(description=""), "no description"),
    "duplicate id": (lambda d: d["panels"][2].update(id=d["panels"][1]["id"]), "used more than once"),
    "overlap": (lambda d: _first(d, "timeseries")["gridPos"].update(y=1), "overlap"),
    "outside grid": (lambda d: _first(d, "timeseries")["gridPos"].update(x=20), "outside the 24-column grid"),
    "hard-coded data source": (
        lambda d: _first(d, "timeseries").update(datasource={"type": "prometheus", "uid": "abc"}),
        "data source",
    ),
    "schema version": (lambda d: d.update(schemaVersion=39), "schemaVersion 39"),
    "no base threshold": (
        lambda d: _first(d, "stat")["fieldConfig"]["defaults"]["thresholds"]["steps"].pop(0),
        "base step",
    ),
    "unknown annotation key": (lambda d: d["annotations"]["list"][0].update(titleFormatt="x"), "titleFormatt"),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_validation_catches(name):
    mutate, message = MUTATIONS[name]
    document = _memory_document()
    assert dashboard_problems(copy.deepcopy(document)) == []
    mutate(document)
    problems = dashboard_problems(document)
    assert any(message in p for p in problems), problems


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b.uid)
def test_grid_has_no_overlaps_and_no_gaps_beside_panels(board):
    # validate() rejects overlaps; here also check each row's panels fill whole lines, so nothing
    # renders as a ragged half-empty line.
    placed = layout(board)
    rows = {}
    current = None
    for item, pos in placed:
        if pos.w == 24 and pos.h == 1 and not hasattr(item, "queries"):
            current = item.title
            continue
        rows.setdefault(current, {}).setdefault(pos.y, 0)
        rows[current][pos.y] += pos.w
    for row, lines in rows.items():
        assert all(width == 24 for width in lines.values()), (row, lines)


def test_every_query_parses_with_promtool(tmp_path):
    """promtool (the real Prometheus parser) checks each query as a recording rule, with Grafana's
    variables replaced the way Grafana sends them."""
    scrape = parse_duration(load_settings().prometheus["scrape_interval"])
    rules, where = [], []
    for board in BOARDS:
        values = {var.name: ".*" for var in board.variables}
        range_s = parse_duration(board.time_from.removeprefix("now-"))
        for place, expr in board.queries():
            rules.append({"record": f"dashboard_query_{len(rules)}", "expr": expand(expr, values, range_s, 60, scrape)})
            where.append(place)
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout
    assert len(rules) > 100


def test_promtool_check_can_fail(tmp_path):
    path = tmp_path / "bad.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "x", "expr": "sum(rate(x[5m])"}]}]}))
    assert subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True).returncode != 0


def test_an_unknown_variable_is_an_error():
    with pytest.raises(KeyError):
        expand('up{job=~"$jbo"}', {"job": ".*"}, 3600, 60, 15)


def test_no_removed_vllm_names():
    used = {name for board in BOARDS for _, expr in board.queries() for name in metric_names(expr)}
    assert not used & REMOVED_VLLM_NAMES
    assert "vllm:kv_cache_usage_perc" in used and "vllm:inter_token_latency_seconds_bucket" in used


def test_gpu_flag_marks_exactly_the_gpu_only_panels():
    """Panel.gpu is the list the end-to-end test excludes on CPU-only hosts: a panel is flagged
    exactly when every series it uses exists only with a GPU, and no other panel uses one."""
    gpu_names = gpu_only_names()
    flagged = []
    for board in BOARDS:
        for panel in board.panels():
            names = {n for q in panel.queries for n in metric_names(q.expr)}
            assert names, panel.title
            if panel.gpu:
                flagged.append(panel.title)
                assert names <= gpu_names, (panel.title, names - gpu_names)
            else:
                assert not names & gpu_names, (panel.title, names & gpu_names)
    assert len(flagged) >= 10
    assert all(p.gpu for p in next(b for b in BOARDS if b.uid == "leakwatch-gpu").panels())


def test_every_description_says_what_healthy_looks_like():
    # validate() checks that a description exists; the source must also say what "healthy" is.
    missing = [f"{b.uid} / {p.title}" for b in BOARDS for p in b.panels() if "Healthy" not in p.description]
    assert missing == []


def test_load_test_puts_client_next_to_server_once_the_loadgen_contract_exists():
    from leakwatch.dashboards.loadtest import LOADGEN_CSV, MEASURES, loadgen_series, rows

    board = next(b for b in BOARDS if b.uid == "leakwatch-loadtest")
    client_names = {n for _, client, _ in MEASURES for q in client.queries for n in metric_names(q.expr)}
    if LOADGEN_CSV.exists():
        assert all(len(row.panels) == 2 for row in board.rows)
        assert client_names <= loadgen_series()
    else:
        assert all(len(row.panels) == 1 and "(server)" in row.panels[0].title for row in board.rows)
    # With the contract, every row is client | server; a client series missing from it is an error.
    paired = rows(client_names)
    assert [len(row.panels) for row in paired] == [2] * len(MEASURES)
    with pytest.raises(LeakwatchError, match="not in"):
        rows(client_names - {"leakwatch_loadgen_users"})


def test_cli_validate(tmp_path, capsys):
    from leakwatch.cli import main

    assert main(["dashboards", "validate"]) == 0
    assert capsys.readouterr().out.count(": ok") == len(BOARDS)
    broken = _memory_document()
    _first(broken, "timeseries")["fieldConfig"]["defaults"]["unit"] = "bytez"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    (tmp_path / "not.json").write_text("{")
    assert main(["dashboards", "validate", str(tmp_path / "broken.json"), str(tmp_path / "not.json")]) == 1
    out = capsys.readouterr().out
    assert "unit 'bytez'" in out and "not JSON" in out
    assert main(["dashboards", "validate", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_recorded_and_gpu_only_names(tmp_path):
    from leakwatch.core.metric_catalogue import recorded_names

    (tmp_path / "a.yml").write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {"record": "leakwatch:host_growth:rate1h", "expr": "deriv(x[1h])"},
                            {"alert": "X", "expr": "up == 0"},
                        ],
                    }
                ]
            }
        )
    )
    (tmp_path / "empty.yml").write_text("")
    assert recorded_names(tmp_path) == {"leakwatch:host_growth:rate1h"}
    gpu = gpu_only_names()
    assert {"DCGM_FI_DEV_FB_USED", "leakwatch_gpu_memory_used_bytes", "leakwatch_vram_retention_ratio"} <= gpu
    assert not {"leakwatch_gpu_available", "leakwatch_process_resident_memory_bytes"} & gpu


def test_event_panels_are_the_retention_ratios():
    # The end-to-end test lets these be empty until their event happened; keep the list short.
    events = {p.title for b in BOARDS for p in b.panels() if p.event}
    assert events == {"VRAM retention after bursts", "Host memory retention after bursts, per role"}


def _evaluate_with_promtool(tmp_path, expr: str, input_series: list[dict], expected: list[dict]) -> str:
    """promtool's answer on `expr` (Grafana's variables replaced) over `input_series` at 240m: "" when it
    gives `expected` (promtool's exp_samples), else promtool's report."""
    values = {"model": ".*", "instance": ".*", "gpu": ".*"}
    case = {"expr": expand(expr, values, 6 * 3600, 60, 15), "eval_time": "240m", "exp_samples": expected}
    path = tmp_path / "panel.test.yml"
    path.write_text(
        yaml.safe_dump({"tests": [{"interval": "1m", "input_series": input_series, "promql_expr_test": [case]}]})
    )
    result = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    return "" if result.returncode == 0 else result.stdout + result.stderr


def _side(side: str, exporter: str, vllm: str, requests_per_min: int, growth_per_min: int) -> list[dict]:
    label = f', deployment="{side}"' if side else ""
    return [
        {
            "series": f'leakwatch_process_anonymous_memory_bytes{{role="worker", rank="0", instance="{exporter}", '
            f'job="leakwatch"{label}}}',
            "values": f"1000000000+{growth_per_min}x300",
        },
        {
            "series": f'leakwatch_process_swap_bytes{{role="worker", rank="0", instance="{exporter}", job="leakwatch"{label}}}',
            "values": "0x300",
        },
        {
            "series": f'vllm:request_success_total{{finished_reason="stop", model_name="m", instance="{vllm}", '
            f'job="vllm"{label}}}',
            "values": f"0+{requests_per_min}x300",
        },
    ]


def test_canary_row_divides_each_sides_growth_by_its_own_requests_and_names_the_side(tmp_path):
    """The Canary vs stable row, evaluated by promtool: a canary worker growing 1 MiB a minute at one
    request a minute grows 1 MiB per request (not a tenth, the stable side serving nine), legends
    lead with the side; without a canary the same query gives the one side, its legend the role
    alone (Grafana would print the name of a label that is missing)."""
    serving = next(b for b in BOARDS if b.uid == "leakwatch-serving")
    panels = {p.title: p for row in serving.rows if row.title == "Canary vs stable" for p in row.panels}
    growth = panels["Host memory growth per request, per side and role"].queries[0]
    share = panels["Share of requests per side"].queries[0]
    assert growth.legend == share.legend == "{{series}}"
    worker = {"role": "worker", "rank": "0", "job": "leakwatch"}

    def sample(series: str, value: float, **labels) -> dict:
        text = ", ".join(f'{k}="{v}"' for k, v in sorted({**labels, "series": series}.items()))
        return {"labels": f"{{{text}}}", "value": value}

    two = _side("stable", "127.0.0.1:19405", "127.0.0.1:18000", 9, 0) + _side(
        "canary", "127.0.0.1:19407", "127.0.0.1:18001", 1, 1048576
    )
    assert (
        _evaluate_with_promtool(
            tmp_path,
            growth.expr,
            two,
            [
                sample("canary worker 0", 1048576, instance="127.0.0.1:19407", deployment="canary", **worker),
                sample("stable worker 0", 0, instance="127.0.0.1:19405", deployment="stable", **worker),
            ],
        )
        == ""
    )
    assert (
        _evaluate_with_promtool(
            tmp_path,
            share.expr,
            two,
            [sample("canary requests", 0.1, deployment="canary"), sample("stable requests", 0.9, deployment="stable")],
        )
        == ""
    )
    one = _side("", "127.0.0.1:19405", "127.0.0.1:18000", 1, 1048576)
    assert (
        _evaluate_with_promtool(
            tmp_path, growth.expr, one, [sample("worker 0", 1048576, instance="127.0.0.1:19405", **worker)]
        )
        == ""
    )
    # The check can fail: the stable side's growth is not the canary's.
    assert "canary worker 0" in _evaluate_with_promtool(
        tmp_path,
        growth.expr,
        two,
        [sample("canary worker 0", 0, instance="127.0.0.1:19407", deployment="canary", **worker)],
    )
