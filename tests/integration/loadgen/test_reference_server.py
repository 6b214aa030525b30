"""The reference streaming server (the ground truth of `make bench-loadgen`) as its own process:
it keeps to its script, records what it did, rejects bad requests clearly; and the load generator's
requests reach it with the model's client conventions and request ids."""

from __future__ import annotations

import json
import re
import statistics

import pytest
import requests

from benchmarks.loadgen import truth
from benchmarks.loadgen.reference_server import Script
from leakwatch.core.ports import free_port
from leakwatch.loadgen.client import StreamingClient, request_body
from leakwatch.loadgen.options import LoadgenOptions, OptionError
from tests.support.loadgen_options import parsed
from tests.support.locust_run import run_locust

# The reference server runs as its own process (and one test runs Locust and vLLM's client).


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    port = free_port()
    proc = truth.start(port, tmp_path_factory.mktemp("reference") / "server.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_script_is_seeded_per_key_and_follows_its_distributions():
    script = Script(ttft_median_s=0.2, ttft_sigma=0.5, itl_mean_s=0.05, itl_shape=4.0, seed=7)
    assert script.timings("a", 8) == script.timings("a", 8)
    assert script.timings("a", 8) != script.timings("b", 8)
    assert Script(seed=8).timings("a", 8) != Script(seed=7).timings("a", 8)
    draws = [script.timings(f"k{i}", 2) for i in range(4000)]
    assert statistics.median(t for t, _ in draws) == pytest.approx(0.2, rel=0.05)
    assert statistics.fmean(g[0] for _, g in draws) == pytest.approx(0.05, rel=0.05)


def test_streams_keep_to_the_script_and_the_record_says_when(reference):
    truth.take_record(reference)
    client = StreamingClient(reference)
    script = Script(truth.TTFT_MEDIAN_MS / 1000, truth.TTFT_SIGMA, truth.ITL_MEAN_MS / 1000, truth.ITL_SHAPE)
    results = {}
    for i in range(6):
        key = f"t-{i}"
        results[key] = client.stream(
            "completions",
            request_body("completions", truth.MODEL, "hello", 5, True),
            {"x-request-id": key},
            keep_text=True,
        )
    record = truth.take_record(reference)
    assert set(record) == set(results)
    for key, result in results.items():
        assert result.ok, result.message
        assert result.chunks == 5 and result.output_tokens == 5
        assert result.text.split()[0] == key  # the key is the first generated word
        scripted_ttft, gaps = script.timings(key, 5)
        ttft, itls = truth.truth_of(record[key])
        # Early by at most the event loop's timer resolution (libuv: 1 ms); late only by the scheduling
        # lag of a shared machine. The record holds what really happened either way.
        assert scripted_ttft - 0.002 <= ttft < scripted_ttft + 0.25
        assert all(g - 0.002 <= got < g + 0.25 for g, got in zip(gaps, itls)), (gaps, itls)
        # The client sees the first token once the server wrote it, not much later. Its reading can be
        # earlier than the server's stamp (taken after the send returns) by however long a loaded
        # machine keeps the server from stamping, so the lower bound is the script's: no token can
        # reach the client before the server sends it.
        assert scripted_ttft - 0.002 <= result.ttft < ttft + 0.25
    assert truth.take_record(reference) == {}


def test_a_nonce_in_the_prompt_keys_a_request_without_an_id(reference):
    truth.take_record(reference)
    body = {"model": truth.MODEL, "prompt": "[lw-req 42] go", "max_tokens": 2, "stream": True}
    with requests.post(f"{reference}/v1/completions", json=body, stream=True, timeout=30) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == b"data: [DONE]"
    assert json.loads(lines[0][len(b"data: ") :])["choices"][0]["text"] == " 42"
    assert list(truth.take_record(reference)) == ["42"]


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"{not json", 400, "not JSON"),
        (json.dumps({"model": "other", "prompt": "x", "stream": True}).encode(), 404, "does not exist"),
        (json.dumps({"model": truth.MODEL, "prompt": "x"}).encode(), 400, "only streams"),
        (
            json.dumps({"model": truth.MODEL, "prompt": "x", "stream": True, "max_tokens": 0}).encode(),
            400,
            "max_tokens",
        ),
        (json.dumps({"model": truth.MODEL, "messages": [], "stream": True}).encode(), 400, "messages"),
    ],
)
def test_bad_requests_get_a_clear_error(reference, body, status, message):
    path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
    resp = requests.post(reference + path, data=body, timeout=30)
    assert resp.status_code == status
    assert message in resp.json()["error"]["message"]


