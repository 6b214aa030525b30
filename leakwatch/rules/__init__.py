"""Prometheus rules generated from config/alerts.yaml (see render.render_rules)."""

from .render import render_rules, rule_file_texts

__all__ = ["render_rules", "rule_file_texts"]
