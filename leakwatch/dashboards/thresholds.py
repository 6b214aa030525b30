"""The levels the dashboards colour and draw as dashed lines, in one place.

Each is a tuple of (value, colour) steps above the panel's base colour, ascending. They are display
levels: the alert rules decide when to page. Where the reference articles name a level it is used
as written (retention 30 %, 15 s latency, 90 % of the memory limit); the others mark orders of
magnitude a reader should notice.
"""

from __future__ import annotations

# Grafana's named colours.
OK, WARN, BAD, NEUTRAL = "green", "orange", "red", "text"

# Share of the memory gained during a burst of requests still held after it (articles: > 30 %).
RETENTION = ((0.30, BAD),)
# Memory of vLLM against its container/host limit (articles' HighMemoryUsage: > 90 %).
MEMORY_LIMIT = ((0.90, BAD),)
# Growth per request served since the post-warm-up baseline (bytes). Article A's leak is
# ~6 MB/request; a healthy server stays near zero once warm-up is over.
GROWTH_PER_REQUEST = ((64 * 1024, WARN), (1024 * 1024, BAD))
# Forecast seconds until memory runs out at the last hour's growth; small is bad, so these panels
# use BAD as their base colour: red below 6 h, orange below a day.
EXHAUSTION = ((6 * 3600, WARN), (24 * 3600, OK))
# End-to-end latency per request (articles: > 15 s).
E2E_LATENCY = ((10.0, WARN), (15.0, BAD))
# Interactive latency: time to first token (also queueing), time between streamed tokens.
TTFT = ((1.0, WARN), (3.0, BAD))
ITL = ((0.10, WARN), (0.25, BAD))
# KV cache: full is normal under load, but full with preemptions means requests are recomputed.
KV_CACHE = ((0.90, WARN), (0.98, BAD))
# Failed API calls as a share of all calls to the OpenAI API.
ERROR_RATIO = ((0.01, WARN), (0.05, BAD))
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
