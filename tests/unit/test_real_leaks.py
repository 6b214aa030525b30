"""vLLM's own leaks: the catalogue's contract, the triggers' requests, the runbook block it generates,
and how a screening judges a case from what the exporter and `leakwatch check` saw."""

from __future__ import annotations

import json

import pytest

from leakwatch.core.errors import LeakwatchError
from leakwatch.drill.real_leaks import MIN_BYTES_PER_TRIGGER, TriggerRun, judge, summary_line
from leakwatch.realleaks import catalogue, runbook, triggers

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def cat() -> catalogue.Catalogue:
    return catalogue.load()


def test_every_case_names_its_source_role_and_what_a_monitor_must_say(cat):
    assert len(cat.cases) >= 6
    for case in cat.cases:
        assert case.source, case.name
        assert case.role in catalogue.ROLES
        if case.status != "reproduces":
            assert case.expected_on_pinned == "flat"
            assert case.note or case.status == "fixed", f"{case.name}: say why it does not reproduce"
        if case.status == "fixed":
            assert case.fixed_in, f"{case.name}: a fixed case names the version that fixed it"
    # The screening reproduces one unbounded leak and one bounded cache, in different roles.
    reproducing = {c.shape: c.role for c in cat.cases if c.status == "reproduces"}
    assert reproducing == {"leak": "api_server", "bounded": "engine_core"}
    assert all(c.trigger in cat.screening for c in cat.cases if c.trigger)


def test_bounded_cache_bound_is_read_in_its_unit(cat):
    (xgrammar,) = cat.bounded_caches
    assert xgrammar.bound.env == "VLLM_XGRAMMAR_CACHE_MB"
    # xgrammar counts less than the process holds: the resident bound is the cap times the factor.
    assert xgrammar.bound.resident_factor == 24
    assert xgrammar.bound.bytes_for(1) == 24 * MIB
    assert xgrammar.bound.bytes_for(None) == 512 * 24 * MIB  # vLLM's default


def test_a_bad_catalogue_is_refused_naming_the_key(tmp_path, cat):
    text = catalogue.CATALOGUE_FILE.read_text()
    bad = tmp_path / "leaks.yaml"
    bad.write_text(text.replace("role: api_server", "role: apiserver", 1))
    with pytest.raises(LeakwatchError, match=r"cases\[0\]\.role must be one of"):
        catalogue.load(bad)
    bad.write_text(text.replace("  - name: xgrammar-cache", "  - name: responses-store", 1))
    with pytest.raises(LeakwatchError, match="appears twice"):
        catalogue.load(bad)
    bad.write_text(text.replace('VLLM_ENABLE_RESPONSES_API_STORE: "1"', "VLLM_ENABLE_RESPONSES_API_STORE: 1", 1))
    with pytest.raises(LeakwatchError, match="quote numbers"):
        catalogue.load(bad)
    # A comma inside a flow list's note splits it: the source check says which item is wrong.
    bad.write_text(text.replace("#48454 (fix; open)", "#48454 (fix, open)", 1))
    with pytest.raises(LeakwatchError, match=r"cases\[0\]\.source must name issues .*'open\)'"):
        catalogue.load(bad)
    with pytest.raises(LeakwatchError, match="no vLLM leak scenario 'nope'; known: responses-store"):
        cat.case("nope")


def test_triggers_are_unique_where_uniqueness_triggers_and_deterministic():
    a, b = triggers.build("responses-store", 1, "demo"), triggers.build("responses-store", 2, "demo")
    assert a.path == "/v1/responses" and a.body["input"] != b.body["input"]
    assert "store" not in a.body  # left at its default (true): the store keeps it
    assert triggers.build("responses-store", 1, "demo") == a
    s1, s2 = (triggers.build("unique-json-schema", i, "demo") for i in (1, 2))
    schema = s1.body["response_format"]["json_schema"]["schema"]
    assert json.dumps(schema) != json.dumps(s2.body["response_format"]["json_schema"]["schema"])
    assert s1.body["max_tokens"] == 1
    timeout = triggers.build("client-timeout", 1, "demo")
    assert timeout.client_timeout_s is not None and timeout.body["max_tokens"] > 100
    assert triggers.build("short-decode", 3, "demo").body["max_tokens"] == 1
    with pytest.raises(LeakwatchError, match="no trigger 'x'"):
        triggers.build("x", 1, "demo")


