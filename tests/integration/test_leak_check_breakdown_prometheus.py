"""`leakwatch check`'s memory breakdown against a real Prometheus serving a backfilled history: the
exporter's leakwatch_memory_* series for one worker from the second hour on (an exporter upgraded
then), so the first hour is a window without them."""

from __future__ import annotations

import json
import time

import pytest

from leakwatch.cli import main
from leakwatch.leakcheck.breakdown import NOT_AVAILABLE
from tests.support.leak_scenarios import make, to_openmetrics
from tests.support.prom_backfill import backfilled_prometheus

STEP = 60.0
HOURS = 2.0
NOW = float(int(time.time() // 3600 * 3600))
T0 = NOW - 8 * 3600
UPGRADED = T0 + 3600  # the exporter with the breakdown from here on
HISTORY = make(hours=HOURS, step=STEP, requests_per_s=0.05, bytes_per_request=0, noise=1e6, t0=T0, seed=5)
GIB, MIB = 1 << 30, 1 << 20
WEIGHTS = 1246464


def breakdown_openmetrics() -> str:
    """The worker's expected parts, flat, and its unexplained rest growing 30 MiB in the second hour."""
    points = [UPGRADED + STEP * i for i in range(int(3600 / STEP) + 1)]
    lines = ["# HELP leakwatch_memory_expected_bytes Expected parts.", "# TYPE leakwatch_memory_expected_bytes gauge"]
    for part, value in (("weights", WEIGHTS), ("kv_cache", GIB)):
        lab = f'job="leakwatch",instance="127.0.0.1:9405",role="worker",rank="0",part="{part}"'
        lines += [f"leakwatch_memory_expected_bytes{{{lab}}} {value} {t:.3f}" for t in points]
    lines += ["# HELP leakwatch_memory_unexplained_bytes The rest.", "# TYPE leakwatch_memory_unexplained_bytes gauge"]
    lab = 'job="leakwatch",instance="127.0.0.1:9405",role="worker",rank="0",gpu=""'
    growth = 30 * MIB / (len(points) - 1)
    lines += [
        f"leakwatch_memory_unexplained_bytes{{{lab}}} {300 * MIB + i * growth:.0f} {t:.3f}"
        for i, t in enumerate(points)
    ]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def prometheus_url():
    history = to_openmetrics(HISTORY)
    assert history.rstrip().endswith("# EOF")
    text = history.rstrip()[: -len("# EOF")] + breakdown_openmetrics() + "\n# EOF\n"
    with backfilled_prometheus(text) as url:
        yield url


def check(capsys, url: str, end: float, *extra: str) -> tuple[int, str]:
    code = main(["check", "--prometheus", url, "--start", str(T0), "--end", str(end), "--step", "60s", *extra])
    return code, capsys.readouterr().out


def test_the_breakdown_at_the_windows_end_in_json_and_text(prometheus_url, capsys):
    code, out = check(capsys, prometheus_url, T0 + HOURS * 3600, "--json")
    memory = json.loads(out)["memory_breakdown"]
    assert code in (0, 3) and memory["available"] is True
    (worker,) = memory["processes"]
    assert (worker["role"], worker["rank"], worker["gpu"]) == ("worker", "0", "")
    assert worker["weights_bytes"] == WEIGHTS and worker["kv_cache_bytes"] == GIB
    assert worker["unexplained_bytes"] == pytest.approx(330 * MIB, abs=1)
    assert worker["unexplained_growth_bytes"] == pytest.approx(30 * MIB, abs=1)
    assert worker["measured_bytes"] == pytest.approx(WEIGHTS + GIB + 330 * MIB, abs=1)

    _, text = check(capsys, prometheus_url, T0 + HOURS * 3600)
    assert "  worker 0: weights 1.246 MB + KV pool 1.074 GB = expected 1.075 GB; measured 1.421 GB; " in text
    assert "unexplained 346 MB (+31.46 MB over the window)" in text


def test_a_window_without_the_series_says_not_available(prometheus_url, capsys):
    """The first hour, before the exporter had the series: the verdict as ever, the breakdown not
    available (text and JSON), no error."""
    code, out = check(capsys, prometheus_url, UPGRADED - 600, "--json")
    result = json.loads(out)
    assert code == result["exit_code"] != 2
    assert result["memory_breakdown"] == {"available": False, "at": None, "reason": NOT_AVAILABLE, "processes": []}
    _, text = check(capsys, prometheus_url, UPGRADED - 600)
    assert text.splitlines()[-1] == f"memory breakdown: not available ({NOT_AVAILABLE})"
