"""leakwatch: serve open LLMs with vLLM and catch memory leaks before they take the service down."""

__version__ = "0.1.0"
