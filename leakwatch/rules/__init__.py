"""Prometheus rules generated from config/alerts.yaml (read by leakwatch.core.alert_config):
`recording` writes the recording rules, `alerts` assembles the alert groups from their modules
(gpu_alerts, host_alerts, metrics_alerts, serving_alerts, meta_alerts), and `render` writes the
rule files from both."""
