"""Prometheus exporter for vLLM's memory: per-process host and GPU memory by role (API server,
EngineCore, workers), a post-warm-up baseline, growth per request, retention ratio and the size of
vLLM's own /metrics. Metrics: config/metrics/leakwatch-exporter.csv; guide: docs/exporter.md."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry

from ..core.errors import LeakwatchError
from ..core.profiles import load as load_profile
from ..core.settings import load as load_settings
from ..core.topology import native_url
from .collector import ExporterConfig, VllmMemoryCollector
from .process_tree import DEFAULT_TITLE_PREFIX
from .procfs import ProcFS
from .server import HEALTH_PATH, Sampler, serve
from .vllm_scrape import VllmScraper

log = logging.getLogger("leakwatch.exporter")
MIB = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Port and address defaults come from config/stack.yaml (and their environment overrides) when
    # the command runs, not at import: `leakwatch --help` must not fail on a bad VLLM_PORT.
    where = parser.add_argument_group("where")
    exporter = load_settings().service("leakwatch_exporter")
    where.add_argument(
        "--vllm-url", help="vLLM's base URL (default http://127.0.0.1:<vllm port from config/stack.yaml>)"
    )
    where.add_argument(
        "--vllm-listen-port",
        type=int,
        help="the port vLLM listens on in its own network namespace, when it differs from "
        "the URL's (e.g. a published container port); finds the API server process",
    )
    where.add_argument("--listen-address", help="address to serve /metrics on (default: BIND_ADDRESS or 127.0.0.1)")
    where.add_argument(
        "--port",
        type=int,
        help=f"port to serve /metrics on (default: {exporter.port_env} or {exporter.default_port})",
    )
    where.add_argument("--proc-root", default="/proc", help="procfs to read (default /proc)")
    where.add_argument("--cgroup-root", default="/sys/fs/cgroup", help="cgroup filesystem (default /sys/fs/cgroup)")
    where.add_argument(
        "--state-file",
        type=Path,
        help="keep the restart count and the baseline here across exporter restarts (default: in memory only)",
    )
    where.add_argument(
        "--gpu-devices",
        choices=["all", "vllm"],
        default="all",
        help="GPUs to report: every device NVML shows (default), or only vLLM's: those its container was "
        "given (NVIDIA_VISIBLE_DEVICES in its environment) or a vLLM process runs on (a sidecar on a node "
        "whose other cards belong to other pods)",
    )
    where.add_argument(
        "--profile",
        metavar="NAME",
        help="the serving profile vLLM runs (serving/profiles/NAME.yaml): its model sizes give the memory "
        "breakdown's expected parts (leakwatch_memory_*; docs/exporter.md); without it, no breakdown",
    )
    where.add_argument(
        "--title-prefix",
        default=os.environ.get("VLLM_PROCESS_NAME_PREFIX") or DEFAULT_TITLE_PREFIX,
        help="vLLM's process title prefix (its VLLM_PROCESS_NAME_PREFIX; default VLLM)",
    )

    tuning = parser.add_argument_group("baseline and retention (docs/exporter.md)")
    tuning.add_argument(
        "--warmup-requests",
        type=int,
        default=ExporterConfig.warmup_requests,
        help="requests vLLM must have served since it started before the baseline (default %(default)s)",
    )
    tuning.add_argument(
        "--baseline-idle-wait",
        type=float,
        default=ExporterConfig.baseline_idle_wait_s,
        metavar="SECONDS",
        help="after warm-up, wait at most this long for an idle moment to take the baseline (default %(default)g)",
    )
    tuning.add_argument(
        "--retention-idle",
        type=float,
        default=ExporterConfig.retention_idle_s,
        metavar="SECONDS",
        help="idle time after a burst before its retention ratio is computed (default %(default)g)",
    )
    tuning.add_argument(
        "--retention-min-gain",
        type=float,
        default=ExporterConfig.retention_min_gain_bytes / (1 << 20),
        metavar="MIB",
        help="bursts that gained less memory than this leave the ratio unchanged (default %(default)g MiB)",
    )
    tuning.add_argument(
        "--sample-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="sample this often between scrapes, to see bursts and idle periods (default 5)",
    )
    tuning.add_argument(
        "--smaps-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="re-read USS/PSS (smaps_rollup, the costly read) at most this often per process; "
        "0 = every scrape (default 60)",
    )
    tuning.add_argument(
        "--vllm-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="timeout for vLLM's /metrics and /health (default 5)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise LeakwatchError(message)


def config_from_args(args: argparse.Namespace) -> ExporterConfig:
    settings = load_settings()
    vllm_url = args.vllm_url or native_url(settings, "vllm")
    _check(vllm_url.startswith(("http://", "https://")), f"--vllm-url {vllm_url!r} must start with http:// or https://")
    _check(args.warmup_requests >= 0, f"--warmup-requests {args.warmup_requests} must be >= 0")
    for flag, value in (
        ("--baseline-idle-wait", args.baseline_idle_wait),
        ("--retention-idle", args.retention_idle),
        ("--retention-min-gain", args.retention_min_gain),
        ("--smaps-interval", args.smaps_interval),
    ):
        _check(value >= 0, f"{flag} {value} must be >= 0")
    for flag, value in (("--sample-interval", args.sample_interval), ("--vllm-timeout", args.vllm_timeout)):
        _check(value > 0, f"{flag} {value} must be > 0")
    if args.vllm_listen_port is not None:
        _check(1 <= args.vllm_listen_port <= 65535, f"--vllm-listen-port {args.vllm_listen_port} is outside 1-65535")
    _check(os.path.isdir(args.proc_root), f"--proc-root {args.proc_root} is not a directory")
    if args.state_file is not None:
        _check(
            args.state_file.parent.is_dir(),
            f"--state-file {args.state_file}: {args.state_file.parent} is not a directory",
        )
    config = ExporterConfig(
        vllm_url=vllm_url,
        vllm_listen_port=args.vllm_listen_port,
        title_prefix=args.title_prefix,
        warmup_requests=args.warmup_requests,
        baseline_idle_wait_s=args.baseline_idle_wait,
        retention_idle_s=args.retention_idle,
        retention_min_gain_bytes=int(args.retention_min_gain * MIB),
        smaps_interval_s=args.smaps_interval,
        vllm_timeout_s=args.vllm_timeout,
        state_file=args.state_file,
        gpu_devices=args.gpu_devices,
        profile=load_profile(args.profile) if args.profile else None,  # an unknown name: LeakwatchError
    )
    try:
        _ = config.listen_port  # the property parses --listen and raises ValueError on a bad one
        VllmScraper(vllm_url)
    except ValueError as exc:
        raise LeakwatchError(f"--vllm-url {vllm_url!r}: {exc}") from None
    return config


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = config_from_args(args)
    settings = load_settings()
    address = args.listen_address or settings.bind_address
    port = args.port if args.port is not None else settings.service("leakwatch_exporter").port
    _check(1 <= port <= 65535, f"--port {port} is outside 1-65535")

    collector = VllmMemoryCollector(config, procfs=ProcFS(args.proc_root), cgroup_root=args.cgroup_root)
    registry = CollectorRegistry()  # ours alone: no process_* or python_* collectors of the exporter
    registry.register(collector)
    try:
        server = serve(registry, address, port)
    except OSError as exc:
        raise LeakwatchError(
            f"cannot listen on {address}:{port} ({exc.strerror or exc}); pick another port with --port "
            f"or LEAKWATCH_EXPORTER_PORT"
        ) from None
    sampler = Sampler(collector, args.sample_interval).start()
    gpu = "GPU via NVML" if collector.gpu.available else f"no GPU ({collector.gpu.unavailable_reason})"
    log.info(
        "serving http://%s:%d/metrics (health %s) for vLLM at %s (API server on port %d); %s",
        address,
        port,
        HEALTH_PATH,
        config.vllm_url,
        config.listen_port,
        gpu,
    )

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    sampler.stop()
    server.shutdown()
    log.info("stopped")
    return 0
