"""Receives Alertmanager's webhook and, for firing alerts labelled for remediation, drains and
restarts vLLM (supervisord natively, the Docker API through a socket proxy in compose), with a
cooldown, a limit per hour and one action per firing episode. Serves its metrics on /metrics.

Needs a bearer token ($LEAKWATCH_HEALER_TOKEN or --token-file) and refuses to start without one.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from ..errors import LeakwatchError
from ..native.layout import StateLayout
from ..settings import load as load_settings
from . import config as heal_config
from . import token as heal_token
from .metrics import HealerMetrics
from .policy import Policy
from .restarters import DockerRestarter, SupervisorRestarter
from .server import WEBHOOK_PATH, Healer, serve
from .vllm_probe import VllmProbe

VLLM_CONTAINER_LABEL = "io.leakwatch.role=vllm"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    settings = load_settings()
    parser.add_argument("--listen", default=None, metavar="ADDRESS",
                        help="address to bind (default: $BIND_ADDRESS or 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None,
                        help=f"port (default: ${settings.service('healer').port_env} or "
                             f"{settings.service('healer').default_port})")
    parser.add_argument("--token-file", default=None, metavar="FILE",
                        help=f"file holding the bearer token (default: ${heal_token.TOKEN_ENV})")
    parser.add_argument("--restarter", choices=["supervisor", "docker"], default="supervisor",
                        help="how to restart vLLM: supervisord natively (default) or the Docker API")
    parser.add_argument("--supervisor-socket", default=None, metavar="PATH",
                        help="supervisord's unix socket (default: the native stack's)")
    parser.add_argument("--program", default="vllm", help="supervisord program to restart (default vllm)")
    parser.add_argument("--docker-url", default="http://docker-socket-proxy:2375", metavar="URL",
                        help="Docker API through the socket proxy (default http://docker-socket-proxy:2375)")
    parser.add_argument("--container-label", default=VLLM_CONTAINER_LABEL, metavar="KEY=VALUE",
                        help=f"label of the vLLM container (default {VLLM_CONTAINER_LABEL})")
    parser.add_argument("--compose-project", default="leakwatch", metavar="NAME",
                        help="compose project whose vLLM container is restarted (default leakwatch)")
    parser.add_argument("--vllm-url", default=None, metavar="URL",
                        help="vLLM's base URL for /metrics and /health (default: the stack's vLLM)")
    parser.add_argument("--state-file", default=None, metavar="FILE",
                        help="where cooldown and handled alerts persist across healer restarts")
    parser.add_argument("--config", default=str(heal_config.CONFIG_FILE), metavar="FILE",
                        help="policy file (default config/healer.yaml)")


def build_healer(args: argparse.Namespace) -> tuple[Healer, str, int]:
    settings = load_settings()
    token = heal_token.load(args.token_file)
    cfg = heal_config.load(Path(args.config))
    host = args.listen or settings.bind_address
    port = args.port or settings.service("healer").port
    vllm_url = args.vllm_url or f"http://127.0.0.1:{settings.service('vllm').port}"
    if args.restarter == "docker":
        stop_timeout = int(settings.service("vllm").extra["shutdown_timeout_s"]) + 15
        restarter = DockerRestarter(args.docker_url, args.container_label, stop_timeout, args.compose_project)
    else:
        restarter = SupervisorRestarter(Path(args.supervisor_socket or StateLayout.current().supervisor_socket),
                                        args.program)
    state_file = Path(args.state_file) if args.state_file else None
    if state_file:
        state_file.parent.mkdir(parents=True, exist_ok=True)
    healer = Healer(cfg, token, Policy(cfg, state_file), restarter, VllmProbe(vllm_url), HealerMetrics())
    return healer, host, port


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    healer, host, port = build_healer(args)
    try:
        healer.restarter.check()
    except LeakwatchError as exc:
        logging.getLogger("leakwatch.heal").warning("restart target not reachable yet: %s", exc)
    try:
        server = serve(healer, host, port)
    except OSError as exc:
        raise LeakwatchError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    # shutdown() waits for serve_forever() to return, so it must run outside the signal handler's thread.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    logging.getLogger("leakwatch.heal").info(
        "healer listening on http://%s:%d%s (restarts %s; label %s=%s, cooldown %.0fs, at most %d/h)", host, port,
        WEBHOOK_PATH, healer.restarter.describe(), healer.cfg.label_name, healer.cfg.label_value,
        healer.cfg.cooldown_s, healer.cfg.max_restarts_per_hour)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
    return 0
