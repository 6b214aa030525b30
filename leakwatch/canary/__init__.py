"""A canary rollout: a stable and a canary vLLM of one profile behind a weighted router."""