def test_models_and_health(reference):
    assert requests.get(f"{reference}/health", timeout=10).status_code == 200
    models = requests.get(f"{reference}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in models] == [truth.MODEL]
    assert requests.get(f"{reference}/nowhere", timeout=10).status_code == 404


def _locust(tmp_path, url, *args):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "line one\nline two", "output_tokens": 3}) + "\n")
    return run_locust(
        tmp_path,
        url,
        "--model",
        truth.MODEL,
        "--prompts-file",
        str(prompts),
        "--load-shape",
        "steady",
        "-u",
        "1",
        "-r",
        "1",
        "--request-limit",
        "2",
        *args,
        "CreativeWritingUser",
        timeout=180,
    )


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_load_generator_sends_the_profiles_conventions_and_its_request_ids(reference, tmp_path, api):
    truth.take_record(reference)
    run = _locust(
        tmp_path, reference, "--api", api, "--client-profile", "janeway-13b-4090d", "--extra-body", '{"temperature": 0}'
    )
    assert run.returncode == 0, run.output
    record = truth.take_record(reference)
    rows = run.requests
    ids = sorted(r["request_id"] for r in rows)
    assert ids == sorted(record) and len(ids) == 2
    assert re.fullmatch(r"lw-[0-9a-f]{6}-local-1", ids[0]) and ids[1] == ids[0][:-1] + "2"
    for entry in record.values():
        assert entry["prompt"] == "line one</s>line two"  # Janeway's newline token, as trained
        assert entry["fields"] == {"max_tokens": 3, "ignore_eos": True, "skip_special_tokens": False, "temperature": 0}
    summary = run.summary
    assert summary["client_conventions"]["profile"] == "janeway-13b-4090d"
    assert [s["request_id"] for s in summary["completion_samples"]] == ids


def test_no_conventions_for_a_model_no_profile_serves(reference, tmp_path):
    truth.take_record(reference)
    run = _locust(tmp_path, reference, "--api", "completions")  # auto: no profile serves "reference"
    assert run.returncode == 0, run.output
    record = truth.take_record(reference)
    assert [e["prompt"] for e in record.values()] == ["line one\nline two"] * 2
    assert run.summary["client_conventions"]["profile"] == "none"


def test_bad_convention_options_stop_locust_with_a_clear_message(tmp_path):
    run = run_locust(tmp_path, "http://127.0.0.1:9", "--client-profile", "janeway", timeout=60)
    assert run.returncode != 0
    assert "--client-profile: 'janeway' is not auto, none or one of" in run.output
    assert "Traceback" not in run.output


