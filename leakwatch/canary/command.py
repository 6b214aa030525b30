"""The canary router: write its HAProxy config, or read and change the split of a running one.

    leakwatch canary-router config --stable URL --canary URL [--canary-percent 10] [--admin-socket P]
    leakwatch canary-router set --admin-socket P --canary-percent 25
    leakwatch canary-router show --admin-socket P

`set` applies to the next request on either side and drops none in flight (docs/canary.md). The
admin socket is a unix socket's path, or ipv4@HOST:PORT (the Helm chart's router through
`kubectl port-forward`, docs/kubernetes.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core import settings as stack_settings
from ..core.errors import LeakwatchError
from .router import RouterAdmin, Split, default_split, haproxy_config

HEADER = "haproxy.cfg for the leakwatch canary router (`leakwatch canary-router config`)."


def _percent(text: str) -> Split:
    try:
        return Split.parse(text)
    except LeakwatchError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    config = sub.add_parser("config", help="print haproxy.cfg for a stable and a canary vLLM")
    config.add_argument("--stable", required=True, metavar="URL", help="the stable vLLM (http://host:port)")
    config.add_argument("--canary", required=True, metavar="URL", help="the canary vLLM")
    config.add_argument(
        "--canary-percent", type=_percent, default=None, help="share of requests (default: config/stack.yaml)"
    )
    config.add_argument("--port", type=int, default=None, help="listen port (default: the canary_router service's)")
    config.add_argument("--admin-socket", type=Path, default=None, help="HAProxy's admin socket, for `set` and `show`")
    for name, text in (("set", "change the split of a running router"), ("show", "weights and requests per side")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--admin-socket", type=Path, required=True, help="a unix socket's path, or ipv4@HOST:PORT")
        if name == "set":
            cmd.add_argument("--canary-percent", type=_percent, required=True)


def run(args) -> int:
    if args.action == "config":
        settings = stack_settings.load()
        service = settings.service("canary_router")
        sys.stdout.write(
            haproxy_config(
                settings.bind_address,
                args.port or service.port,
                {"stable": args.stable, "canary": args.canary},
                args.canary_percent or default_split(settings),
                args.admin_socket,
                HEADER,
            )
        )
        return 0
    admin = RouterAdmin(args.admin_socket)
    if args.action == "set":
        admin.set_split(args.canary_percent)
    print(json.dumps({"weights": admin.split(), "requests": admin.served()}))
    return 0
