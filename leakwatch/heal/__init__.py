"""`leakwatch heal`: an authenticated Alertmanager webhook receiver that drains and restarts vLLM."""
