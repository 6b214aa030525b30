"""Prometheus rules generated from config/alerts.yaml: `config` reads the thresholds and selectors
(what `check`, the drill and the dashboards read too), `render` writes the rule files from them."""