def test_shape_twins_have_the_triggers_shapes_and_trigger_nothing():
    """What primes the server before a trigger's baseline: the same endpoint and sizes, never the
    trigger's own request, nothing the leak keeps."""
    for trigger in triggers.BUILDERS:
        for i in (0, 7):
            real, twin = triggers.build(trigger, i, "demo"), triggers.shape_twin(trigger, i, "demo")
            assert twin.path == real.path and twin.client_timeout_s == real.client_timeout_s
            assert twin.body != real.body
            for size in ("max_tokens", "max_output_tokens"):
                assert twin.body.get(size) == real.body.get(size)
    store = triggers.shape_twin("responses-store", 3, "demo")
    assert store.body["store"] is False
    assert len(store.body["input"].split()) == len(triggers.build("responses-store", 3, "demo").body["input"].split())
    schemas = {
        json.dumps(triggers.shape_twin("unique-json-schema", i, "demo").body["response_format"]) for i in range(5)
    }
    assert len(schemas) == 1  # one schema, compiled once
    prompts = {triggers.shape_twin("unique-json-schema", i, "demo").body["prompt"] for i in range(5)}
    assert len(prompts) == 5


def test_runbook_block_is_generated_in_place_and_refuses_missing_markers(cat):
    text = f"# Runbook\n\nhand-written\n\n{runbook.BEGIN}\nstale text\n{runbook.END}\n\ntail\n"
    out = runbook.with_section(text, cat, "0.32.0")
    assert out.startswith("# Runbook\n\nhand-written\n\n") and out.endswith("\n\ntail\n")
    assert "stale text" not in out
    for case in cat.cases:
        assert f"### {case.name}:" in out
    assert "[vllm-project/vllm#48275](https://github.com/vllm-project/vllm/issues/48275)" in out
    assert "`VLLM_XGRAMMAR_CACHE_MB`, default 512 MiB" in out
    with pytest.raises(LeakwatchError, match="markers"):
        runbook.with_section("no markers", cat, "0.32.0")


def _check(verdicts: dict[str, str], per_request: float = 0.0) -> dict:
    return {
        "series": [
            {
                "kind": "host",
                "labels": {"role": role},
                "verdict": v,
                "bytes_per_request": {"estimate": per_request if v == "LEAK" else 0.0},
            }
            for role, v in verdicts.items()
        ]
    }


def _run(trigger: str, sent: int, growth: dict[str, float], verdicts: dict[str, str], **kw) -> TriggerRun:
    run = TriggerRun(trigger, sent=sent, growth=growth, check=_check(verdicts, kw.pop("per_request", 0.0)), **kw)
    run.thirds = run.thirds or {role: [g / 3] * 3 for role, g in growth.items()}
    return run


FLAT = {"api_server": "NO-LEAK", "engine_core": "NO-LEAK", "worker": "NO-LEAK"}


def test_a_reproduced_leak_is_attributed_to_its_role(cat, monkeypatch):
    monkeypatch.setattr("leakwatch.realleaks.forecast.hours_to_leak_alert", lambda role, b: {"10_per_s": 2.5})
    case = cat.case("responses-store")
    run = _run(
        "responses-store",
        1500,
        {"api_server": 1500 * 8000.0, "engine_core": 2e5, "worker": 0.0},
        {**FLAT, "api_server": "LEAK"},
        per_request=7900.0,
    )
    res = judge(case, run)
    assert (res.reproduced, res.attributed, res.verdict_ok) == (True, True, True), res.failures
    assert res.bytes_per_trigger == 8000.0 and res.check_bytes_per_trigger == 7900.0
    assert res.hours_to_alert == {"10_per_s": 2.5}
    # The same growth in the wrong role is reproduced but not attributed, and says so.
    wrong = judge(case, _run("responses-store", 1500, {"api_server": 0.0, "worker": 1500 * 8000.0}, FLAT))
    assert wrong.reproduced and not wrong.attributed and not wrong.verdict_ok
    assert any("worker grew most, not api_server" in f for f in wrong.failures)


