"""The sender: the open-loop schedule, one streaming request per user task, Locust's request events.

Every request follows the model's client conventions (prompt text and per-request fields) and
carries an `x-request-id` (vLLM logs it and uses it as the request's id; the request log keeps it),
so one request can be followed from the load generator to the server.
"""

from __future__ import annotations

import logging
import math
import secrets
import time

import gevent
from gevent import GreenletExit

from ..client import API_PATHS, StreamingClient, request_body
from ..outcomes import CANCELLED, StreamResult
from ..prompt_record import Prompt
from ..schedule import worker_share

log = logging.getLogger("leakwatch.loadgen")

# Warn about falling behind the schedule when a request goes out this late, then at most every 30 s.
LATE_WARNING_S = 1.0
# Completions kept per workload for the reports, decoded as a person reads them.
SAMPLES_PER_WORKLOAD = 2


class StreamFailure(Exception):
    """What Locust's failure table shows for a failed stream: '<class>: <detail>'."""


class SharedSchedule:
    """This process's part of the open-loop schedule; users claim arrival times in order."""

    def __init__(self, arrivals, start: float):
        self._arrivals = arrivals
        self.start = start  # time.monotonic() of schedule time 0
        self.claimed = 0
        self.exhausted = False
        self.max_lateness = 0.0
        self._last_warning = -math.inf

    def claim(self) -> float | None:
        """The next arrival (seconds after start), or None when the schedule is over."""
        if self.exhausted:
            return None
        try:
            offset = next(self._arrivals)
        except StopIteration:
            self.exhausted = True
            return None
        self.claimed += 1
        return offset

    def note_lateness(self, lateness: float, pool: int, in_flight: int) -> None:
        self.max_lateness = max(self.max_lateness, lateness)
        now = time.monotonic()
        if lateness < LATE_WARNING_S or now - self._last_warning <= 30:
            return
        self._last_warning = now
        if in_flight >= pool:
            cause = f"all {pool} users were busy; raise --max-in-flight or add workers (--processes)"
        else:
            cause = (
                "the load generator itself was stalled (CPU starved or a blocked event loop); give it "
                "a core of its own or add workers (--processes)"
            )
        log.warning(
            "coordinated omission: a request went out %.2f s behind the Poisson schedule because %s. "
            "Latencies of this period understate what users would see.",
            lateness,
            cause,
        )


