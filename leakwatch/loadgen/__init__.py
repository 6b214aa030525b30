"""The load generator behind `locust -f loadtest/`: pure logic that tests exercise without Locust.

- `schedule`: Poisson arrival times (open loop), diurnal modulation, time compression.
- `shapes`: the production-day and high-concurrency user plans.
- `prompts` / `tokens`: prompt corpora fitted to token-length distributions with the server's tokenizer.
- `sse` / `client`: streaming OpenAI-compatible requests, timed per chunk, failures classified.
- `histogram` / `stats`: full-precision latency records, mergeable across Locust workers.
- `metrics` / `discovery`: client metrics for Prometheus and the file_sd target that exists only while running.
- `conventions`: a served model's client conventions (its profile's `client:` section) for every request.
- `locust_plugin`: the thin glue to Locust (options, the user class, the shape, `use()`); `run`: the
  state one Locust process shares; `listeners/`: corpus preparation, the sender, the distributed
  stats merge, the Prometheus exporter, the reports (each wiring its own events).
- `reference_server` / `truth` / `bench`: `make bench-loadgen`, clients judged against a server's record.
"""
