"""One Locust process's shared state for a test run: options, role, timeline, counters and the stats.

The listener classes in `leakwatch.loadgen.listeners` each own one job (corpora, sending, the
distributed merge, the Prometheus exporter, the reports) and meet here: what one of them produces
(the corpora, the model name, notes, request-log rows) another reads from this object.
"""

from __future__ import annotations

import logging
import math
import resource
import time
from collections.abc import Callable

from locust.runners import MasterRunner, WorkerRunner

from ..core.settings import load as load_settings
from ..core.topology import reachable_host
from .options import LoadgenOptions
from .stats import QUANTILES, RunStats

log = logging.getLogger("leakwatch.loadgen")


def default_host() -> str:
    """The vLLM server of this checkout's stack (config/stack.yaml, VLLM_PORT / BIND_ADDRESS)."""
    settings = load_settings()
    return f"http://{reachable_host(settings.bind_address)}:{settings.service('vllm').port}"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class LoadgenRun:
    """What every listener of one Locust process shares."""

    def __init__(self, environment):
        self.env = environment
        runner = environment.runner
        self.role = (
            "master" if isinstance(runner, MasterRunner) else "worker" if isinstance(runner, WorkerRunner) else "local"
        )
        self.stats = RunStats()
        self.options: LoadgenOptions | None = None
        self.share = (0, 1)  # (index, count) of this worker among the workers
        self.corpora: dict = {}  # workload -> PromptCycle (CorpusPreparation fills it)
        self.conventions = None  # the model's ClientConventions (CorpusPreparation sets them)
        self.conventions_info: dict | None = None  # what they are, for the summary (the master gets it from workers)
        self.schedule = None  # the open-loop SharedSchedule (Sender)
        self.model = ""
        self.server = None  # tokens.ServerInfo from the probe
        self.notes: list[str] = []
        self.samples: list[dict] = []  # a few completions per workload, as a person reads them
        self.timeline_start: float | None = None
        self.issued = 0  # requests sent by this process (or, on the master, all)
        self.worker_issued: dict[str, int] = {}
        self.keep_rows = False  # whether request-log rows are produced (Reports sets it)
        self.row_sink: Callable[[list[dict]], None] | None = None  # where rows go at once (else pending_rows)
        self.pending_rows: list[dict] = []
        self.cpu_at_start: float | None = None
        self.listeners: list = []
        self.sender = None  # the Sender listener (the users send through it)

    # -- settings --------------------------------------------------------------------------------

    def load_options(self) -> LoadgenOptions:
        self.options = LoadgenOptions.from_parsed(self.env.parsed_options)
        return self.options

    def api_key(self, host: str | None) -> str | None:
        """--api-key, else the native stack's own key when host is its vLLM (leakwatch/core/vllm_key.py)."""
        from ..core import vllm_key

        opts = self.options or self.load_options()
        return opts.api_key or vllm_key.key_for(host)

    @property
    def host(self) -> str:
        return self.env.host or default_host()

    @property
    def process_name(self) -> str:
        if self.role == "worker":
            return f"worker-{self.share[0]}"
        return self.role

    def note(self, text: str, level: int = logging.INFO) -> None:
        self.notes.append(text)
        log.log(level, "%s", text)

    # -- timeline ------------------------------------------------------------------------------------

    def reset(self) -> None:
        self.stats.reset()
        self.issued = 0
        self.worker_issued = {}

    def start_timeline(self) -> None:
        self.cpu_at_start = cpu_seconds()  # the test's CPU, not the corpus building's
        self.timeline_start = time.monotonic()

    def elapsed(self) -> float:
        return 0.0 if self.timeline_start is None else time.monotonic() - self.timeline_start

    def cpu_used(self) -> float:
        return 0.0 if self.cpu_at_start is None else cpu_seconds() - self.cpu_at_start

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

    # -- request-log rows ------------------------------------------------------------------------------

    def emit_rows(self, rows: list[dict]) -> None:
        """Rows to the request log now (local runner, master) or to the next report to the master."""
        if not rows:
            return
        if self.row_sink is not None:
            self.row_sink(rows)
        else:
            self.pending_rows.extend(rows)

    def take_rows(self) -> list[dict]:
        rows, self.pending_rows = self.pending_rows, []
        return rows

    # -- the summary -----------------------------------------------------------------------------------------

    def summary(self) -> dict:
        opts = self.options
        out = self.stats.summary()
        out.update(
            {
                "host": self.host,
                "model": self.model,
                "shape": opts.shape if opts else None,
                "shape_description": opts.describe_shape() if opts else None,
                "notes": self.notes,
                "quantiles": list(QUANTILES),
                "issued": self.issued,
                "client_conventions": self.conventions_info,
                "completion_samples": self.samples,
            }
        )
        if self.schedule is not None:
            out["schedule"] = {
                "claimed": self.schedule.claimed,
                "exhausted": self.schedule.exhausted,
                "max_lateness_s": self.schedule.max_lateness,
                "mean_rate_per_s": opts.arrivals.mean_rate,
                "expected_arrivals": opts.arrivals.expected_count(),
            }
        return out
