"""The glue between Locust and the load generator: options, the users' base class, the load shape,
and `use()`, with which a locustfile opts into the listeners it wants (leakwatch.loadgen.listeners).

Locustfiles in loadtest/ import `StreamingUser` and `LeakwatchShape` from here and call
`use(*listeners.ALL)`. Locust's events are process-global, so importing this module registers its
own few listeners once per process, however many locustfiles import it; `use` is idempotent too.
Every Locust process has one `LoadgenRun` (leakwatch.loadgen.run_state): workers (and a local runner)
send requests and record them; the master (or the local runner) merges, reports and exports.
"""

from __future__ import annotations

import logging

from locust import LoadTestShape, User, constant, events, task
from locust.user.task import LOCUST_STATE_STOPPING, LOCUST_STATE_WAITING

from .options import OptionError, add_options
from .run_state import LoadgenRun, default_host

log = logging.getLogger("leakwatch.loadgen")

_run: LoadgenRun | None = None
_chosen: list[type] = []


def use(*listener_classes: type) -> None:
    """Opt into listeners (classes taking the LoadgenRun); each is created once per Locust process."""
    for cls in listener_classes:
        if cls not in _chosen:
            _chosen.append(cls)


def current_run() -> LoadgenRun:
    if _run is None:
        raise RuntimeError("the leakwatch load generator runs inside Locust (locust -f loadtest/)")
    return _run


class StreamingUser(User):
    """One client holding one connection; each task is one streaming request.

    Subclasses set `workload` (a key of leakwatch.loadgen.workloads.WORKLOADS). Closed loop under the
    high-concurrency and steady shapes (the next request follows the last one: N users = N streams);
    open loop under the production-day shape (requests go out when the shared schedule says).
    """

    abstract = True
    workload = "creative"
    wait_time = constant(0)
    host = default_host()

    def on_start(self) -> None:
        self.run = current_run()
        self.sender = self.run.sender
        self.stream_client = self.sender.new_client(self.host)

    def on_stop(self) -> None:
        self.stream_client.close()

    def stop(self, force: bool = False) -> bool:
        """A graceful stop never kills: a user between two requests is marked stopping instead.

        Locust kills a user found waiting, but the kill is delivered on a later turn of gevent's
        loop; with no wait between requests the user has by then woken and opened its next stream,
        which the kill then cuts (a few cancelled streams at every ramp-down step). Marked stopping,
        it ends in Locust's own check right after the wait, before the next request."""
        if not force and getattr(self, "_state", None) == LOCUST_STATE_WAITING:  # Locust leaves it untyped
            self._state = LOCUST_STATE_STOPPING
            return False
        return super().stop(force)

    @task
    def stream(self) -> None:
        self.sender.send_one(self)


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


# -- the core's own event listeners (registered once per process); the rest come from use() ---------------


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
    missing = _missing_listeners()
    if missing:
        log.error(
            "the locustfile must use(%s) from leakwatch.loadgen.listeners (it chose: %s)",
            ", ".join(missing),
            ", ".join(c.__name__ for c in _chosen) or "none",
        )
        raise SystemExit(2)
    # Created here, after this module's own test_start listener, so the run is reset before they act.
    run.listeners = [cls(run) for cls in _chosen]


def _missing_listeners() -> list[str]:
    """The listeners nothing can run without: the corpus and the sender (the rest are optional)."""
    from .listeners import CorpusPreparation, Sender

    return [cls.__name__ for cls in (CorpusPreparation, Sender) if not any(issubclass(c, cls) for c in _chosen)]


@events.test_start.add_listener
def _on_test_start(environment, **kwargs):
    run = current_run()
    try:
        run.load_options()
    except OptionError as exc:
        log.error("%s", exc)
        run.options = None  # the listeners skip this test
        environment.runner.quit()
        return
    run.reset()
    log.info("load shape: %s", run.options.describe_shape())


@events.reset_stats.add_listener
def _on_reset_stats(**kwargs):
    if _run is not None:
        _run.stats.reset()
