"""The load generator's settings: Locust command-line options, also read from locust.conf and from
LOCUST_* environment variables (Locust's own configuration chain), validated in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..core import durations
from .schedule import ArrivalProcess
from .shapes import SHAPES, HighConcurrencyPlan, ProductionDayPlan
from .workloads import WORKLOADS, WorkloadSpec


class OptionError(ValueError):
    """A setting the user has to fix; the message names the option."""


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _json_object(text, fail) -> dict:
    if isinstance(text, dict):
        return text
    raw = str(text or "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        fail("extra-body", f"not JSON ({exc}): {raw[:80]!r}")
    if not isinstance(value, dict):
        fail("extra-body", f"must be a JSON object, not {type(value).__name__}: {raw[:80]!r}")
    reserved = sorted({"stream", "model", "prompt", "messages"} & set(value))
    if reserved:
        fail("extra-body", f"may not set {', '.join(reserved)} (the load generator sends those)")
    return value


def parse_duration(text: str | float) -> float:
    """Seconds from '90', '1.5', '45s', '10m', '2h30m', '3d' (a bare number is seconds)."""
    return durations.parse_duration(text, bare_seconds=True)


# (flag, env var, default, type, help); Locust's parser also takes these from locust.conf (without
# the leading dashes) and shows them in the web UI's start form.
OPTIONS = [
    ("--model", "LOCUST_MODEL", "", str, "served model name (default: the first model the server lists at /v1/models)"),
    ("--api-key", "LOCUST_API_KEY", "", str, "bearer token for servers started with --api-key"),
    ("--api", "LOCUST_API", "chat", str, "chat (/v1/chat/completions) or completions (/v1/completions)"),
    (
        "--load-shape",
        "LOCUST_LOAD_SHAPE",
        "production-day",
        str,
        "production-day (open-loop Poisson), high-concurrency (step ramp to --streams) or steady (-u/-r)",
    ),
    # production day
    ("--requests-per-day", "LOCUST_REQUESTS_PER_DAY", 1000.0, float, "production day: mean requests per simulated day"),
    (
        "--time-compression",
        "LOCUST_TIME_COMPRESSION",
        1.0,
        float,
        "production day: simulated seconds per real second (720 runs a day in 2 minutes)",
    ),
    (
        "--day-length",
        "LOCUST_DAY_LENGTH",
        "24h",
        str,
        "production day: simulated span of the schedule (24h, 72h, ...); the run lasts this / compression",
    ),
    (
        "--diurnal-amplitude",
        "LOCUST_DIURNAL_AMPLITUDE",
        0.0,
        float,
        "production day: 0 = flat rate; 0.6 = the rate swings +-60%% around the mean over a day",
    ),
    ("--diurnal-peak-hour", "LOCUST_DIURNAL_PEAK_HOUR", 14.0, float, "production day: simulated hour of peak traffic"),
    ("--day-start-hour", "LOCUST_DAY_START_HOUR", 0.0, float, "production day: simulated hour the schedule starts at"),
    (
        "--max-in-flight",
        "LOCUST_MAX_IN_FLIGHT",
        64,
        int,
        "production day: users sending scheduled requests (requests in flight at most); when all are "
        "busy the client falls behind schedule and reports it",
    ),
    (
        "--drain-timeout",
        "LOCUST_DRAIN_TIMEOUT",
        "120s",
        str,
        "production day: how long in-flight requests may finish after the last arrival",
    ),
    # high concurrency
    ("--streams", "LOCUST_STREAMS", 256, int, "high concurrency: concurrent streams to ramp to and hold"),
    ("--ramp-step", "LOCUST_RAMP_STEP", 32, int, "high concurrency: streams added (and removed) per step"),
    ("--step-duration", "LOCUST_STEP_DURATION", "10s", str, "high concurrency: time between steps"),
    ("--hold", "LOCUST_HOLD", "60s", str, "high concurrency: time at --streams before the ramp-down"),
    # prompts
    (
        "--prompt-scale",
        "LOCUST_PROMPT_SCALE",
        "1",
        str,
        "multiply prompt lengths: one factor for every workload, or per workload (code=0.1 for a model "
        "with a 2048-token context; code=0.1,creative=1)",
    ),
    (
        "--output-scale",
        "LOCUST_OUTPUT_SCALE",
        "1",
        str,
        "multiply output lengths (max_tokens), for every workload or per workload like --prompt-scale",
    ),
    (
        "--max-output-tokens",
        "LOCUST_MAX_OUTPUT_TOKENS",
        0,
        int,
        "cap on max_tokens per request (0: half the served model's max_model_len)",
    ),
    ("--corpus-size", "LOCUST_CORPUS_SIZE", 200, int, "prompts generated per workload (then used in turn)"),
    (
        "--prompts-file",
        "LOCUST_PROMPTS_FILE",
        "",
        str,
        "JSONL prompts instead of the generated corpora (vLLM custom-dataset rows: prompt, output_tokens)",
    ),
    (
        "--tokenizer",
        "LOCUST_TOKENIZER",
        "server",
        str,
        "how prompt lengths are measured: server (its /tokenize), a Hugging Face model folder, or estimate",
    ),
    ("--seed", "LOCUST_SEED", 0, int, "seed of the corpora and the arrival schedule"),
    (
        "--client-profile",
        "LOCUST_CLIENT_PROFILE",
        "auto",
        str,
        "serving profile whose client conventions every request follows (newline token, stop, special "
        "tokens): a name in serving/profiles/, auto (the profile serving --model) or none",
    ),
    (
        "--extra-body",
        "LOCUST_EXTRA_BODY",
        "",
        str,
        "JSON object merged into every request body, after the client conventions (like vLLM's benchmark "
        "client's --extra-body), e.g. '{\"temperature\": 0}'",
    ),
    (
        "--ignore-eos",
        "LOCUST_IGNORE_EOS",
        True,
        _bool,
        "ask vLLM for exactly max_tokens (so output lengths follow the distribution); false lets the model stop",
    ),
    (
        "--request-timeout",
        "LOCUST_REQUEST_TIMEOUT",
        600.0,
        float,
        "seconds without any data before a request fails (response_timeout / stream_timeout)",
    ),
    ("--connect-timeout", "LOCUST_CONNECT_TIMEOUT", 10.0, float, "seconds to open a connection"),
    ("--request-limit", "LOCUST_REQUEST_LIMIT", 0, int, "stop after this many requests in total (0: no limit)"),
    # reports
    ("--request-log", "LOCUST_REQUEST_LOG", "", str, "CSV file with one row per request (full precision)"),
    ("--loadgen-summary", "LOCUST_LOADGEN_SUMMARY", "", str, "JSON file with the run's full-precision summary"),
    (
        "--metrics-port",
        "LOCUST_EXPORTER_PORT",
        None,
        int,
        "Prometheus port of the master (default: locust_exporter in config/stack.yaml; 0: any free port; -1: off)",
    ),
    (
        "--prometheus-sd-dir",
        "LOCUST_PROMETHEUS_SD_DIR",
        "auto",
        str,
        "folder Prometheus' loadgen job watches (auto: the running native stack's; '' for none)",
    ),
    (
        "--prometheus-sd-host",
        "LOCUST_PROMETHEUS_SD_HOST",
        "",
        str,
        "host Prometheus should scrape (default: the exporter's bind address; host.docker.internal for compose)",
    ),
]


# Shown in the web UI's start form (the rest stay in locust.conf, the environment or the command line).
WEB_UI_OPTIONS = {
    "--model",
    "--api-key",
    "--api",
    "--load-shape",
    "--requests-per-day",
    "--time-compression",
    "--day-length",
    "--diurnal-amplitude",
    "--max-in-flight",
    "--streams",
    "--ramp-step",
    "--step-duration",
    "--hold",
    "--prompt-scale",
    "--request-limit",
}


def add_options(parser) -> None:
    for flag, env, default, kind, help_text in OPTIONS:
        parser.add_argument(
            flag,
            env_var=env,
            default=default,
            type=kind,
            help=help_text,
            include_in_web_ui=flag in WEB_UI_OPTIONS,
            is_secret=flag == "--api-key",
        )


def dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class LoadgenOptions:
    model: str
    api_key: str
    api: str
    shape: str
    arrivals: ArrivalProcess
    production_day: ProductionDayPlan
    high_concurrency: HighConcurrencyPlan
    workloads: dict
    prompt_scales: dict
    output_scales: dict
    max_output_tokens: int
    corpus_size: int
    prompts_file: str
    tokenizer: str
    seed: int
    client_profile: str
    extra_body: dict
    ignore_eos: bool
    request_timeout: float
    connect_timeout: float
    request_limit: int
    request_log: str
    summary_file: str
    metrics_port: int | None
    sd_dir: str
    sd_host: str

    @classmethod
    def from_parsed(cls, parsed) -> LoadgenOptions:
        """Validated settings from Locust's parsed options; OptionError names what is wrong."""
        get = {dest(flag): getattr(parsed, dest(flag), default) for flag, _, default, _, _ in OPTIONS}

        def fail(flag: str, why: str):
            raise OptionError(f"--{flag}: {why}")

        def num(flag: str, kind=float):
            try:
                return kind(get[dest("--" + flag)])
            except (TypeError, ValueError):
                fail(flag, f"not a number: {get[dest('--' + flag)]!r}")

        def span(flag: str) -> float:
            try:
                return parse_duration(get[dest("--" + flag)])
            except ValueError as exc:
                fail(flag, str(exc))

        api = str(get["api"]).strip()
        if api not in ("chat", "completions"):
            fail("api", f"{api!r} is neither chat nor completions")
        shape = str(get["load_shape"]).strip()
        if shape not in SHAPES:
            fail("load-shape", f"{shape!r} is not one of {', '.join(SHAPES)}")
        client_profile = str(get["client_profile"] or "auto").strip()
        if client_profile not in ("auto", "none"):
            from ..core.profiles import available

            if client_profile not in available():
                fail("client-profile", f"{client_profile!r} is not auto, none or one of {', '.join(available())}")
        extra_body = _json_object(get["extra_body"], fail)
        for flag in ("requests-per-day", "time-compression", "request-timeout", "connect-timeout"):
            if not num(flag) > 0:
                fail(flag, "must be greater than 0")
        for flag in ("max-in-flight", "streams", "ramp-step", "corpus-size"):
            if num(flag, int) < 1:
                fail(flag, "must be at least 1")
        for flag in ("request-limit", "max-output-tokens"):
            if num(flag, int) < 0:
                fail(flag, "must be 0 or more")
        amplitude = num("diurnal-amplitude")
        if not 0 <= amplitude <= 1:
            fail("diurnal-amplitude", "must be within 0..1")
        day = span("day-length")
        if day <= 0:
            fail("day-length", "must be longer than 0")
        compression = num("time-compression")
        arrivals = ArrivalProcess(
            requests_per_day=num("requests-per-day"),
            compression=compression,
            duration_s=day,
            diurnal_amplitude=amplitude,
            peak_hour=num("diurnal-peak-hour"),
            start_hour=num("day-start-hour"),
            seed=num("seed", int),
        )
        try:
            hc = HighConcurrencyPlan(
                streams=num("streams", int),
                step=num("ramp-step", int),
                step_s=span("step-duration"),
                hold_s=span("hold"),
            )
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        pd = ProductionDayPlan(
            pool=num("max-in-flight", int), real_duration_s=arrivals.real_duration_s, drain_s=span("drain-timeout")
        )
        port = get["metrics_port"]
        if port is not None:
            port = num("metrics-port", int)
            if port < -1 or port > 65535:
                fail("metrics-port", "must be -1 (off), 0 (any free port) or a port number")
        return cls(
            model=str(get["model"] or "").strip(),
            api_key=str(get["api_key"] or ""),
            api=api,
            shape=shape,
            arrivals=arrivals,
            production_day=pd,
            high_concurrency=hc,
            workloads=dict(WORKLOADS),
            prompt_scales=_scales(get["prompt_scale"], fail, "prompt-scale"),
            output_scales=_scales(get["output_scale"], fail, "output-scale"),
            max_output_tokens=num("max-output-tokens", int),
            corpus_size=num("corpus-size", int),
            prompts_file=str(get["prompts_file"] or "").strip(),
            tokenizer=str(get["tokenizer"] or "server").strip(),
            seed=num("seed", int),
            client_profile=client_profile,
            extra_body=extra_body,
            ignore_eos=_bool(get["ignore_eos"]),
            request_timeout=num("request-timeout"),
            connect_timeout=num("connect-timeout"),
            request_limit=num("request-limit", int),
            request_log=str(get["request_log"] or "").strip(),
            summary_file=str(get["loadgen_summary"] or "").strip(),
            metrics_port=port,
            sd_dir=str(get["prometheus_sd_dir"] if get["prometheus_sd_dir"] is not None else "auto").strip(),
            sd_host=str(get["prometheus_sd_host"] or "").strip(),
        )

    def workload_spec(self, name: str) -> WorkloadSpec:
        return self.workloads[name]

    def prompt_scale(self, workload: str) -> float:
        return self.prompt_scales.get(workload, self.prompt_scales.get("*", 1.0))

    def output_scale(self, workload: str) -> float:
        return self.output_scales.get(workload, self.output_scales.get("*", 1.0))

    def describe_shape(self) -> str:
        if self.shape == "production-day":
            a = self.arrivals
            text = (
                f"production day: {a.requests_per_day:g} requests/day, Poisson, compression x{a.compression:g} "
                f"-> {a.mean_rate:.4g} requests/s for {a.real_duration_s:.0f} s "
                f"(~{a.expected_count():.0f} requests), up to {self.production_day.pool} in flight"
            )
            if a.diurnal_amplitude:
                text += f", diurnal +-{a.diurnal_amplitude:.0%} peaking at {a.peak_hour:g}h"
            return text
        if self.shape == "high-concurrency":
            h = self.high_concurrency
            return (
                f"high concurrency: +{h.step} streams every {h.step_s:g} s to {h.streams}, hold {h.hold_s:g} s, "
                f"then down ({h.duration_s:.0f} s)"
            )
        return "steady: -u users, closed loop (-r spawn rate, -t run time)"


def _scales(value, fail, flag: str) -> dict:
    """'0.1' -> every workload; 'code=0.1,creative=1' -> per workload."""
    scales = {}
    for part in str(value if value is not None else "1").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, factor = part.rpartition("=")
        name = name.strip() or "*"
        if name != "*" and name not in WORKLOADS:
            fail(flag, f"unknown workload {name!r} (workloads: {', '.join(WORKLOADS)})")
        try:
            scales[name] = float(factor)
        except ValueError:
            fail(flag, f"not a number: {factor!r}")
        if not scales[name] > 0:
            fail(flag, "must be greater than 0")
    return scales


def describe() -> str:
    """Every option with its environment variable and default (`python -m leakwatch.loadgen.options`;
    Locust's own --help does not list a locustfile's options)."""
    lines = []
    for flag, env, default, _, help_text in OPTIONS:
        shown = "stack.yaml's locust_exporter port" if flag == "--metrics-port" else default
        shown = "none" if shown in ("", None) else shown
        lines.append(f"{flag} (env {env}, default {shown!s})\n    {help_text.replace('%%', '%')}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
