"""vLLM's own leaks, reproduced on the real server (the demo model on vLLM's CPU backend, our
exporter, Prometheus; no injector): the Responses API's store (VLLM_ENABLE_RESPONSES_API_STORE=1,
unique POST /v1/responses) grows the API server for ever, and xgrammar's grammar cache (unique JSON
schemas, VLLM_XGRAMMAR_CACHE_MB=1) grows EngineCore and levels off. The exporter must put each in
its role, `leakwatch check` must say LEAK for the first, with the bytes per triggering request and
the endpoint that triggers it; for the second, a LEAK while it fills only with a plateau forecast
that fits, and NO-LEAK once full (new schemas at a production pace); the exporter must publish the
resident bound of the cap that was set. `make bench-realleaks` runs every case of config/vllm_leaks.yaml."""

from __future__ import annotations

import dataclasses
import io

import pytest

from leakwatch.drill import drill_settings
from leakwatch.drill.real_leaks import RealLeakDrill
from leakwatch.leakcheck.analysis import LEAK, NO_LEAK
from leakwatch.realleaks import catalogue

# The bench's count for the store (a phase long enough for check to decide), fewer schemas than the
# bench: enough for check's 20 samples and 50 requests per phase, and for growth far above the
# allocator's few MiB (the store keeps ~12 kB per request with these inputs).
REQUESTS = {"responses-store": 800, "unique-json-schema": 1000}
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def screening():
    cat = catalogue.load()
    cat = dataclasses.replace(cat, screening={**cat.screening, **REQUESTS})
    cases = [cat.case("responses-store"), cat.case("xgrammar-cache")]
    cfg = dataclasses.replace(drill_settings.load(), time_compression=1.0)
    out = io.StringIO()
    drill = RealLeakDrill(cfg, cat, cases, out=out)
    results = {r.case.name: r for r in drill.screen()}
    print(out.getvalue())
    return results, drill, out.getvalue()


def test_the_responses_store_is_a_leak_in_the_api_server(screening):
    results, _, log = screening
    res = results["responses-store"]
    assert res.grown_role == "api_server", (res.run.growth if res.run else None, log)
    assert res.verdict == LEAK, (res.run.check_reason("api_server") if res.run else None, log)
    # Each stored response holds its ~2 kB input several times over (messages, the response).
    assert 2_000 < res.bytes_per_trigger < 100_000, log
    # The exporter's figure and check's agree (both read the same anonymous memory).
    assert res.check_bytes_per_trigger == pytest.approx(res.bytes_per_trigger, rel=0.3), log
    assert not res.failures, (res.failures, log)


def test_check_names_the_endpoint_whose_requests_leak(screening):
    results, _, log = screening
    run = results["responses-store"].run
    api = next(s for s in run.check["series"] if s.get("labels", {}).get("role") == "api_server")
    attribution = api.get("attribution") or {}
    assert attribution.get("endpoint") == "POST /v1/responses", (attribution, log)


def test_the_grammar_cache_grows_in_engine_core_then_levels_off(screening):
    results, _, log = screening
    res = results["xgrammar-cache"]
    assert res.grown_role == "engine_core", (res.run.growth if res.run else None, log)
    assert res.plateau_ok, (res.run.thirds if res.run else None, log)
    # While it filled (check over the first third, paced): a LEAK with the forecast that it levels
    # off within the headroom.
    assert res.filling_verdict == f"{LEAK} (fits)", (res.filling_verdict, res.run.fill_check if res.run else None, log)
    # Once full, new schemas at a production pace: NO-LEAK.
    assert res.verdict == NO_LEAK, (res.run.after.check if res.run and res.run.after else None, log)
    assert not res.failures, (res.failures, log)


def test_the_exporter_publishes_the_resident_bound_of_the_cap_that_was_set(screening):
    _, drill, log = screening
    expected = catalogue.load().case("xgrammar-cache").bound.bytes_for(1)  # VLLM_XGRAMMAR_CACHE_MB=1
    assert drill.declared_bounds.get(("engine_core", "xgrammar-cache")) == expected, (drill.declared_bounds, log)