@pytest.mark.parametrize(
    "value, message",
    [
        ("[1]", "--extra-body: must be a JSON object, not list"),
        ("{temperature: 0}", "--extra-body: not JSON"),
        ('{"stream": false, "model": "x"}', "--extra-body: may not set model, stream"),
    ],
)
def test_bad_extra_body_is_named(value, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        LoadgenOptions.from_parsed(parsed(extra_body=value))


def test_extra_body_and_profile_are_read():
    opts = LoadgenOptions.from_parsed(parsed(extra_body='{"temperature": 0}', client_profile=" none "))
    assert opts.extra_body == {"temperature": 0} and opts.client_profile == "none"
    assert LoadgenOptions.from_parsed(parsed()).extra_body == {}


def test_pairing_reports_errors_against_the_truth():
    record = {"a": {"received": 10.0, "tokens": [10.1, 10.15, 10.25]}, "b": {"received": 20.0, "tokens": [20.3, 20.35]}}
    ours = {
        "client": "loadgen",
        "completed": 2,
        "itl_p50": 0.05,
        "itl_p90": 0.09,
        "rows": [
            {"request_id": "a", "ttft_s": "0.102"},
            {"request_id": "b", "ttft_s": "0.303"},
            {"request_id": "unknown", "ttft_s": "9"},
        ],
    }
    judged = truth.judge(ours, record)
    assert judged["paired"] == 2
    assert judged["truth_ttft_p50"] == pytest.approx(0.2) and judged["ttft_p50_err"] == pytest.approx(0.0025)
    assert judged["truth_itl_p50"] == pytest.approx(0.05)
    theirs = {
        "client": "vllm",
        "completed": 1,
        "itls": [0.06],
        "requests": [{"key": "b", "ttft": 0.31, "itls": [0.06]}],
    }
    assert truth.judge(theirs, record)["ttft_p50_err"] == pytest.approx(0.01)
    with pytest.raises(SystemExit, match="no request of the vllm run"):
        truth.judge({**theirs, "requests": [{"key": "zzz", "ttft": 1.0, "itls": []}]}, record)
    assert truth.within_tolerance(0.0019, 0.01) and not truth.within_tolerance(0.0021, 0.01)
    assert truth.within_tolerance(0.0099, 0.2) and not truth.within_tolerance(0.011, 0.2)


def test_a_locustfile_takes_only_the_listeners_it_opts_into(reference, tmp_path):
    """No Reports and no PrometheusExporter: requests go out, nothing is written, no port is bound."""
    locustfile = tmp_path / "lean.py"
    locustfile.write_text(
        "from leakwatch.loadgen.listeners import CorpusPreparation, Sender\n"
        "from leakwatch.loadgen.locust_plugin import LeakwatchShape, StreamingUser, use\n"
        "use(CorpusPreparation, Sender)\n\n"
        "class LeanUser(StreamingUser):\n    workload = 'creative'\n"
    )
    truth.take_record(reference)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello", "output_tokens": 2}) + "\n")
    out = tmp_path / "out"
    run = run_locust(
        out,
        reference,
        "--model",
        truth.MODEL,
        "--api",
        "completions",
        "--prompts-file",
        str(prompts),
        "--load-shape",
        "steady",
        "-u",
        "1",
        "-r",
        "1",
        "--request-limit",
        "3",
        locustfile=locustfile,
        timeout=120,
    )
    assert run.returncode == 0, run.output
    assert len(truth.take_record(reference)) == 3
    assert not (out / "requests.csv").exists() and not (out / "summary.json").exists()
    assert "load-generator metrics for Prometheus" not in run.output
    assert "run_stats.csv" in {p.name for p in out.iterdir()}  # Locust's own reports are still there


def test_a_locustfile_without_a_sender_says_so(reference, tmp_path):
    locustfile = tmp_path / "nosender.py"
    locustfile.write_text(
        "from leakwatch.loadgen.listeners import CorpusPreparation\n"
        "from leakwatch.loadgen.locust_plugin import LeakwatchShape, StreamingUser, use\n"
        "use(CorpusPreparation)\n\n"
        "class LeanUser(StreamingUser):\n    workload = 'creative'\n"
    )
    run = run_locust(
        tmp_path / "out",
        reference,
        "--model",
        truth.MODEL,
        "--load-shape",
        "steady",
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "3s",
        locustfile=locustfile,
        timeout=120,
    )
    assert run.returncode == 2
    assert (
        "the locustfile must use(Sender) from leakwatch.loadgen.listeners (it chose: CorpusPreparation)" in run.output
    )
    assert "Traceback" not in run.output


@pytest.mark.slow
def test_vllms_benchmark_client_is_paired_with_the_record(reference, tmp_path):
    """vLLM's own client (the real one, as `make bench-loadgen` runs it) keeps only the generated text:
    its first word, written by the server as the key, pairs every request."""
    from benchmarks.loadgen.compare import AnswerTexts, VllmClient
    from leakwatch.demo_model.command import build_tokenizer
    from leakwatch.loadgen.tokens import LocalTokenizer

    build_tokenizer(tmp_path / "tok", 512, 256)
    answer = AnswerTexts(LocalTokenizer(str(tmp_path / "tok"))).of(4)
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": f"[lw-req {i}] tell me a story about the sea and the ship, please"},
                        {"from": "gpt", "value": answer},
                    ]
                }
                for i in range(8)
            ]
        )
    )
    client = VllmClient(tmp_path / "vllm-client.log")
    try:
        truth.take_record(reference)
        run = client.run(reference, tmp_path / "tok", sharegpt, 8, 4, model=truth.MODEL)
    finally:
        client.close()
    record = truth.take_record(reference)
    judged = truth.judge(run, record)
    assert judged["paired"] == run["completed"] == len(record) == 8
    assert all(e["fields"]["max_tokens"] == 4 for e in record.values())
    assert 0 <= judged["ttft_p50_err"] < 0.25
