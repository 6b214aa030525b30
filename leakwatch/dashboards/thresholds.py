"""The levels the dashboards colour and draw as dashed lines, in one place.

They are display levels: the alert rules decide when to page. Where the reference articles name a
level it is used as written (retention 30 %, 15 s latency, 90 % of the memory limit); the others mark
orders of magnitude a reader should notice.
"""

from __future__ import annotations

# Share of the memory gained during a burst of requests still held after it (articles: > 30 %).
RETENTION_RATIO = 0.30
# Memory of the API-server process against its container/host limit (articles' HighMemoryUsage).
MEMORY_LIMIT_RATIO = 0.90
# Growth per request served since the post-warm-up baseline. Article A's leak is ~6 MB/request;
# a healthy server stays near zero once warm-up is over.
GROWTH_PER_REQUEST_WARN = 64 * 1024
GROWTH_PER_REQUEST_BAD = 1024 * 1024
# Forecast time until memory runs out at the last hour's growth rate.
EXHAUSTION_BAD_S = 6 * 3600
EXHAUSTION_WARN_S = 24 * 3600
# End-to-end latency per request (articles: > 15 s).
E2E_LATENCY_BAD_S = 15.0
E2E_LATENCY_WARN_S = 10.0
# Interactive latency levels (time to first token, time between tokens).
TTFT_WARN_S = 1.0
TTFT_BAD_S = 3.0
ITL_WARN_S = 0.10
ITL_BAD_S = 0.25
# KV cache: full is normal under load, but full with preemptions means requests are recomputed.
KV_CACHE_WARN = 0.90
KV_CACHE_BAD = 0.98
# Failed HTTP requests as a share of all requests to the OpenAI API.
ERROR_RATIO_WARN = 0.01
ERROR_RATIO_BAD = 0.05
# GPU die temperature (°C): most data-centre cards throttle in the mid 80s to 90s.
GPU_TEMP_WARN_C = 80
GPU_TEMP_BAD_C = 88
# GPU memory in use on a card. Under vLLM ~90 % is normal (its KV pool is preallocated at start),
# so only a card that is nearly full is flagged.
GPU_MEMORY_USED_WARN = 0.95
GPU_MEMORY_USED_BAD = 0.98
