"""`make bench-detection`: time to first alert per leak scenario for the articles' rules and ours,
and the alerts 30 healthy days raise. The work is in leakwatch/backtest/bench.py (also run, shortened,
by tests/integration/test_bench_detection.py); the last line reads
`detection: article_a_vllm_min=N slow_leak_min=N worker_rss_min=N healthy_false_alerts=N
healthy_warning_episodes=N leak_requests_p90=N fast_leak_lead_min=N fast_leak_healthy_pages=N` (GPU leaks
starting at six hours of the day, counted in requests served after the leak start; the fast leaks'
worst minutes from the first page to the OOM, and the fast-leak rules' episodes when healthy).
"""

from leakwatch.backtest.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
