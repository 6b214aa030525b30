"""The real `locust` command on loadtest/: what it loads, and runs against servers that misbehave
(our fakes) or are missing: every failure is counted and classified, no user crashes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import requests

from leakwatch.core.ports import free_port
from tests.support.loadgen_fakes import FakeServer, Stall, Status, Stream, good_stream
from tests.support.locust_run import LOADTEST, LOCUST, run_locust


def test_the_folder_loads_two_workloads_and_one_shape():
    listing = subprocess.run([LOCUST, "-f", str(LOADTEST), "--list"], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    users = [line.strip() for line in listing.stdout.splitlines() if line.startswith("    ")]
    assert sorted(users) == ["CodeAssistanceUser", "CreativeWritingUser"]
    # Locust's own loader on each file (in a fresh interpreter: Locust monkey-patches on import).
    probe = (
        "import json, sys; from locust.util.load_locustfile import load_locustfile; "
        "print(json.dumps({f: [sorted(u), [type(s).__name__ for s in sh]] "
        "for f in sys.argv[1:] for u, sh in [load_locustfile(f)]}))"
    )
    files = [str(LOADTEST / name) for name in ("creative_writing.py", "code_assistance.py")]
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe, *files], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    )
    assert loaded == {
        files[0]: [["CreativeWritingUser"], ["LeakwatchShape"]],
        files[1]: [["CodeAssistanceUser"], ["LeakwatchShape"]],
    }
    single = subprocess.run(
        [LOCUST, "-f", str(LOADTEST / "code_assistance.py"), "--list"], capture_output=True, text=True, timeout=60
    )
    assert single.returncode == 0 and "CodeAssistanceUser" in single.stdout and "Creative" not in single.stdout


def test_a_bad_option_stops_with_a_clear_message(tmp_path):
    run = run_locust(tmp_path, "http://127.0.0.1:9", "--load-shape", "storm", timeout=60)
    assert run.returncode != 0
    assert "--load-shape: 'storm' is not one of production-day, high-concurrency, steady" in run.output
    assert "Traceback" not in run.output


def test_misbehaving_servers_are_counted_failures_not_crashed_users(tmp_path):
    behaviours = (
        Stream(good_stream(4, chat=True)),
        Status(404, {"error": {"message": "The model `x` does not exist."}}),
        Stream(good_stream(6, chat=True), cut_after=3),
        Stream(None, raw_lines=[b'data: {"choices": [{"text": "a"}]}\n\n', b"<html>oops</html>\n"]),
        Status(200, {"choices": [{"text": "not streamed"}]}),
        Stall(2, headers=True),
    )
    with FakeServer(*behaviours) as server:
        run = run_locust(
            tmp_path,
            server.url,
            "--load-shape",
            "steady",
            "-u",
            "3",
            "-r",
            "10",
            "--request-limit",
            "24",
            "--request-timeout",
            "0.5",
            "--corpus-size",
            "5",
            "--max-output-tokens",
            "16",
            "CreativeWritingUser",
            timeout=120,
        )
    assert run.returncode == 1, run.output  # Locust's exit code when requests failed
    assert run.csv("exceptions") == [], run.output  # no user raised
    outcomes = run.outcomes()
    assert sum(outcomes.values()) == 24
    assert {"ok", "http_404", "stream_cut", "malformed_sse", "not_streaming", "stream_timeout"} <= set(outcomes)
    # Locust's failure table: one row per class and cause, with the server's own words.
    failures = {row["Error"]: int(row["Occurrences"]) for row in run.csv("failures")}
    assert failures["StreamFailure('http_404: The model `x` does not exist.')"] == outcomes["http_404"]
    assert sum(failures.values()) == 24 - outcomes["ok"]
    rows = run.requests
    assert len(rows) == 24 and {r["outcome"] for r in rows} == set(outcomes)
    assert all(r["detail"] for r in rows if r["outcome"] != "ok")
    assert "Streaming latency at full precision" in (tmp_path / "report.html").read_text()
    assert (tmp_path / "run_leakwatch.csv").read_text().startswith("workload,metric,count")


def test_an_unreachable_server_fails_every_request_cleanly(tmp_path):
    run = run_locust(
        tmp_path,
        f"http://127.0.0.1:{free_port()}",
        "--load-shape",
        "steady",
        "-u",
        "2",
        "--request-limit",
        "6",
        "--corpus-size",
        "3",
        timeout=120,
    )
    assert run.returncode == 1
    assert run.csv("exceptions") == []
    assert run.outcomes() == {"connect_error": 6}
    assert "cannot read the served models" in run.output and "estimate" in run.output


def test_distributed_processes_split_the_work_and_merge_on_the_master(tmp_path):
    with FakeServer(Stream(good_stream(3, chat=True))) as server:
        run = run_locust(
            tmp_path,
            server.url,
            "--processes",
            "2",
            "--load-shape",
            "steady",
            "-u",
            "4",
            "-r",
            "10",
            "--request-limit",
            "30",
            "--corpus-size",
            "4",
            timeout=180,
        )
    assert run.returncode == 0, run.output
    assert run.outcomes() == {"ok": 30}
    processes = {row["process"] for row in run.requests}
    assert processes == {"worker-0", "worker-1"} and len(run.requests) == 30
    assert set(run.summary["cpu_seconds"]) >= {"worker-0", "worker-1"}


def test_the_web_ui_shows_the_full_precision_tab(tmp_path):
    port = free_port()
    with FakeServer(Stream(good_stream(3, chat=True))) as server:
        proc = subprocess.Popen(
            [
                LOCUST,
                "-f",
                str(LOADTEST / "creative_writing.py"),
                "-H",
                server.url,
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(port),
                "--autostart",
                "--load-shape",
                "steady",
                "-u",
                "2",
                "--request-limit",
                "6",
                "--corpus-size",
                "3",
                "--metrics-port",
                "-1",
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            rows = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(r["count"] for r in rows):
                try:
                    stats = requests.get(f"{base}/stats/requests", timeout=5).json()
                    rows = next(e["data"] for e in stats.get("extended_stats", []) if e["key"] == "leakwatch")
                except (requests.RequestException, StopIteration, ValueError):
                    pass
                time.sleep(0.5)
            assert any(r["metric"] == "time to first token" and r["count"] for r in rows), rows
            index = requests.get(base + "/", timeout=10).text
            assert "Streaming latency" in index and "leakwatch/stats.csv" in index
            csv_text = requests.get(f"{base}/leakwatch/stats.csv", timeout=10).text
            assert csv_text.startswith("workload,metric,count,mean,min,p50")
            assert "Streaming latency at full precision" in requests.get(f"{base}/stats/report", timeout=30).text
        finally:
            proc.terminate()
            proc.wait(timeout=30)


# A user that asks to be stopped right after a request, so the graceful stop finds it between two
# requests (in the wait). Printed: how many requests started, finished and were cut.
GRACEFUL_STOP_PROBE = """
import sys
import gevent
from gevent import GreenletExit
from gevent.pool import Group
from locust import User, constant
from locust.env import Environment
from leakwatch.loadgen.locust_plugin import StreamingUser

