"""`leakwatch check --compare` against a real Prometheus holding a stable and a canary deployment
side by side (backfilled, each series labelled deployment="stable"/"canary" as the scrape config
labels them): the stable side leaks 2 MB/request on 90 % of the traffic, the canary none on 10 %."""

from __future__ import annotations

import json
import time

import pytest

from leakwatch.cli import main
from tests.support.leak_scenarios import MB, make, to_openmetrics
from tests.support.prom_backfill import backfilled_prometheus

HOURS = 6.0
T0 = float(int(time.time() // 3600 * 3600)) - 8 * 3600
STABLE = make(hours=HOURS, requests_per_s=0.45, bytes_per_request=2 * MB, noise=10 * MB, ar=0.3, t0=T0, seed=31)
CANARY = make(hours=HOURS, requests_per_s=0.05, bytes_per_request=0, noise=10 * MB, ar=0.3, t0=T0, seed=32)
WINDOW = ["--start", str(T0), "--end", str(T0 + HOURS * 3600), "--step", "15s"]


@pytest.fixture(scope="module")
def prometheus_url():
    openmetrics = to_openmetrics(STABLE, sides={"stable": STABLE, "canary": CANARY})
    with backfilled_prometheus(openmetrics) as url:
        yield url


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_canary_without_the_leak_is_less_and_exits_0(prometheus_url, capsys):
    code, out, _ = run_cli(
        capsys, "check", "--prometheus", prometheus_url, *WINDOW, "--compare", "stable", "canary", "--json"
    )
    result = json.loads(out)
    assert code == 0 and result["verdict"] == "LESS", out
    (row,) = result["series"]
    assert row["key"] == "host/api_server"
    assert row["stable"]["verdict"] == "LEAK" and row["canary"]["verdict"] == "NO-LEAK"
    # Each side measured on its own traffic only.
    assert row["stable"]["bytes_per_request"]["estimate"] == pytest.approx(2 * MB, rel=0.02)
    assert abs(row["canary"]["bytes_per_request"]["estimate"]) < 50e3
    assert row["canary"]["requests_served"] < row["stable"]["requests_served"] / 5
    assert row["difference_bytes_per_request"]["high"] < -row["margin_bytes_per_request"]


def test_named_the_other_way_round_the_verdict_is_more_and_exits_1(prometheus_url, capsys):
    code, out, _ = run_cli(capsys, "check", "--prometheus", prometheus_url, *WINDOW, "--compare", "canary", "stable")
    assert code == 1, out
    assert out.splitlines()[0] == "leakwatch check --compare canary stable: MORE"
    assert "the canary leaks more" in out


def test_bad_comparisons_are_clear_errors(prometheus_url, capsys):
    code, _, err = run_cli(capsys, "check", "--prometheus", prometheus_url, *WINDOW, "--compare", "stable", "nope")
    assert code == 2 and 'no vllm:request_success_total with {deployment="nope"}' in err
    code, _, err = run_cli(capsys, "check", "--prometheus", prometheus_url, *WINDOW, "--compare", "stable", "stable")
    assert code == 2 and "two different deployments" in err
    code, _, err = run_cli(
        capsys,
        "check",
        "--prometheus",
        prometheus_url,
        *WINDOW,
        "--compare",
        "stable",
        "canary",
        "--compare-label",
        "1x",
    )
    assert code == 2 and "not a Prometheus label name" in err
    code, _, err = run_cli(
        capsys,
        "check",
        "--prometheus",
        prometheus_url,
        *WINDOW,
        "--compare",
        "stable",
        "canary",
        "--daily-requests",
        "0",
    )
    assert code == 2 and "must be positive" in err


def test_the_report_carries_the_comparison(prometheus_url, tmp_path, capsys):
    """`leakwatch report --compare stable canary`: the stable side's page with the canary section, whose
    embedded numbers are `check --compare --json`'s for the same window."""
    end = ["--end", str(T0 + HOURS * 3600)]
    code, out, _ = run_cli(
        capsys, "report", "--prometheus", prometheus_url, *end, "--out", str(tmp_path), "--compare", "stable", "canary"
    )
    assert code == 0 and "(canary LESS than stable)" in out, out
    (page,) = tmp_path.glob("leakwatch-report-day-*.html")
    text = page.read_text()
    embedded = json.loads(text.split('id="leakwatch-compare">', 1)[1].split("</script>", 1)[0])
    _, out, _ = run_cli(
        capsys,
        "check",
        "--prometheus",
        prometheus_url,
        "--start",
        str(T0 + HOURS * 3600 - 86400),
        *end,
        "--compare",
        "stable",
        "canary",
        "--json",
    )
    assert embedded == json.loads(out)
    assert embedded["verdict"] == "LESS" and "id=compare-verdict" in text
    # The page's own verdict and table are the stable side's: its leak.
    check = json.loads(text.split('id="leakwatch-check">', 1)[1].split("</script>", 1)[0])
    assert check["verdict"] == "LEAK"
