"""`leakwatch check`'s memory breakdown: range-query results -> per process figures -> text and JSON
(leakwatch/leakcheck/breakdown.py), and the check command with it (a stand-in Prometheus)."""

from __future__ import annotations

import argparse
import json

import pytest

from leakwatch.leakcheck import breakdown as bd
from leakwatch.leakcheck.breakdown import collect_breakdown, format_lines, from_results

GIB = 1 << 30
MIB = 1 << 20


def series(labels: dict, *values: float, t0: float = 1000.0) -> dict:
    return {"metric": labels, "values": [[t0 + 60 * i, str(v)] for i, v in enumerate(values)]}


EXPECTED = [
    series({"role": "worker", "rank": "0", "part": "weights"}, 1246464, 1246464),
    series({"role": "worker", "rank": "0", "part": "kv_cache"}, GIB, GIB),
]
UNEXPLAINED = [series({"role": "worker", "rank": "0"}, 300 * MIB, 310 * MIB, 340 * MIB)]  # gpu "" is no label


def test_figures_at_the_windows_end_and_the_growth_over_it():
    result = from_results(EXPECTED, UNEXPLAINED)
    (p,) = result.processes
    assert (p.role, p.rank, p.gpu, p.name) == ("worker", "0", "", "worker 0")
    assert p.expected_bytes == 1246464 + GIB
    assert p.unexplained_bytes == 340 * MIB and p.unexplained_growth_bytes == 40 * MIB
    assert p.measured_bytes == 1246464 + GIB + 340 * MIB
    assert result.at == 1120.0
    as_dict = result.as_dict()
    assert as_dict["available"] is True
    assert as_dict["processes"][0]["measured_bytes"] == p.measured_bytes
    assert as_dict["processes"][0]["unexplained_growth_bytes"] == 40 * MIB


def test_the_text_line():
    (head, line) = format_lines(from_results(EXPECTED, UNEXPLAINED))
    assert head.startswith("memory breakdown at the window's end")
    assert line == (
        "  worker 0: weights 1.246 MB + KV pool 1.074 GB = expected 1.075 GB; measured 1.432 GB; "
        "unexplained 356.5 MB (+41.94 MB over the window)"
    )


def test_a_gpu_rank_a_negative_rest_and_nan_points():
    unexplained = [series({"role": "worker", "rank": "1", "gpu": "1"}, -2 * GIB, float("nan"), -GIB)]
    expected = [
        series({"role": "worker", "rank": "1", "part": "weights"}, 20 * GIB),
        series({"role": "worker", "rank": "1", "part": "kv_cache"}, 50 * GIB),
    ]
    (p,) = from_results(expected, unexplained).processes
    assert p.name == "worker 1 (GPU 1)" and p.unexplained_bytes == -GIB and p.unexplained_growth_bytes == GIB
    assert "unexplained -1.074 GB (+1.074 GB over the window)" in format_lines(from_results(expected, unexplained))[1]


def test_parts_without_an_unexplained_figure_say_so():
    weights_only = [EXPECTED[0]]
    (p,) = from_results(weights_only, []).processes
    assert p.kv_cache_bytes is None and p.expected_bytes is None and p.measured_bytes is None
    line = format_lines(from_results(weights_only, []))[1]
    assert "KV pool unknown = expected unknown; measured unknown; unexplained unknown (the exporter has no" in line


def test_no_series_is_not_available_not_an_error():
    result = from_results([], [])
    assert result.processes == () and result.as_dict()["available"] is False
    assert format_lines(result) == [f"memory breakdown: not available ({bd.NOT_AVAILABLE})"]


class FakePrometheus:
    base_url = "http://prometheus.invalid"

    def __init__(self, answers: dict[str, list[dict]]):
        self.answers, self.asked = answers, []

    def query_range(self, expr, start, end, step):
        self.asked.append(expr)
        return self.answers.get(expr, [])


def test_collect_queries_both_series_with_the_sides_matcher():
    prom = FakePrometheus({bd.EXPECTED: EXPECTED, bd.UNEXPLAINED: UNEXPLAINED})
    assert collect_breakdown(prom, 0, 3600, 60).processes[0].unexplained_bytes == 340 * MIB
    collect_breakdown(prom, 0, 3600, 60, 'deployment="canary"')
    assert 'leakwatch_memory_expected_bytes{deployment="canary"}' in prom.asked[-2]


@pytest.mark.parametrize("as_json", [False, True])
def test_check_prints_the_breakdown_after_the_verdict_table(monkeypatch, capsys, as_json):
    """`leakwatch check` end to end on canned results: an exporter without the series still gets its
    verdict, with the breakdown marked not available."""

    from leakwatch.leakcheck import command

    class Result:
        step, exit_code, series, memory_breakdown = 60.0, 0, [], None

        def as_dict(self):
            return {"verdict": "NO-LEAK", "memory_breakdown": self.memory_breakdown.as_dict()}

    # run_check's own path (collection and analysis canned): it attaches the breakdown.
    monkeypatch.setattr(command, "collect", lambda *a, **k: (None, []))
    monkeypatch.setattr(command, "analyse", lambda *a, **k: Result())
    monkeypatch.setattr(command, "format_text", lambda result: "leakwatch check: NO-LEAK")
    monkeypatch.setattr(command, "Prometheus", lambda url: FakePrometheus({}))
    args = ["--prometheus", "http://prometheus.invalid", "--start", "1000", "--end", "4600"]
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    code = command.run(parser.parse_args(args + (["--json"] if as_json else [])))
    out = capsys.readouterr().out
    assert code == 0
    if as_json:
        assert json.loads(out)["memory_breakdown"]["available"] is False
    else:
        assert out.splitlines()[-1].startswith("memory breakdown: not available")
