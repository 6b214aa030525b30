"""The glue between Locust and the load generator: options, events, the load shape, the users' base
class, the web UI tab, the CSV/HTML/JSON reports and the Prometheus exporter.

Locustfiles in loadtest/ import `StreamingUser` and `LeakwatchShape` from here. Importing this module
registers its event listeners once per process (Locust's events are process-global), however many
locustfiles import it. Every Locust process has one `LoadgenRun`: workers (and a local runner) send
requests and record them; the master (or the local runner) merges, reports and exports.
"""

from __future__ import annotations

import atexit
import logging
import math
import resource
import time
from pathlib import Path

import gevent
from gevent import GreenletExit
from locust import LoadTestShape, User, constant, events, task
from locust.runners import MasterRunner, WorkerRunner

from ..settings import load as load_settings
from . import discovery, reports, tokens
from .client import API_PATHS, StreamingClient, request_body
from .metrics import RunState, registry
from .options import LoadgenOptions, OptionError, add_options
from .outcomes import CANCELLED, StreamResult
from .prompts import CorpusBuilder, Prompt, load_prompts_file
from .schedule import worker_share
from .stats import QUANTILES, RunStats

log = logging.getLogger("leakwatch.loadgen")

SHARE_MESSAGE = "leakwatch_share"
# Warn about falling behind the schedule when a request goes out this late, then at most every 30 s.
LATE_WARNING_S = 1.0


class StreamFailure(Exception):
    """What Locust's failure table shows for a failed stream: '<class>: <detail>'."""


def default_host() -> str:
    """The vLLM server of this checkout's stack (config/stack.yaml, VLLM_PORT / BIND_ADDRESS)."""
    settings = load_settings()
    bind = settings.bind_address
    host = "127.0.0.1" if bind in ("0.0.0.0", "::") else bind
    return f"http://{host}:{settings.service('vllm').port}"


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class PromptCycle:
    """The prompts of one workload, used in turn (the same order in every run with the same seed)."""

    def __init__(self, prompts: list[Prompt]):
        self.prompts = prompts
        self.index = 0

    def next(self) -> Prompt:
        prompt = self.prompts[self.index % len(self.prompts)]
        self.index += 1
        return prompt


class SharedSchedule:
    """This process's part of the open-loop schedule; users claim arrival times in order."""

    def __init__(self, arrivals, start: float):
        self._arrivals = arrivals
        self.start = start          # time.monotonic() of schedule time 0
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
            cause = (f"all {pool} users were busy; raise --max-in-flight or add workers (--processes)")
        else:
            cause = ("the load generator itself was stalled (CPU starved or a blocked event loop); give it "
                     "a core of its own or add workers (--processes)")
        log.warning("coordinated omission: a request went out %.2f s behind the Poisson schedule because %s. "
                    "Latencies of this period understate what users would see.", lateness, cause)


