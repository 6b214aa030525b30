"""The core layer: the facts and helpers every other package reads, importing nothing of ours above
it (tests/unit/test_layering.py checks this folder): errors, repository paths, durations and sizes,
the one config-file loader, stack settings and topology, model profiles, the alert vocabulary, the
state folder, ports, the Prometheus client, the metric catalogues and the YAML formatter."""
