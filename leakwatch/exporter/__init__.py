"""`leakwatch exporter`: a Prometheus exporter that sees inside vLLM.

Modules by job:
- procfs: reads /proc files (root injectable, so tests use fixture trees);
- discovery: finds the vLLM process tree and labels each process by role and rank;
- host_memory: RSS, swap, USS and PSS per role;
- cgroup: memory charged to the API server's cgroup and its limit;
- gpu: NVML (nvidia-ml-py, imported lazily), per device and per vLLM process;
- vllm_scrape: vLLM's own /metrics (request counter, in-flight requests, series count);
- derived: post-warm-up baseline, growth per request and retention ratio;
- schema: metric families as config/metrics/leakwatch-exporter.csv defines them;
- collector: the prometheus_client custom collector that assembles one scrape;
- server / command: the HTTP endpoint and the CLI.
Nothing here registers anything at import time.
"""
