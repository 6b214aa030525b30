"""The router's admin address: a unix socket (the native runner's) or HAProxy's ipv4@HOST:PORT (the
Helm chart's router, reached through `kubectl port-forward`). tests/integration/test_helm_canary.py
drives a real HAProxy over the TCP one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from leakwatch.canary.router import RouterAdmin, Split, haproxy_config
from leakwatch.core.errors import LeakwatchError

SIDES = {"stable": "http://127.0.0.1:8001", "canary": "http://127.0.0.1:8002"}


def test_a_path_is_a_unix_socket_and_ipv4_at_is_tcp():
    assert (RouterAdmin(Path("/run/router.sock")).family, RouterAdmin("/run/router.sock").address) == (
        socket.AF_UNIX,
        "/run/router.sock",
    )
    admin = RouterAdmin(Path("ipv4@127.0.0.1:8011"))  # argparse hands over a Path
    assert (admin.family, admin.address) == (socket.AF_INET, ("127.0.0.1", 8011))


@pytest.mark.parametrize("text", ["ipv4@127.0.0.1", "ipv4@:8011", "ipv4@127.0.0.1:port"])
def test_a_tcp_admin_address_without_host_and_port_is_refused(text):
    with pytest.raises(LeakwatchError, match="ipv4@HOST:PORT"):
        RouterAdmin(text)


def test_only_a_unix_socket_gets_a_file_mode():
    unix = haproxy_config("127.0.0.1", 8010, SIDES, Split(10), Path("/run/router.sock"))
    tcp = haproxy_config("0.0.0.0", 8010, SIDES, Split(10), Path("ipv4@127.0.0.1:8011"))
    assert "  stats socket /run/router.sock mode 600 level admin\n" in unix
    assert "  stats socket ipv4@127.0.0.1:8011 level admin\n" in tcp
