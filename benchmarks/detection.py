"""`make bench-detection`: time to first alert per leak scenario for the articles' rules and ours,
and the alerts 30 healthy days raise. The work is in leakwatch/backtest/bench.py (also run, shortened,
by tests/integration/test_bench_detection.py); the last line reads
`detection: article_a_vllm_min=N slow_leak_min=N worker_rss_min=N healthy_false_alerts=N
healthy_warning_episodes=N leak_requests_p90=N` (GPU leaks starting at six hours of the day, counted in
requests served after the leak start).
"""

from leakwatch.backtest.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