base = {"StreamingUser": StreamingUser, "User": User}[sys.argv[1]]
counts = {"started": 0, "finished": 0, "cut": 0}

def one_request(user):
    counts["started"] += 1
    try:
        gevent.sleep(0.05)  # the stream
    except GreenletExit:
        counts["cut"] += 1
        raise
    counts["finished"] += 1
    if counts["finished"] == 1:
        gevent.spawn(user.stop)  # runs on the loop's next turn, while the user is in its wait

class Probe(base):
    host = "http://127.0.0.1:9"
    wait_time = constant(0)
    tasks = [one_request]

    def on_start(self):
        pass

    def on_stop(self):
        pass

group = Group()
Probe(Environment(user_classes=[Probe])).start(group)
group.join(timeout=10)
print(counts["started"], counts["finished"], counts["cut"], len(group))
"""


def test_a_graceful_stop_between_requests_cuts_no_stream():
    """Locust's own User, stopped while waiting between requests, is killed one loop turn later, by
    when it has opened its next request: the stream is cut (the cancelled streams the 256-stream test
    saw at every ramp-down step). StreamingUser stops before the next request."""

    def probe(base: str) -> list[int]:
        out = subprocess.run(
            [sys.executable, "-c", GRACEFUL_STOP_PROBE, base], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return [int(n) for n in out.stdout.split()]

    assert probe("User") == [2, 1, 1, 0]  # the race, in Locust itself: a second request, cut
    assert probe("StreamingUser") == [1, 1, 0, 0]  # stopped after its request, before another


def test_every_option_the_readme_shows_exists():
    from leakwatch.core.paths import REPO_ROOT
    from leakwatch.loadgen.options import OPTIONS

    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Load testing", 1)[1].split("\n## ", 1)[0]
    conf = (LOADTEST / "locust.conf").read_text()
    help_text = subprocess.run([LOCUST, "--help"], capture_output=True, text=True, timeout=60).stdout
    known = {flag for flag, *_ in OPTIONS} | set(re.findall(r"(--[a-z][a-z0-9-]+)", help_text))
    known.add("--max-num-seqs")  # vLLM's, named in the prose
    shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", section))
    shown |= {
        f"--{line.split('=')[0].strip()}" for line in conf.splitlines() if "=" in line and not line.startswith("#")
    }
    assert shown and shown <= known, sorted(shown - known)
