"""Points Alertmanager's remediation webhook at a given healer and token file.

alertmanager/alertmanager.yml names the healer by its compose service (http://healer:<port>) and the
token by its path in the container; the native runner and the drill rewrite both for their stack.
"""

from __future__ import annotations

import copy
from urllib.parse import urlparse

from ..core.topology import COMPOSE_HOSTS

HEALER_HOST = COMPOSE_HOSTS["healer"]


def healer_webhooks(doc: dict) -> list[dict]:
    """Every webhook_configs entry that targets the healer service."""
    hooks = []
    for receiver in doc.get("receivers") or []:
        for hook in receiver.get("webhook_configs") or []:
            if urlparse(str(hook.get("url", ""))).hostname == HEALER_HOST:
                hooks.append(hook)
    return hooks


def localize(doc: dict, healer_base_url: str, token_file: str) -> dict:
    out = copy.deepcopy(doc)
    for hook in healer_webhooks(out):
        path = urlparse(hook["url"]).path or "/"
        hook["url"] = healer_base_url.rstrip("/") + path
        http_config = hook.setdefault("http_config", {})
        http_config["authorization"] = {"type": "Bearer", "credentials_file": token_file}
    return out