def test_a_leak_is_the_role_that_grew_in_every_third_not_a_cache_filling_in_the_first(cat, monkeypatch):
    """A worker cache filling with the first triggers' shapes (32 MB in one third) beside the store's
    steady 11 kB per trigger: the leak is the API server's."""
    monkeypatch.setattr("leakwatch.realleaks.forecast.hours_to_leak_alert", lambda role, b: {})
    case = cat.case("responses-store")
    run = _run(
        "responses-store",
        800,
        {"api_server": 800 * 11000.0, "worker": 32e6},
        {**FLAT, "api_server": "LEAK"},
        per_request=11000.0,
        thirds={"api_server": [800 * 11000.0 / 3] * 3, "worker": [32e6, 0.0, 0.0]},
    )
    res = judge(case, run)
    assert res.grown_role == "api_server" and res.attributed, res.failures


def _with_forecast(check: dict, role: str, outcome: str) -> dict:
    for series in check["series"]:
        if series["labels"]["role"] == role:
            series["bounded_caches"] = {"outcome": outcome}
    return check


def test_a_bounded_cache_may_be_a_leak_only_with_a_fitting_forecast_and_no_leak_once_full(cat):
    case = cat.case("xgrammar-cache")

    def screened(filling: str, outcome: str | None, after: str, thirds: list[float]):
        check = _check({**FLAT, "engine_core": filling})
        if outcome:
            check = _with_forecast(check, "engine_core", outcome)
        run = TriggerRun("unique-json-schema", sent=600, growth={"engine_core": sum(thirds)}, fill_check=check)
        run.check = _check(FLAT)  # the whole phase: levelled off in its later part
        run.thirds = {"engine_core": thirds}
        run.after = _run("unique-json-schema", 240, {"engine_core": 0.1 * MIB}, {**FLAT, "engine_core": after})
        return judge(case, run)

    levelled = [19 * MIB, 1 * MIB, 0.5 * MIB]
    res = screened("LEAK", "fits", "NO-LEAK", levelled)
    assert res.plateau_ok and res.verdict_ok and res.attributed and not res.failures, res.failures
    assert (res.verdict, res.filling_verdict) == ("NO-LEAK", "LEAK (fits)")
    # A LEAK while filling whose forecast says it would run out (or is beyond its bound) is wrong here.
    res = screened("LEAK", "beyond the bound", "NO-LEAK", levelled)
    assert not res.verdict_ok and any("no plateau forecast that fits" in f for f in res.failures)
    # Still a LEAK once full at a production pace, or never levelling off: both fail, and say so.
    res = screened("LEAK", "fits", "LEAK", [7 * MIB, 7 * MIB, 6 * MIB])
    assert not res.plateau_ok and not res.verdict_ok
    assert any("did not level off" in f for f in res.failures) and any("once it was full" in f for f in res.failures)


def test_a_control_passes_only_when_nothing_grows_and_check_calls_nothing_a_leak(cat):
    case = cat.case("short-decode-block-ids")
    quiet = judge(case, _run("short-decode", 1500, {"engine_core": 1500 * 100.0}, FLAT))
    assert quiet.verdict_ok and not quiet.reproduced and not quiet.failures
    # Above the per-trigger floor but within the allocator's wander in all: not grown.
    wander = judge(case, _run("client-timeout", 300, {"worker": 1.3e6}, FLAT))
    assert wander.grown_role is None and wander.verdict_ok
    grows = judge(
        case,
        _run(
            "short-decode", 1500, {"engine_core": 1500 * 4.0 * MIN_BYTES_PER_TRIGGER}, {**FLAT, "engine_core": "LEAK"}
        ),
    )
    assert not grows.verdict_ok and grows.failures
    line = summary_line([quiet, grows])
    assert line == "realleaks: screened=2 reproduced=0 attributed=0 verdict_ok=1 plateau_ok=0"
