"""The levels the dashboards colour and draw as dashed lines, in one place.

Each is a tuple of (value, colour) steps above the panel's base colour, ascending. Where an alert
rule has a threshold for what a panel shows, the panel turns red (or orange, for a warning) at that
threshold, read from config/alerts.yaml, so a panel and the alert about it never disagree. The
others are display levels that mark orders of magnitude a reader should notice.
"""

from __future__ import annotations

from ..core import alert_config

_ALERTS = alert_config.load()
_GPU, _HOST, _SERVING = (_ALERTS.section(name) for name in ("gpu", "host", "serving"))

# Grafana's named colours.
OK, WARN, BAD, NEUTRAL = "green", "orange", "red", "text"

# Share of the memory gained during a burst of requests still held after it (VRAMRetentionHigh; the articles: > 30 %).
RETENTION = ((_GPU.num("retention_ratio"), BAD),)
# Memory of vLLM against its container/host limit (HighMemoryUsage).
MEMORY_LIMIT = ((_HOST.num("usage_warning_share"), WARN), (_HOST.num("usage_critical_share"), BAD))
# Growth per request served since the post-warm-up baseline (bytes). Article A's leak is
# ~6 MB/request; a healthy server stays near zero once warm-up is over.
GROWTH_PER_REQUEST = ((64 * 1024, WARN), (1024 * 1024, BAD))
# Forecast seconds until memory runs out at the last hour's growth; small is bad, so these panels
# use BAD as their base colour: red below 6 h, orange below a day.
EXHAUSTION = ((6 * 3600, WARN), (24 * 3600, OK))
# End-to-end latency per request (VLLMRequestLatencyHigh; article A: > 15 s).
E2E_LATENCY = ((_SERVING.num("latency_limit"), BAD),)
# Interactive latency: time to first token (also queueing), time between streamed tokens.
TTFT = ((1.0, WARN), (_SERVING.num("ttft_limit"), BAD))
ITL = ((0.10, WARN), (_SERVING.num("itl_limit"), BAD))
# KV cache: full is normal under load, but full with preemptions means requests are recomputed.
KV_CACHE = ((_SERVING.num("kv_usage_share"), WARN), (0.98, BAD))
# Failed API calls as a share of all calls to the OpenAI API.
ERROR_RATIO = ((_SERVING.num("error_warning_share"), WARN), (_SERVING.num("error_critical_share"), BAD))
# Any sustained rate of failures, aborts, rejections (per second).
FAILURES_PER_S = ((0.01, WARN),)
PREEMPTIONS_PER_S = ((0.01, WARN), (1, BAD))
# How late a load generator sends requests against its schedule (seconds).
SCHEDULE_LAG = ((1, WARN), (10, BAD))
# GPU die temperature (°C): most data-centre cards throttle in the mid 80s to 90s.
GPU_TEMP = ((80, WARN), (88, BAD))
# GPU memory in use on a card. Under vLLM ~90 % is normal (its KV pool is preallocated at start),
# so only a card that is nearly full is flagged.
GPU_MEMORY_USED = ((0.95, WARN), (0.98, BAD))
