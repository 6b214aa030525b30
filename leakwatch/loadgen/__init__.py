"""The load generator behind `locust -f loadtest/`: pure logic that tests exercise without Locust.

- `schedule`: Poisson arrival times (open loop), diurnal modulation, time compression.
- `shapes`: the production-day and high-concurrency user plans.
- `prompts` / `tokens`: prompt corpora fitted to token-length distributions with the server's tokenizer.
- `sse` / `client`: streaming OpenAI-compatible requests, timed per chunk, failures classified.
- `histogram` / `stats`: full-precision latency records, mergeable across Locust workers.
- `metrics` / `discovery`: client metrics for Prometheus and the file_sd target that exists only while running.
- `locust_plugin`: the thin glue to Locust (options, events, shape, web UI tab, CSV and HTML report).
"""
