"""The backtester: Prometheus's `for:` state machine, recording-rule ordering, range-query chunks,
OpenMetrics input, and agreement with promtool's own unit tests on the same series."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import yaml

from leakwatch import cli
from leakwatch.backtest import sources
from leakwatch.backtest.openmetrics import BLOCK_S, BlockFiles, split_file
from leakwatch.backtest.rule_evaluator import (
    MAX_POINTS,
    Backtest,
    RecordingRule,
    apply_for,
    chunks,
    load_rules,
    recording_levels,
)
from leakwatch.core.durations import parse_duration
from leakwatch.core.errors import LeakwatchError
from leakwatch.core.paths import PROMETHEUS_DIR, RULES_DIR
from tests.support.promtool_series import expand, to_openmetrics

RULE_FILES = sorted(RULES_DIR.glob("*.yml"))


# -- the state machine ----------------------------------------------------------------------------


def test_for_fires_after_the_hold_and_a_gap_restarts_pending():
    # Present at evaluations 0-4, missing at 5, present 6-20; for: 3 steps of 60 s.
    present = {(("a", "1"),): set(range(5)) | set(range(6, 21))}
    episodes = apply_for(present, for_s=180, start=0, end=1200, step=60)
    assert [(e.pending_at, e.firing_at, e.ended_at) for e in episodes] == [(0, 180, 300), (360, 540, None)]


def test_pending_that_never_fires_leaves_no_episode_and_for_zero_fires_at_once():
    present = {(("a", "1"),): {2, 3}, (("a", "2"),): {4}}
    assert apply_for(present, for_s=600, start=0, end=600, step=60) == []
    assert [e.firing_at for e in apply_for(present, for_s=0, start=0, end=600, step=60)] == [120, 240]


def test_recording_rules_are_ordered_by_what_they_read():
    rules = [
        RecordingRule("c:x", "deriv(b:x[5m])", {}),
        RecordingRule("b:x", "a:x * 2", {}),
        RecordingRule("a:x", "up", {}),
    ]
    assert [[r.name for r in level] for level in recording_levels(rules)] == [["a:x"], ["b:x"], ["c:x"]]
    with pytest.raises(LeakwatchError, match="cycle"):
        recording_levels([RecordingRule("a:x", "b:x", {}), RecordingRule("b:x", "a:x", {})])


def test_our_recording_rules_need_two_levels():
    recording, _ = load_rules(RULE_FILES)
    levels = recording_levels(recording)
    assert len(levels) == 2
    assert "leakwatch:gpu_memory_used_bytes" in {r.name for r in levels[0]}


def test_range_queries_stay_under_prometheus_point_limit_and_cover_every_step():
    step = 60
    parts = chunks(0, step * 25_000, step)
    assert all((e - s) / step + 1 <= MAX_POINTS for s, e in parts)
    points = [t for s, e in parts for t in range(int(s), int(e) + 1, step)]
    assert points == list(range(0, step * 25_000 + 1, step))


# -- OpenMetrics in and out -------------------------------------------------------------------------


def test_block_files_hold_one_block_each_and_end_with_eof(tmp_path):
    sink = BlockFiles(tmp_path)
    for i in range(3 * BLOCK_S // 600):
        sink.add('x{a="1"}', float(i), 1_700_000_400 + i * 600)
    files = sink.close()
    assert len(files) == len({int((1_700_000_400 + i * 600) // BLOCK_S) for i in range(36)}) == 4
    for path in files:
        lines = path.read_text().splitlines()
        assert lines[-1] == "# EOF"
        stamps = [float(line.split()[-1]) for line in lines[:-1]]
        assert len({int(t // BLOCK_S) for t in stamps}) == 1


def test_recorded_export_without_timestamps_is_refused_clearly(tmp_path):
    export = tmp_path / "scrape.txt"
    export.write_text('# TYPE up gauge\nup{job="vllm"} 1\n')
    with pytest.raises(LeakwatchError, match="without a timestamp"):
        split_file(export, BlockFiles(tmp_path / "out"))
    export.write_text("this is not a metric\n")
    with pytest.raises(LeakwatchError, match="not a sample line"):
        split_file(export, BlockFiles(tmp_path / "out2"))


# -- agreement with promtool --------------------------------------------------------------------

AGREEMENT_GROUPS = [
    ("gpu.test.yml", "fast GPU leak"),
    ("host.test.yml", "worker host-memory leak"),
    ("serving.test.yml", "crash loop"),
    ("serving.test.yml", "latency objectives"),
]


def _promtool_firing_times(case: dict) -> dict[tuple[str, str], float]:
    """(alert, severity) -> the evaluation at which promtool's test says it fires (the first
    alert_rule_test that expects it; the tests also check it is quiet one step before)."""
    first: dict[tuple[str, str], float] = {}
    for test in case["alert_rule_test"]:
        for alert in test.get("exp_alerts") or []:
            key = (test["alertname"], alert["exp_labels"]["severity"])
            first.setdefault(key, parse_duration(test["eval_time"]))
    return first


@pytest.mark.parametrize("file_name, group", AGREEMENT_GROUPS, ids=[g for _, g in AGREEMENT_GROUPS])
def test_backtester_fires_when_promtool_says_so(tmp_path, file_name, group):
    case = next(
        t for t in yaml.safe_load((PROMETHEUS_DIR / "tests" / file_name).read_text())["tests"] if t["name"] == group
    )
    interval = parse_duration(case["interval"])
    om = tmp_path / "series.om"
    om.write_text(to_openmetrics(case["input_series"], interval))
    history = sources.from_openmetrics(om, tmp_path)
    backtest = Backtest(tmp_path, step_s=interval, lookback_s=1.5 * interval)
    backtest.load(history.files)
    result = backtest.run(RULE_FILES, history.start, history.end)
    expected = _promtool_firing_times(case)
    assert expected
    for (alert, severity), t in expected.items():
        fired = [r.first_firing for r in result.alerts if r.rule.name == alert and r.rule.severity == severity]
        assert fired == [t], f"{alert}/{severity}: promtool says {t}s, the backtester {fired}"


def test_expand_reads_promtool_notation():
    assert expand("1+2x3 9 -5x1") == [1, 3, 5, 7, 9, -5, -5]
    with pytest.raises(ValueError):
        expand("1 _ 2")


# -- the command ------------------------------------------------------------------------------------


def test_backtest_command_on_a_scenario_reports_the_leak_alert(capsys):
    code = cli.main(["backtest", "--scenario", "article_a_vllm", "--days", "0.1", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    fired = {a["alert"] for a in report["alerts"] if a["first_firing"] is not None}
    assert "GPUMemoryLeakSuspected" in fired
    leak = next(a for a in report["alerts"] if a["alert"] == "GPUMemoryLeakSuspected" and a["severity"] == "warning")
    assert 0 < leak["minutes_after_origin"] < 60


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scenario", "no_such_scenario"], "unknown scenario"),
        (
            ["--prometheus", "http://127.0.0.1:9", "--start", "yesterday", "--end", "1"],
            "is not a time (unix seconds or ISO 8601",
        ),
        (["--prometheus", "http://127.0.0.1:9"], "needs --start"),
        (["--scenario", "slow_leak", "--rules", "/nonexistent.yml"], "does not exist"),
        (["--scenario", "slow_leak", "--days", "0"], "--days must be positive"),
    ],
)
def test_backtest_command_explains_bad_input(capsys, argv, message):
    assert cli.main(["backtest", *argv]) == 2
    assert message in capsys.readouterr().err


def test_pulling_raw_series_from_a_prometheus_replays_the_same_alerts(tmp_path):
    """`--prometheus URL`: export the rules' raw series from a live Prometheus (here one serving a
    simulated day), backtest the export, and get the alert times of the original history."""
    from leakwatch.backtest.tsdb import TSDBServer
    from leakwatch.scenarios import library

    original = sources.from_scenario(library.get("article_a_vllm", days=0.1), tmp_path / "orig")
    first = Backtest(tmp_path / "orig", step_s=60, lookback_s=90)
    first.load(original.files)
    server = TSDBServer(tmp_path / "orig" / "tsdb", 90, tmp_path / "source-prometheus.log")
    with server:
        api = server.start()
        pulled = sources.from_prometheus(api.base_url, original.start, original.end, RULE_FILES, tmp_path / "pulled")
    assert pulled.samples > 0 and math.isclose(pulled.interval_s, 60)
    replay = Backtest(tmp_path / "pulled", step_s=60, lookback_s=90)
    replay.load(pulled.files)
    replayed = replay.run(RULE_FILES, pulled.start, pulled.end)
    direct = Backtest(tmp_path / "direct", step_s=60, lookback_s=90)
    direct.load(original.files)
    reference = direct.run(RULE_FILES, original.start, original.end)
    times = lambda result: {r.rule.key: r.first_firing for r in result.alerts if r.first_firing}
    assert times(replayed) == times(reference)
    assert "GPUMemoryLeakSuspected/warning" in times(reference)


def test_rules_read_only_series_the_simulator_produces():
    """Every metric a rule reads is produced by the scenarios, so a quiet rule in a backtest means
    quiet, not blind."""
    from leakwatch.scenarios import library
    from leakwatch.scenarios.simulate import simulate

    names: set[str] = set()

    class Names:
        def tick(self, ts, samples):
            names.update(s.split("{", 1)[0] for s, _ in samples)

    for scenario in ("article_a_vllm", "worker_rss_high_traffic"):
        simulate(library.get(scenario, days=0.05), Names())
    # A declared cache bound (VLLM_XGRAMMAR_CACHE_MB set) is what a scenario states, not a default.
    declared = (("engine_core", "xgrammar-cache", 64.0 * 2**20),)
    simulate(replace(library.get("article_a_vllm", days=0.05), cache_bounds=declared), Names())
    reads = sources.rule_inputs(RULE_FILES) - {
        # Prometheus's and Alertmanager's own series: covered by promtool tests and the live stack.
        "prometheus_rule_evaluation_failures_total",
        "alertmanager_notifications_failed_total",
    }
    assert reads - names == set()


def test_cli_lists_the_scenarios(capsys):
    assert cli.main(["backtest", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("article_a_vllm", "slow_leak", "worker_rss_high_traffic", "healthy_30d"):
        assert name in out


def test_auto_lookback_covers_the_slowest_job_and_says_so(tmp_path, capsys):
    """DCGM scraped every 60 s beside vLLM every 15 s: a lookback of 1.5 x the median (15 s) would
    drop the DCGM series between its samples; the automatic lookback follows the slowest job."""
    lines = []
    for k in range(121):
        t = 1_700_000_000 + 15 * k
        lines.append(f'vllm:request_success_total{{job="vllm",instance="v"}} {k} {t}')
        lines.append(f'vllm:num_requests_running{{job="vllm",instance="v"}} 0 {t}')
        if k % 4 == 0:
            lines.append(f'DCGM_FI_DEV_FB_USED{{job="dcgm",instance="d",gpu="0"}} 22528 {t}')
    om = tmp_path / "mixed.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    history = sources.from_openmetrics(om, tmp_path / "work")
    assert history.interval_s == 15
    lookback, warning = history.auto_lookback()
    assert lookback == 90 and "dcgm 60s" in warning and "vllm 15s" in warning
    # The command prints the warning and counts from --leak-start.
    code = cli.main(["backtest", "--openmetrics", str(om), "--leak-start", str(1_700_000_000 + 600), "--json"])
    captured = capsys.readouterr()
    assert code == 0 and "scrape intervals differ by job" in captured.err
    assert json.loads(captured.out)["origin"] == 1_700_000_000 + 600


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scenario", "slow_leak", "--leak-start", "0"], "a scenario knows its leak start"),
        (["--openmetrics", "{om}", "--leak-start", "2001-01-01T00:00:00Z"], "is outside the history"),
    ],
)
def test_leak_start_is_checked(tmp_path, capsys, argv, message):
    om = tmp_path / "one.om"
    om.write_text("".join(f'up{{job="vllm"}} 1 {1_700_000_000 + 60 * k}\n' for k in range(10)) + "# EOF\n")
    assert cli.main(["backtest", *[a.format(om=om) for a in argv]]) == 2
    assert message in capsys.readouterr().err


def test_a_firing_alert_with_hysteresis_stays_firing_while_its_hold_holds():
    # Condition at 0-4 and 8-9; the hold at 3-12: one episode from 0 (firing at 2) to 13.
    present = {(("a", "1"),): set(range(5)) | {8, 9}}
    held = {(("a", "1"),): set(range(3, 13))}
    episodes = apply_for(present, for_s=120, start=0, end=1200, step=60, held=held)
    assert [(e.pending_at, e.firing_at, e.ended_at) for e in episodes] == [(0, 120, 780)]
    # A hold does not start an alert, nor keep a pending one.
    assert apply_for({(("a", "1"),): {5, 6}}, for_s=600, start=0, end=1200, step=60, held=held) == []


def test_hysteresis_of_the_generated_rules_is_split_for_replay():
    from leakwatch.backtest.rule_evaluator import split_hysteresis

    _, alerting = load_rules(RULE_FILES)
    held = {r.key for r in alerting if split_hysteresis(r.expr)[1]}
    assert {
        "GPUMemoryLeakSuspected/warning",
        "GPUMemoryGrowthPerRequest/warning",
        "GPUProcessMemoryLeak/warning",
        "VRAMRetentionHigh/warning",
        "HostMemoryLeak/warning",
    } <= held
    for rule in alerting:
        condition, hold = split_hysteresis(rule.expr)
        assert "ALERTS" not in condition and (hold is None or "ALERTS" not in hold)


def test_backtester_replays_the_hysteresis_as_promtool_does(tmp_path):
    """The promtool case where article A's leak pauses: the warning fires at 40m and is still
    firing at 75m (promtool checks both), then resolves before 85m: one episode, not two."""
    case = next(
        t
        for t in yaml.safe_load((PROMETHEUS_DIR / "tests" / "gpu.test.yml").read_text())["tests"]
        if t["name"] == "a leak that pauses stays firing"
    )
    om = tmp_path / "series.om"
    om.write_text(to_openmetrics(case["input_series"], 60))
    history = sources.from_openmetrics(om, tmp_path)
    backtest = Backtest(tmp_path, step_s=60, lookback_s=90)
    backtest.load(history.files)
    result = backtest.run(RULE_FILES, history.start, history.end)
    warning = next(r for r in result.alerts if r.rule.key == "GPUMemoryLeakSuspected/warning")
    [episode] = warning.fired
    assert episode.firing_at - history.start == 40 * 60
    assert 75 * 60 < episode.ended_at - history.start <= 85 * 60
