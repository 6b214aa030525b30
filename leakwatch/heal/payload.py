"""Alertmanager's webhook payload (version 4), parsed strictly: anything else is a clear 4xx."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime


class PayloadError(ValueError):
    """The body is not an Alertmanager notification; `status` is the HTTP code to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Alert:
    status: str  # firing | resolved
    name: str
    labels: dict[str, str]
    fingerprint: str
    starts_at: float  # unix seconds

    @property
    def key(self) -> str:
        """One firing episode of one alert: Alertmanager repeats it with the same key."""
        return f"{self.fingerprint}@{self.starts_at:.3f}"


# fullmatch, not ^...$: `$` also matches before a trailing newline.
_FINGERPRINT = re.compile(r"[0-9a-fA-F]{1,64}")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _timestamp(value, where: str) -> float:
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        raise PayloadError(422, f"{where}.startsAt must be an RFC 3339 time string")
    text = value.strip().replace("Z", "+00:00")
    # Alertmanager writes nanoseconds; Python's parser takes at most microseconds.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise PayloadError(422, f"{where}.startsAt {value[:40]!r} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise PayloadError(422, f"{where}.startsAt {value[:40]!r} has no time zone")
    return parsed.timestamp()


def _labels(value, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise PayloadError(422, f"{where}.labels must be an object of strings")
    for key, val in value.items():
        if not isinstance(key, str) or not _LABEL_NAME.fullmatch(key) or not isinstance(val, str):
            raise PayloadError(422, f"{where}.labels has an invalid label {str(key)[:40]!r}")
    return dict(value)


def parse(body: bytes, max_alerts: int) -> list[Alert]:
    try:
        doc = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise PayloadError(400, "body is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise PayloadError(400, f"body is not JSON: {str(exc)[:120]}") from None
    if not isinstance(doc, dict):
        raise PayloadError(422, "body must be an Alertmanager webhook object")
    if doc.get("version") != "4":
        raise PayloadError(
            422, f'unsupported webhook version {str(doc.get("version"))[:20]!r} (Alertmanager sends "4")'
        )
    alerts = doc.get("alerts")
    if not isinstance(alerts, list) or not alerts:
        raise PayloadError(422, "alerts must be a non-empty list")
    if len(alerts) > max_alerts:
        raise PayloadError(413, f"{len(alerts)} alerts in one notification; at most {max_alerts}")
    parsed = []
    for i, raw in enumerate(alerts):
        where = f"alerts[{i}]"
        if not isinstance(raw, dict):
            raise PayloadError(422, f"{where} must be an object")
        status = raw.get("status")
        if status not in ("firing", "resolved"):
            raise PayloadError(422, f"{where}.status must be firing or resolved")
        labels = _labels(raw.get("labels"), where)
        name = labels.get("alertname", "")
        if not name:
            raise PayloadError(422, f"{where} has no alertname label")
        fingerprint = raw.get("fingerprint")
        if not isinstance(fingerprint, str) or not _FINGERPRINT.fullmatch(fingerprint):
            raise PayloadError(422, f"{where}.fingerprint must be a hex string")
        parsed.append(Alert(status, name, labels, fingerprint, _timestamp(raw.get("startsAt"), where)))
    return parsed
