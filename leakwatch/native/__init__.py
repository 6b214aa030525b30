"""The native runner: the same stack as compose.yaml as local processes under supervisord.

For machines with no Docker engine or no GPU (CI, laptops, HPC nodes): vLLM's CPU backend from the
project virtualenv, Prometheus, Alertmanager and node exporter from Debian's packages.
"""
