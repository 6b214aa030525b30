"""What the drill runs with: its settings (config/drill.yaml), the production rules with every window
divided by the time compression, and the production Alertmanager config with its timings divided too."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..core import config_schema
from ..core.config_schema import (
    INT,
    NUM,
    Key,
    Schema,
    at_least,
    duration_key,
    fraction,
    non_negative,
    positive,
    rate_key,
    size_key,
)
from ..core.durations import parse_duration as alertmanager_duration
from ..core.errors import LeakwatchError
from ..core.paths import CONFIG_DIR
from ..core.settings import StackSettings
from ..heal.alertmanager import healer_webhooks

CONFIG_FILE = CONFIG_DIR / "drill.yaml"
TIMINGS = ("group_wait", "group_interval", "repeat_interval")
# The leak alert the drill waits for; its critical twin carries remediate="true".
LEAK_ALERT = "HostMemoryLeak"


@dataclass(frozen=True)
class DrillConfig:
    time_compression: float
    scrape_interval_s: float
    requests_per_day: float
    control_span_s: float
    leak_span_s: float
    warmup_requests: int
    bytes_per_request: int
    cgroup_headroom_bytes: int
    max_estimate_error: float
    baseline_tolerance_bytes: int
    storm_watch_s: float
    fast_leak: dict  # the fast_leak section as read (bytes, seconds, requests a day), for as_fast_leak()
    canary: dict  # the canary section as read, for as_canary()

    def wall(self, production_s: float) -> float:
        return production_s / self.time_compression

    def as_fast_leak(self) -> DrillConfig:
        """The settings of the fast-leak variant: its compression, traffic, leak and headroom."""
        fast = self.fast_leak
        return dataclasses.replace(
            self,
            time_compression=float(fast["time_compression"]),
            requests_per_day=fast["request_rate"],
            bytes_per_request=fast["kept_per_request"],
            cgroup_headroom_bytes=fast["cgroup_headroom"],
            control_span_s=0.0,
            leak_span_s=fast["leak_span"],
        )

    def as_canary(self) -> DrillConfig:
        """The settings of the canary drill: its compression, traffic and leak; no control phase."""
        canary = self.canary
        return dataclasses.replace(
            self,
            time_compression=float(canary["time_compression"]),
            requests_per_day=canary["request_rate"],
            bytes_per_request=canary["kept_per_request"],
            control_span_s=0.0,
            leak_span_s=canary["span"],
        )


DAY = 86400.0
# Requests a day (1000/d), and a size the injector allocates or a limit (whole bytes, above zero).
REQUEST_RATE = rate_key(size=False, per=DAY, check=positive)
BYTES = size_key(positive, whole=True)

SCHEMA: Schema = {
    "time_compression": Key(NUM, check=at_least(1)),
    "scrape_interval": duration_key(),
    "traffic": {
        "request_rate": REQUEST_RATE,
        "control_span": duration_key(),
        "leak_span": duration_key(),
        "warmup_requests": Key(INT, check=non_negative),
    },
    "leak": {"kept_per_request": BYTES, "cgroup_headroom": BYTES},
    "checks": {
        "max_estimate_error": Key(NUM, check=fraction),
        "baseline_tolerance": size_key(whole=True),
        "storm_watch": duration_key(allow_zero=True),
    },
    "fast_leak": {
        "time_compression": Key(NUM, check=at_least(1)),
        "request_rate": REQUEST_RATE,
        "kept_per_request": BYTES,
        "cgroup_headroom": BYTES,
        "leak_span": duration_key(),
    },
    "canary": {
        "time_compression": Key(NUM, check=at_least(1)),
        "request_rate": REQUEST_RATE,
        "kept_per_request": BYTES,
        "span": duration_key(),
    },
}


def load(path: Path = CONFIG_FILE) -> DrillConfig:
    raw = config_schema.load(path, SCHEMA, "the drill settings")
    t, leak, checks = raw["traffic"], raw["leak"], raw["checks"]
    return DrillConfig(
        time_compression=float(raw["time_compression"]),
        scrape_interval_s=raw["scrape_interval"],
        requests_per_day=t["request_rate"],
        control_span_s=t["control_span"],
        leak_span_s=t["leak_span"],
        warmup_requests=t["warmup_requests"],
        bytes_per_request=leak["kept_per_request"],
        cgroup_headroom_bytes=leak["cgroup_headroom"],
        max_estimate_error=float(checks["max_estimate_error"]),
        baseline_tolerance_bytes=checks["baseline_tolerance"],
        storm_watch_s=checks["storm_watch"],
        fast_leak=dict(raw["fast_leak"]),
        canary=dict(raw["canary"]),
    )


def _seconds(value) -> float:
    # Alertmanager timings may be 0s (the Watchdog's group_wait), which a window may not.
    return alertmanager_duration(str(value))


def _fmt(seconds: float) -> str:
    return "0s" if seconds == 0 else f"{max(seconds, 1.0):.0f}s"


def scaled_alertmanager(doc: dict, compression: float, repeat_s: float) -> dict:
    """The production routing with group_wait/group_interval/repeat_interval divided by the
    compression (at least 1 s), and a short repeat on the healer's route so the drill sees
    Alertmanager repeat itself (the healer must not restart twice)."""
    out = copy.deepcopy(doc)
    if not healer_webhooks(out):
        raise LeakwatchError(
            "alertmanager/alertmanager.yml has no webhook receiver for the healer "
            "(http://healer:<port>/alerts); the drill cannot exercise remediation"
        )
    healer_receivers = {
        r["name"]
        for r in out.get("receivers") or []
        if any(h in healer_webhooks({"receivers": [r]}) for h in r.get("webhook_configs") or [])
    }

    def walk(route: dict) -> None:
        for key in TIMINGS:
            if key in route:
                route[key] = _fmt(_seconds(route[key]) / compression)
        if route.get("receiver") in healer_receivers:
            route["repeat_interval"] = _fmt(repeat_s)
            route["group_interval"] = _fmt(min(repeat_s, _seconds(route.get("group_interval", "5m"))))
        for child in route.get("routes") or []:
            walk(child)

    walk(out["route"])
    return out


def write_rules(rules_dir: Path, compression: float, scrape_s: float, alert: str = LEAK_ALERT) -> list[Path]:
    """The production rule files, rendered from config/alerts.yaml with every duration divided by
    the compression, into the drill's own folder (prometheus/rules/ stays as it is). Rules whose
    windows are under four scrapes at this compression are left out, never the drill's `alert`."""
    from ..rules.render import write_rule_copy

    return write_rule_copy(
        rules_dir,
        f"Drill copy, time compression x{compression:g}.",
        required=(alert,),
        time_scale=1.0 / compression,
        min_window_s=4 * scrape_s,
    )


def with_scrape_interval(settings: StackSettings, scrape_interval_s: float) -> StackSettings:
    """The stack's settings with Prometheus scraping and evaluating every `scrape_interval_s`."""
    interval = f"{scrape_interval_s:g}s"
    return dataclasses.replace(
        settings, prometheus={**settings.prometheus, "scrape_interval": interval, "evaluation_interval": interval}
    )