class LoadgenRun:
    """One Locust process's state for a test run."""

    def __init__(self, environment):
        self.env = environment
        runner = environment.runner
        self.role = "master" if isinstance(runner, MasterRunner) else "worker" if isinstance(runner, WorkerRunner) else "local"
        self.stats = RunStats()
        self.options: LoadgenOptions | None = None
        self.share = (0, 1)               # (index, count) of this worker among the workers
        self.corpora: dict[str, PromptCycle] = {}
        self.schedule: SharedSchedule | None = None
        self.model = ""
        self.server: tokens.ServerInfo | None = None
        self.notes: list[str] = []
        self.timeline_start: float | None = None
        self.issued = 0                   # requests sent by this process (or, on the master, all)
        self.worker_issued: dict[str, int] = {}
        self.pending_rows: list[dict] = []
        self.request_log: reports.RequestLog | None = None
        self.exporter = None
        self.sd_file: Path | None = None
        self.cpu_at_start: float | None = None
        self._prepared_for = None

    # -- settings --------------------------------------------------------------------------------

    def load_options(self) -> LoadgenOptions:
        self.options = LoadgenOptions.from_parsed(self.env.parsed_options)
        return self.options

    @property
    def host(self) -> str:
        return self.env.host or default_host()

    @property
    def process_name(self) -> str:
        if self.role == "worker":
            return f"worker-{self.share[0]}"
        return self.role

    # -- timeline ------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return 0.0 if self.timeline_start is None else time.monotonic() - self.timeline_start

    def limit_share(self) -> int:
        """This process's part of --request-limit (workers split it like the schedule)."""
        limit = self.options.request_limit
        if not limit:
            return 0
        index, count = self.share
        return max(0, math.ceil((limit - index) / count))

    def limit_reached(self) -> bool:
        """True once every request of --request-limit was sent and none is still streaming."""
        limit = self.options.request_limit if self.options else 0
        if not limit:
            return False
        issued = sum(self.worker_issued.values()) if self.role == "master" else self.issued
        return issued >= limit and self.stats.in_flight == 0

    def target_rate(self) -> float:
        if not self.options or self.options.shape != "production-day" or self.timeline_start is None:
            return 0.0
        if self.elapsed() >= self.options.arrivals.real_duration_s:
            return 0.0
        return self.options.arrivals.rate_at(self.elapsed())

    # -- test start: server probe, corpora, schedule ------------------------------------------------

    def on_test_start(self) -> None:
        self.load_options()
        self.stats.reset()
        self.issued = 0
        self.worker_issued = {}
        opts = self.options
        if self.role == "master":
            self._broadcast_shares()
        else:
            self._prepare()
        log.info("load shape: %s", opts.describe_shape())
        self.cpu_at_start = _cpu_seconds()  # the test's CPU, not the corpus building's
        self.timeline_start = time.monotonic()
        if opts.shape == "production-day" and self.role != "master":
            index, count = self.share
            self.schedule = SharedSchedule(worker_share(opts.arrivals.arrivals(), index, count), self.timeline_start)

    def _broadcast_shares(self) -> None:
        runner = self.env.runner
        clients = sorted(c.id for c in runner.clients.values() if c.state != "missing")
        for index, client_id in enumerate(clients):
            runner.send_message(SHARE_MESSAGE, {"index": index, "count": len(clients)}, client_id)

    def on_share(self, environment, msg, **kwargs) -> None:
        self.share = (int(msg.data["index"]), int(msg.data["count"]))

    def _prepare(self) -> None:
        opts = self.options
        key = (self.host, opts.model, opts.api, opts.seed, opts.prompt_scales, opts.output_scales,
               opts.corpus_size, opts.prompts_file, opts.tokenizer, opts.max_output_tokens, self.share)
        if key == self._prepared_for:
            return  # a second test in the same web UI session reuses the corpora
        self.notes = []
        try:
            self.server = tokens.probe(self.host, self.api_key(self.host), timeout=opts.connect_timeout)
        except tokens.ServerUnavailable as exc:
            self.server = None
            self._note(f"cannot read the served models ({exc}); requests will fail until the server answers",
                       logging.ERROR)
        served = self.server.models if self.server else ()
        self.model = opts.model or (served[0] if served else "default")
        if served and self.model not in served:
            self._note(f"model {self.model!r} is not served by {self.host} (it serves: {', '.join(served)}); "
                       f"requests will fail with http_404 - fix --model", logging.ERROR)
        max_len = self.server.max_model_len if self.server else None
        if opts.prompts_file:
            try:
                prompts = load_prompts_file(opts.prompts_file, opts.api)
            except (OSError, ValueError) as exc:
                raise OptionError(f"--prompts-file: {exc}") from None
            cycle = PromptCycle(prompts)
            self.corpora = {name: cycle for name in opts.workloads}
            self._note(f"prompts: {len(prompts)} from {opts.prompts_file}")
        else:
            counter = self._token_counter()
            self.corpora = {}
            for name in self._workloads_in_use():
                def builder(counter, name=name):
                    return CorpusBuilder(opts.workload_spec(name), counter, api=opts.api,
                                         seed=opts.seed * 1000 + self.share[0], scale=opts.prompt_scale(name),
                                         output_scale=opts.output_scale(name),
                                         max_model_len=max_len, max_output_tokens=opts.max_output_tokens or None)
                started = time.monotonic()
                build = builder(counter)
                try:
                    prompts = build.build(opts.corpus_size)
                except tokens.ServerUnavailable as exc:
                    self._note(f"the tokenizer stopped answering ({exc}); prompt lengths are estimated", logging.ERROR)
                    counter = tokens.EstimatedTokenizer()
                    build = builder(counter)
                    prompts = build.build(opts.corpus_size)
                self.corpora[name] = PromptCycle(prompts)
                self._note(build.stats.summary(name, counter, max_len)
                           + f", input {opts.workload_spec(name).input.describe(opts.prompt_scale(name))}"
                           + f", built in {time.monotonic() - started:.1f} s")
        self._prepared_for = key

    def _workloads_in_use(self) -> list[str]:
        names = {getattr(cls, "workload", None) for cls in self.env.user_classes}
        return sorted(n for n in names if n in self.options.workloads) or sorted(self.options.workloads)

    def _token_counter(self):
        opts = self.options
        if opts.tokenizer == "estimate":
            return tokens.EstimatedTokenizer()
        if opts.tokenizer != "server":
            try:
                return tokens.LocalTokenizer(opts.tokenizer)
            except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a bad folder
                raise OptionError(f"--tokenizer: cannot load a tokenizer from {opts.tokenizer!r} ({exc})") from None
        if self.server is None:
            self._note("no server to measure prompt lengths with: they are estimated", logging.WARNING)
            return tokens.EstimatedTokenizer()
        return tokens.ServerTokenizer(self.host, self.model, self.api_key(self.host), timeout=opts.request_timeout)

    def _note(self, text: str, level: int = logging.INFO) -> None:
        self.notes.append(text)
        log.log(level, "%s", text)

    # -- the users' request loop -------------------------------------------------------------------

    def api_key(self, host: str | None) -> str | None:
        """--api-key, else the native stack's own key when host is its vLLM (leakwatch/vllm_key.py)."""
        from .. import vllm_key

        opts = self.options or self.load_options()
        return opts.api_key or vllm_key.key_for(host)

    def new_client(self, host: str) -> StreamingClient:
        opts = self.options or self.load_options()
        return StreamingClient(host, self.api_key(host), connect_timeout=opts.connect_timeout,
                               request_timeout=opts.request_timeout)

    def send_one(self, user: "StreamingUser") -> None:
        opts = self.options
        limit = self.limit_share()
        if limit and self.issued >= limit:
            gevent.sleep(0.5)  # this process's share is sent; the shape ends the test when all are done
            return
        scheduled = None
        lateness = 0.0
        if opts.shape == "production-day" and self.schedule is not None:
            scheduled = self.schedule.claim()
            if scheduled is None:
                gevent.sleep(0.5)  # the day is over; the shape stops the users after the drain
                return
            wait = self.schedule.start + scheduled - time.monotonic()
            if wait > 0:
                gevent.sleep(wait)
            lateness = max(0.0, time.monotonic() - self.schedule.start - scheduled)
            self.schedule.note_lateness(lateness, opts.production_day.pool, self.stats.in_flight)
        workload = "file" if opts.prompts_file else user.workload
        prompt = self.corpora[user.workload].next()
        body = request_body(opts.api, self.model, prompt.content, prompt.output_tokens, opts.ignore_eos)
        self.issued += 1
        sent_unix = time.time()
        self.stats.stream_opened()
        try:
            result = user.stream_client.stream(opts.api, body)
        except GreenletExit:
            self.stats.record(workload, StreamResult(outcome=CANCELLED), lateness)
            raise
        finally:
            self.stats.stream_closed()
        self.stats.record(workload, result, lateness)
        self._fire_locust_events(user, workload, result)
        if opts.request_log:
            self.pending_rows.append(_log_row(self.process_name, workload, sent_unix, scheduled, lateness, result, prompt))
            if self.role == "local":
                self.flush_rows()

    def _fire_locust_events(self, user: "StreamingUser", workload: str, result: StreamResult) -> None:
        fire = self.env.events.request.fire
        name = f"/v1{API_PATHS[self.options.api]} [{workload}]"
        fire(request_type="POST", name=name, response_time=result.e2e * 1000, response_length=result.response_bytes,
             exception=None if result.ok else StreamFailure(result.message), context={}, response=None, url=None)
        if result.ok:
            fire(request_type="TTFT", name=workload, response_time=result.ttft * 1000, response_length=0,
                 exception=None, context={}, response=None, url=None)

    def flush_rows(self) -> None:
        if self.request_log is not None and self.pending_rows:
            self.request_log.write(self.pending_rows)
        self.pending_rows = []

    # -- distributed reports -------------------------------------------------------------------------

    def on_report_to_master(self, client_id, data, **kwargs) -> None:
        wire = self.stats.take_delta()
        wire["cpu_seconds"] = {self.process_name: self._cpu_used()}
        data["leakwatch"] = {"stats": wire, "issued": self.issued, "rows": self.pending_rows,
                             "model": self.model, "notes": self.notes}
        self.pending_rows = []

    def on_worker_report(self, client_id, data, **kwargs) -> None:
        report = data.get("leakwatch")
        if not report:
            return
        self.stats.merge_delta(client_id, report["stats"])
        self.worker_issued[client_id] = report["issued"]
        self.issued = sum(self.worker_issued.values())
        self.model = self.model or report["model"]
        self.notes.extend(n for n in report["notes"] if n not in self.notes)
        if self.request_log is not None:
            self.request_log.write(report["rows"])

    def _cpu_used(self) -> float:
        return 0.0 if self.cpu_at_start is None else _cpu_seconds() - self.cpu_at_start

    # -- the end -----------------------------------------------------------------------------------------

    def on_test_stop(self) -> None:
        self.stats.stopped = time.time()
        self.stats.cpu_seconds[self.process_name] = self._cpu_used()
        self.flush_rows()

    def summary(self) -> dict:
        opts = self.options
        out = self.stats.summary()
        out.update({
            "host": self.host, "model": self.model, "shape": opts.shape if opts else None,
            "shape_description": opts.describe_shape() if opts else None, "notes": self.notes,
            "quantiles": list(QUANTILES), "issued": self.issued,
        })
        if self.schedule is not None:
            out["schedule"] = {"claimed": self.schedule.claimed, "exhausted": self.schedule.exhausted,
                               "max_lateness_s": self.schedule.max_lateness,
                               "mean_rate_per_s": opts.arrivals.mean_rate,
                               "expected_arrivals": opts.arrivals.expected_count()}
        return out

    def write_reports(self) -> None:
        opts = self.options
        if opts is None:
            return
        parsed = self.env.parsed_options
        prefix = getattr(parsed, "csv_prefix", None)
        if prefix:
            Path(f"{prefix}_leakwatch.csv").write_text(self.stats.csv_text())
        if opts.summary_file:
            reports.write_json(opts.summary_file, self.summary())
        for row in self.stats.totals():
            log.info("leakwatch %s: %d requests, %d ok, %d failed (%s), %.1f output tokens/s",
                     row["workload"], row["requests"], row["ok"], row["failed"], row["failures"],
                     row["output_tokens_per_s"])
        for row in self.stats.rows():
            if row["count"]:
                log.info("leakwatch %s %s (ms): p50 %s p90 %s p99 %s max %s (n=%d)", row["workload"], row["metric"],
                         row["p50"], row["p90"], row["p99"], row["max"], row["count"])

    # -- Prometheus ---------------------------------------------------------------------------------------

    def start_exporter(self) -> None:
        from gevent.pywsgi import WSGIServer
        from prometheus_client import make_wsgi_app

        opts = self.options
        settings = load_settings()
        port = opts.metrics_port if opts.metrics_port is not None else settings.service("locust_exporter").port
        if port == -1:
            return
        bind = settings.bind_address
        state = RunState(
            shape=lambda: self.options.shape if self.options else "",
            model=lambda: self.model or (self.options.model if self.options else ""),
            users=lambda: self.env.runner.user_count if self.env.runner else 0,
            target_rate=self.target_rate,
        )
        app = make_wsgi_app(registry(lambda: self.stats, state))
        server = WSGIServer((bind, port), app, log=None, error_log=None)
        try:
            server.start()
        except OSError as exc:
            log.error("cannot serve load-generator metrics on %s:%s (%s); pick another port with --metrics-port "
                      "(0: any free port, -1: off)", bind, port, exc)
            return
        self.exporter = server
        port = server.server_port
        log.info("load-generator metrics for Prometheus: http://%s:%d/metrics", bind, port)
        sd_dir = self._sd_dir()
        if sd_dir:
            host = opts.sd_host or ("127.0.0.1" if bind in ("0.0.0.0", "::") else bind)
            self.sd_file = discovery.write_target(sd_dir, f"{host}:{port}")
            atexit.register(self.stop_exporter)
            log.info("Prometheus discovers it through %s (removed when Locust quits)", self.sd_file)

    def _sd_dir(self) -> Path | None:
        value = self.options.sd_dir
        if value == "auto":
            from ..native.runner import NativeStack  # only to find a running native stack's folder

            stack = NativeStack()
            return stack.layout.targets if stack.is_running() else None
        return Path(value) if value else None

    def stop_exporter(self) -> None:
        if self.sd_file is not None:
            discovery.remove_target(self.sd_file)
            self.sd_file = None
        if self.exporter is not None:
            self.exporter.stop(timeout=1)
            self.exporter = None


