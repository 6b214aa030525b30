"""The request patterns that trigger vLLM's own leaks (config/vllm_leaks.yaml), one Locust user class
per pattern, each sending exactly what `leakwatch drill --scenario` sends (leakwatch.realleaks.triggers).

The leading underscore keeps these users out of `locust -f loadtest/` (Locust skips files that start
with one when it reads a folder): a production load test never sends leak triggers by accident. Run
them by name against a stack you mean to stress:

    .venv/bin/locust -f loadtest/_real_leaks.py ResponsesStoreUser --headless -u 4 -r 4 -t 5m
    .venv/bin/locust -f loadtest/_real_leaks.py UniqueJsonSchemaUser --headless -u 4 -r 4 -i 600

| user class | trigger | case (runbook: Known vLLM leaks) |
|---|---|---|
| ResponsesStoreUser | POST /v1/responses, unique input, store left true | responses-store (needs VLLM_ENABLE_RESPONSES_API_STORE=1) |
| UniqueJsonSchemaUser | /v1/completions with a JSON schema never seen before | xgrammar-cache |
| ClientTimeoutUser | a long completion abandoned after 0.3 s | client-timeout-admission, omni-aborted-requests |
| ShortDecodeUser | unique prompt, max_tokens=1, prefix caching on | short-decode-block-ids, worker-rpc-payloads |

Watch the Memory dashboard's per-role panels and `leakwatch check` while they run.
"""

import itertools

from locust import HttpUser, constant, task

try:
    from leakwatch.loadgen.run_state import default_host
    from leakwatch.realleaks import triggers
except ImportError as exc:  # Locust without this checkout's package
    raise SystemExit(
        f"loadtest/ needs the leakwatch package: run `make setup-dev` or `pip install -e '.[load]'` ({exc})"
    ) from None

# One numbering for every user of a run, so that each request is new where newness is the trigger.
_next_index = itertools.count()


class RealLeakTrigger(HttpUser):
    abstract = True
    trigger = ""  # a key of leakwatch.realleaks.triggers.BUILDERS
    wait_time = constant(0)
    host = default_host()

    def on_start(self) -> None:
        models = self.client.get("/v1/models", name="/v1/models").json()["data"]
        self.model = models[0]["id"]

    @task
    def send_trigger(self) -> None:
        request = triggers.build(self.trigger, next(_next_index), self.model)
        with self.client.post(
            request.path,
            json=request.body,
            name=f"{request.path} ({self.trigger})",
            timeout=request.client_timeout_s,
            catch_response=True,
        ) as resp:
            if request.client_timeout_s is not None and resp.status_code == 0:
                resp.success()  # the client gave up, as the pattern says: vLLM must abort and free it
            elif resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}: {(resp.text or '')[:200]}")


class ResponsesStoreUser(RealLeakTrigger):
    trigger = "responses-store"


class UniqueJsonSchemaUser(RealLeakTrigger):
    trigger = "unique-json-schema"


class ClientTimeoutUser(RealLeakTrigger):
    trigger = "client-timeout"


class ShortDecodeUser(RealLeakTrigger):
    trigger = "short-decode"
