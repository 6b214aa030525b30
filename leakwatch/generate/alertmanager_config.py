"""alertmanager.yml for both runners: routing by severity, grouping, inhibition, and the healer's
remediation webhook.

The runners differ only in where the healer listens and where its token file lies (compose service
name and secret vs 127.0.0.1 and the state directory), so one function builds both.
"""

from __future__ import annotations

from ..core.settings import StackSettings
from ..core.topology import HEALER_WEBHOOK_PATH, compose_url, native_url
from ..heal import healer_settings
from .compose_healer import SECRET_PATH

# Labels that identify what an alert is about; a critical alert silences its warning twin only when
# all of them match (a label missing on both sides matches).
IDENTITY_LABELS = ["alertname", "instance", "job", "model_name", "gpu", "Hostname", "role", "rank"]


def alertmanager_config(healer_url: str, healer_token_file: str) -> dict:
    return {
        "route": {
            "receiver": "default",
            "group_by": ["alertname", "instance", "model_name"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [
                # The always-firing Watchdog proves the pipeline works: to a dead man's switch only.
                {
                    "matchers": ['alertname="Watchdog"'],
                    "receiver": "heartbeat",
                    "group_wait": "0s",
                    "group_interval": "1m",
                    "repeat_interval": "5m",
                },
                # Alerts meant for automatic remediation go to the healer first and, with
                # `continue`, on to the people below.
                # The same allowlist the healer enforces (config/healer.yaml), so the two cannot disagree.
                {
                    "matchers": healer_settings.load().route_matchers,
                    "receiver": "remediation",
                    "continue": True,
                    "group_by": ["alertname", "instance", "gpu", "role", "rank"],
                    "group_wait": "10s",
                    "group_interval": "1m",
                    "repeat_interval": "30m",
                },
                {"matchers": ['severity="critical"'], "receiver": "page", "repeat_interval": "1h"},
            ],
        },
        # Add your own integrations (Slack, PagerDuty, email) to `default`, `page` and `heartbeat`;
        # secrets belong in files referenced with *_file options, never in this repository.
        "receivers": [
            {"name": "default"},
            {"name": "page"},
            {"name": "heartbeat"},
            {
                "name": "remediation",
                "webhook_configs": [
                    {
                        "url": healer_url,
                        # The healer acts on firing alerts; it needs no resolved notifications.
                        "send_resolved": False,
                        "http_config": {"authorization": {"type": "Bearer", "credentials_file": healer_token_file}},
                    }
                ],
            },
        ],
        "inhibit_rules": [
            # A critical alert silences its warning twin (same name, same target).
            {
                "source_matchers": ['severity="critical"'],
                "target_matchers": ['severity="warning"'],
                "equal": IDENTITY_LABELS,
            },
        ],
    }


def compose_alertmanager_config(settings: StackSettings) -> dict:
    # In compose, Alertmanager reads the healer's bearer token from the secret the healer reads it from.
    return alertmanager_config(compose_url(settings, "healer") + HEALER_WEBHOOK_PATH, SECRET_PATH)


def native_alertmanager_config(settings: StackSettings, healer_token_file: str) -> dict:
    return alertmanager_config(native_url(settings, "healer") + HEALER_WEBHOOK_PATH, healer_token_file)
