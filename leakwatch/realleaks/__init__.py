"""vLLM's own leaks and bounded caches: the catalogue (config/vllm_leaks.yaml), the request patterns
that trigger them, and the screening that drives them against a real vLLM (docs/real-leaks.md)."""