def _log_row(process: str, workload: str, sent_unix: float, scheduled, lateness: float, result: StreamResult,
             prompt: Prompt) -> dict:
    itls = result.itls
    return {
        "sent_unix": f"{sent_unix:.6f}", "process": process, "workload": workload, "outcome": result.outcome,
        "detail": result.detail, "status": result.status,
        "scheduled_s": "" if scheduled is None else f"{scheduled:.6f}", "queue_delay_s": f"{lateness:.6f}",
        "ttft_s": "" if result.ttft is None else f"{result.ttft:.6f}", "e2e_s": f"{result.e2e:.6f}",
        "itl_mean_s": f"{sum(itls) / len(itls):.6f}" if itls else "", "itl_max_s": f"{max(itls):.6f}" if itls else "",
        "tpot_s": "" if result.tpot is None else f"{result.tpot:.6f}", "chunks": result.chunks,
        "prompt_tokens": result.prompt_tokens if result.prompt_tokens is not None else "",
        "output_tokens": result.output_tokens if result.output_tokens is not None else "",
        "corpus_prompt_tokens": prompt.prompt_tokens or "", "target_prompt_tokens": prompt.target_tokens or "",
        "max_tokens": prompt.output_tokens, "repo": prompt.repo or "", "retried": int(result.retried),
    }