class Sender:
    """Sends the users' requests (workers and a local runner); the master only keeps the timeline."""

    def __init__(self, run):
        self.run = run
        self.run_token = secrets.token_hex(3)
        run.sender = self
        events = run.env.events
        events.test_start.add_listener(self.on_test_start)
        events.test_stop.add_listener(self.on_test_stop)

    def on_test_start(self, environment, **kwargs) -> None:
        run, opts = self.run, self.run.options
        if opts is None:
            return
        run.start_timeline()
        # Request ids unique across runs, so vLLM's logs of one run are not mistaken for another's.
        self.run_token = secrets.token_hex(3)
        run.schedule = None
        run.samples = []
        if opts.shape == "production-day" and run.role != "master":
            index, count = run.share
            run.schedule = SharedSchedule(worker_share(opts.arrivals.arrivals(), index, count), run.timeline_start)

    def on_test_stop(self, environment, **kwargs) -> None:
        run = self.run
        run.stats.stopped = time.time()
        run.stats.cpu_seconds[run.process_name] = run.cpu_used()

    def new_client(self, host: str) -> StreamingClient:
        opts = self.run.options or self.run.load_options()
        return StreamingClient(
            host, self.run.api_key(host), connect_timeout=opts.connect_timeout, request_timeout=opts.request_timeout
        )

    def request_headers(self, request_id: str) -> dict:
        """This request's own headers (the connection's: content type, accept, authorization)."""
        return {"x-request-id": request_id}

    def send_one(self, user) -> None:
        run, opts = self.run, self.run.options
        limit = run.limit_share()
        if limit and run.issued >= limit:
            gevent.sleep(0.5)  # this process's share is sent; the shape ends the test when all are done
            return
        scheduled = None
        lateness = 0.0
        if opts.shape == "production-day" and run.schedule is not None:
            scheduled = run.schedule.claim()
            if scheduled is None:
                gevent.sleep(0.5)  # the day is over; the shape stops the users after the drain
                return
            wait = run.schedule.start + scheduled - time.monotonic()
            if wait > 0:
                gevent.sleep(wait)
            lateness = max(0.0, time.monotonic() - run.schedule.start - scheduled)
            run.schedule.note_lateness(lateness, opts.production_day.pool, run.stats.in_flight)
        workload = "file" if opts.prompts_file else user.workload
        prompt = run.corpora[user.workload].next()
        rules = run.conventions
        content = rules.prompt(prompt.content) if rules else prompt.content
        extra = {**(rules.request_fields() if rules else {}), **opts.extra_body}
        body = request_body(opts.api, run.model, content, prompt.output_tokens, opts.ignore_eos, extra)
        run.issued += 1
        request_id = f"lw-{self.run_token}-{run.process_name}-{run.issued}"
        sent_unix = time.time()
        run.stats.stream_opened()
        try:
            result = user.stream_client.stream(
                opts.api, body, self.request_headers(request_id), keep_text=self._wants_sample(workload)
            )
        except GreenletExit:
            run.stats.record(workload, StreamResult(outcome=CANCELLED), lateness)
            raise
        finally:
            run.stats.stream_closed()
        run.stats.record(workload, result, lateness)
        self._fire_locust_events(user, workload, result)
        if result.ok and result.text is not None:
            self._keep_sample(workload, request_id, result.text)
        if run.keep_rows:
            run.emit_rows(
                [log_row(run.process_name, workload, sent_unix, scheduled, lateness, result, prompt, request_id)]
            )

    def _wants_sample(self, workload: str) -> bool:
        return sum(1 for s in self.run.samples if s["workload"] == workload) < SAMPLES_PER_WORKLOAD

    def _keep_sample(self, workload: str, request_id: str, text: str) -> None:
        if self._wants_sample(workload):
            rules = self.run.conventions
            self.run.samples.append(
                {
                    "workload": workload,
                    "request_id": request_id,
                    "completion": rules.completion(text) if rules else text,
                }
            )

    def _fire_locust_events(self, user, workload: str, result: StreamResult) -> None:
        fire = self.run.env.events.request.fire
        name = f"/v1{API_PATHS[self.run.options.api]} [{workload}]"
        fire(
            request_type="POST",
            name=name,
            response_time=result.e2e * 1000,
            response_length=result.response_bytes,
            exception=None if result.ok else StreamFailure(result.message),
            context={},
            response=None,
            url=None,
        )
        if result.ok:
            fire(
                request_type="TTFT",
                name=workload,
                response_time=result.ttft * 1000,
                response_length=0,
                exception=None,
                context={},
                response=None,
                url=None,
            )


def log_row(
    process: str,
    workload: str,
    sent_unix: float,
    scheduled,
    lateness: float,
    result: StreamResult,
    prompt: Prompt,
    request_id: str = "",
) -> dict:
    itls = result.itls
    return {
        # when the request was written: a new connection is opened first, outside TTFT and e2e
        "sent_unix": f"{sent_unix + result.connect:.6f}",
        "process": process,
        "workload": workload,
        "outcome": result.outcome,
        "detail": result.detail,
        "status": result.status,
        "scheduled_s": "" if scheduled is None else f"{scheduled:.6f}",
        "queue_delay_s": f"{lateness:.6f}",
        "connect_s": f"{result.connect:.6f}",
        "ttft_s": "" if result.ttft is None else f"{result.ttft:.6f}",
        "e2e_s": f"{result.e2e:.6f}",
        "itl_mean_s": f"{sum(itls) / len(itls):.6f}" if itls else "",
        "itl_max_s": f"{max(itls):.6f}" if itls else "",
        "tpot_s": "" if result.tpot is None else f"{result.tpot:.6f}",
        "chunks": result.chunks,
        "prompt_tokens": result.prompt_tokens if result.prompt_tokens is not None else "",
        "output_tokens": result.output_tokens if result.output_tokens is not None else "",
        "corpus_prompt_tokens": prompt.prompt_tokens or "",
        "target_prompt_tokens": prompt.target_tokens or "",
        "max_tokens": prompt.output_tokens,
        "repo": prompt.repo or "",
        "retried": int(result.retried),
        "request_id": request_id,
    }
