"""Receives Alertmanager's webhook and, for firing alerts labelled for remediation, drains and
restarts vLLM (supervisord natively, the Docker API through a socket proxy in compose), with a
cooldown, a limit per hour and one action per firing episode. Serves its metrics on /metrics.

Needs a bearer token ($LEAKWATCH_HEALER_TOKEN or --token-file) and refuses to start without one.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
from pathlib import Path

from ..core.errors import LeakwatchError
from ..core.settings import load as load_settings
from ..core.state_layout import StateLayout
from ..core.topology import (
    HEALER_WEBHOOK_PATH,
    VLLM_CONTAINER_LABEL,
    VLLM_PROGRAM,
    compose_url,
    docker_restart_wait_s,
    native_url,
)
from . import healer_settings, token as heal_token
from .decisions import Healer
from .exporter_keeper import ExporterKeeper
from .healer_metrics import HealerMetrics
from .http_server import HealerServer
from .policy import Policy
from .restarters import DockerRestarter, SupervisorRestarter
from .vllm_probe import VllmProbe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    settings = load_settings()
    parser.add_argument(
        "--listen", default=None, metavar="ADDRESS", help="address to bind (default: $BIND_ADDRESS or 127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port (default: ${settings.service('healer').port_env} or {settings.service('healer').default_port})",
    )
    parser.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help=f"file holding the bearer token (default: ${heal_token.TOKEN_ENV})",
    )
    parser.add_argument(
        "--restarter",
        choices=["supervisor", "docker", "kubernetes"],
        default="supervisor",
        help="how to restart vLLM: supervisord natively (default), the Docker API, or "
        "evicting the alert's pod (Kubernetes)",
    )
    parser.add_argument(
        "--supervisor-socket",
        default=None,
        metavar="PATH",
        help="supervisord's unix socket (default: the native stack's)",
    )
    parser.add_argument(
        "--program", default=VLLM_PROGRAM, help=f"supervisord program to restart (default {VLLM_PROGRAM})"
    )
    parser.add_argument(
        "--docker-url",
        default=compose_url(load_settings(), "docker_socket_proxy"),
        metavar="URL",
        help="Docker API through the socket proxy (default: the compose service, %(default)s)",
    )
    parser.add_argument(
        "--container-label",
        default=VLLM_CONTAINER_LABEL,
        metavar="KEY=VALUE",
        help=f"label of the vLLM container (default {VLLM_CONTAINER_LABEL})",
    )
    parser.add_argument(
        "--compose-project",
        default="leakwatch",
        metavar="NAME",
        help="compose project whose vLLM container is restarted (default leakwatch)",
    )
    parser.add_argument(
        "--exporter-check-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="docker restarter: how often to start the exporter beside vLLM again if it stopped with "
        "vLLM's PID namespace (vLLM restarted without the healer: an OOM kill, a crash); 0 turns it off "
        "(default 10)",
    )
    parser.add_argument(
        "--vllm-url",
        default=None,
        metavar="URL",
        help="vLLM's base URL for /metrics and /health (default: the stack's vLLM)",
    )
    parser.add_argument(
        "--state-file",
        default=None,
        metavar="FILE",
        help="where cooldown, restarts of the last hour and handled alerts persist across healer "
        "restarts (both runners pass one; without it a restarted healer forgets its cap)",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="JOB=INSTANCE",
        help="an instance of a job in config/healer.yaml remediable.jobs this healer is responsible "
        "for (repeatable); alerts of that job about other instances are refused",
    )
    parser.add_argument(
        "--remediable-job",
        action="append",
        default=[],
        metavar="JOB",
        help="replaces config/healer.yaml remediable.jobs (repeatable): for deployments whose scrape "
        "jobs have other names, e.g. the Helm chart's",
    )
    parser.add_argument(
        "--config",
        default=str(healer_settings.CONFIG_FILE),
        metavar="FILE",
        help="policy file (default config/healer.yaml)",
    )
    kube = parser.add_argument_group("kubernetes restarter (docs/kubernetes.md)")
    kube.add_argument("--namespace", default=None, help="namespace of the vLLM pods (the only one the healer acts in)")
    kube.add_argument(
        "--model-label",
        default=None,
        metavar="KEY",
        help="pod label every vLLM pod carries; other pods are never evicted",
    )
    kube.add_argument(
        "--pod-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label every pod of this release carries (repeatable; the chart passes its instance and "
        "component labels): a pod without all of them is another release's and is never evicted",
    )
    kube.add_argument(
        "--eviction-retries",
        type=int,
        default=5,
        help="retries of an eviction a PodDisruptionBudget refuses (429), default 5",
    )
    kube.add_argument(
        "--eviction-retry-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between those retries (default 30)",
    )


def build_healer(args: argparse.Namespace) -> tuple[Healer, str, int]:
    settings = load_settings()
    token = heal_token.load(args.token_file)
    cfg = healer_settings.load(Path(args.config))
    if args.remediable_job:
        cfg = dataclasses.replace(cfg, jobs=tuple(args.remediable_job))
    cfg = healer_settings.with_targets(cfg, args.target)
    host = args.listen or settings.bind_address
    port = args.port or settings.service("healer").port
    vllm_url = args.vllm_url or native_url(settings, "vllm")
    probe = None
    if args.restarter == "kubernetes":
        restarter, probe = _kubernetes_restarter(args)
    elif args.restarter == "docker":
        restarter = DockerRestarter(
            args.docker_url, args.container_label, docker_restart_wait_s(settings), args.compose_project
        )
    else:
        # supervisord waits stopwaitsecs (vLLM's shutdown timeout + margin) before SIGKILL.
        stop_timeout = int(settings.service("vllm").shutdown_timeout_s) + 30
        restarter = SupervisorRestarter(
            Path(args.supervisor_socket or StateLayout.current().supervisor_socket),
            args.program,
            stop_timeout_s=stop_timeout,
        )
    state_file = Path(args.state_file) if args.state_file else None
    if state_file:
        state_file.parent.mkdir(parents=True, exist_ok=True)
    else:
        logging.getLogger("leakwatch.heal").warning(
            "WARNING: no --state-file: the cooldown, the cap of %d restarts per hour and the handled episodes "
            "live in memory only and are forgotten when the healer restarts (a restart storm across healer "
            "restarts); both runners pass one",
            cfg.max_restarts_per_hour,
        )
    metrics = HealerMetrics()
    if probe is not None:
        restarter.on_refused = _refusal_counter(metrics)
    healer = Healer(cfg, token, Policy(cfg, state_file), restarter, probe or VllmProbe(vllm_url), metrics)
    return healer, host, port


def _kubernetes_restarter(args: argparse.Namespace):
    from .kubernetes_restarter import KubernetesRestarter

    if not args.namespace or not args.model_label:
        raise LeakwatchError("--restarter kubernetes needs --namespace and --model-label")
    pod_labels = {}
    for spec in args.pod_label:
        key, sep, value = spec.partition("=")
        if not sep or not key or not value:
            raise LeakwatchError(f"--pod-label {spec!r}: expected KEY=VALUE, e.g. app.kubernetes.io/instance=leakwatch")
        pod_labels[key] = value
    restarter = KubernetesRestarter.in_cluster(
        args.namespace,
        args.model_label,
        pod_labels=pod_labels,
        retries=args.eviction_retries,
        retry_interval_s=args.eviction_retry_interval,
    )
    return restarter, restarter


def _refusal_counter(metrics: HealerMetrics):
    from prometheus_client import Counter

    from ..core.metric_catalogue import load_csv
    from .kubernetes_restarter import EVICTION_REFUSALS_METRIC, METRICS_CSV

    row = load_csv(METRICS_CSV)[EVICTION_REFUSALS_METRIC]
    counter = Counter(
        EVICTION_REFUSALS_METRIC.removesuffix("_total"), row["help"], row["labels"], registry=metrics.registry
    )
    return counter.inc


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    if args.exporter_check_interval < 0:
        raise LeakwatchError(f"--exporter-check-interval must be >= 0 seconds, not {args.exporter_check_interval:g}")
    healer, host, port = build_healer(args)
    keeper = None
    if isinstance(healer.restarter, DockerRestarter) and args.exporter_check_interval > 0:
        keeper = ExporterKeeper(healer.restarter, args.exporter_check_interval, healer.metrics.exporter_starts.inc)
    try:
        healer.restarter.check()
    except LeakwatchError as exc:
        logging.getLogger("leakwatch.heal").warning("restart target not reachable yet: %s", exc)
    try:
        server = HealerServer(healer, host, port)
    except OSError as exc:
        raise LeakwatchError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    # shutdown() waits for serve_forever() to return, so it must run outside the signal handler's thread.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    logging.getLogger("leakwatch.heal").info(
        "healer listening on http://%s:%d%s (restarts %s; label %s=%s, cooldown %.0fs, at most %d/h)",
        host,
        port,
        HEALER_WEBHOOK_PATH,
        healer.restarter.describe(),
        healer.cfg.label_name,
        healer.cfg.label_value,
        healer.cfg.cooldown_s,
        healer.cfg.max_restarts_per_hour,
    )
    if keeper:
        keeper.start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        if keeper:
            keeper.stop()
        server.server_close()
    return 0