# -- Locust classes ----------------------------------------------------------------------------------------

_run: LoadgenRun | None = None


def current_run() -> LoadgenRun:
    if _run is None:
        raise RuntimeError("the leakwatch load generator runs inside Locust (locust -f loadtest/)")
    return _run


class StreamingUser(User):
    """One client holding one connection; each task is one streaming request.

    Subclasses set `workload` (a key of leakwatch.loadgen.prompts.WORKLOADS). Closed loop under the
    high-concurrency and steady shapes (the next request follows the last one: N users = N streams);
    open loop under the production-day shape (requests go out when the shared schedule says).
    """

    abstract = True
    workload = "creative"
    wait_time = constant(0)
    host = default_host()

    def on_start(self) -> None:
        self.run = current_run()
        self.stream_client = self.run.new_client(self.host)

    def on_stop(self) -> None:
        self.stream_client.close()

    @task
    def stream(self) -> None:
        self.run.send_one(self)


class LeakwatchShape(LoadTestShape):
    """The load shape named by --load-shape (one class, so `locust -f loadtest/` finds exactly one)."""

    # -u, -r and -t keep their meaning for --load-shape steady.
    use_common_options = True

    def tick(self):
        run = current_run()
        opts = run.options or run.load_options()
        if run.limit_reached():
            return None
        t = run.elapsed()
        if opts.shape == "high-concurrency":
            plan = opts.high_concurrency
            users = plan.users_at(t)
            return None if users is None else (users, plan.spawn_rate)
        if opts.shape == "production-day":
            plan = opts.production_day
            users = plan.users_at(t, run.stats.in_flight)
            return None if users is None else (users, plan.spawn_rate)
        parsed = run.env.parsed_options
        run_time = getattr(parsed, "run_time", None)
        if run_time and t >= run_time:
            return None
        return (int(getattr(parsed, "num_users", None) or 1), float(getattr(parsed, "spawn_rate", None) or 1))


# -- event listeners (registered once per process) -----------------------------------------------------------


@events.init_command_line_parser.add_listener
def _on_parser(parser, **kwargs):
    add_options(parser)


@events.init.add_listener
def _on_init(environment, runner, web_ui, **kwargs):
    global _run
    run = _run = LoadgenRun(environment)
    try:
        run.load_options()
    except OptionError as exc:
        log.error("%s", exc)
        raise SystemExit(2) from None
    if run.role == "worker":
        runner.register_message(SHARE_MESSAGE, run.on_share)
        return
    if run.options.request_log:
        run.request_log = reports.RequestLog(run.options.request_log)
    run.start_exporter()
    if web_ui is not None:
        from .webui import install

        install(web_ui, run)


@events.test_start.add_listener
def _on_test_start(environment, **kwargs):
    try:
        current_run().on_test_start()
    except OptionError as exc:
        log.error("%s", exc)
        environment.runner.quit()


@events.test_stop.add_listener
def _on_test_stop(environment, **kwargs):
    if _run is not None:
        _run.on_test_stop()


@events.report_to_master.add_listener
def _on_report_to_master(client_id, data, **kwargs):
    if _run is not None:
        _run.on_report_to_master(client_id, data)


@events.worker_report.add_listener
def _on_worker_report(client_id, data, **kwargs):
    if _run is not None:
        _run.on_worker_report(client_id, data)


@events.reset_stats.add_listener
def _on_reset_stats(**kwargs):
    if _run is not None:
        _run.stats.reset()


@events.quitting.add_listener
def _on_quitting(environment, **kwargs):
    run = _run
    if run is None or run.role == "worker":
        return
    run.write_reports()
    if run.request_log is not None:
        run.flush_rows()
        run.request_log.close()
    run.stop_exporter()


@events.quit.add_listener
def _on_quit(exit_code, **kwargs):
    # Locust writes its --html report before `quitting`; the full-precision section is added after.
    run = _run
    if run is None or run.role == "worker":
        return
    html_file = getattr(run.env.parsed_options, "html_file", None)
    if html_file and Path(html_file).is_file():
        path = Path(html_file)
        path.write_text(reports.inject_html(path.read_text(encoding="utf-8"), reports.html_section(run.stats, run.notes)),
                        encoding="utf-8")


