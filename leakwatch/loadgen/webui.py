"""A "Streaming latency" tab in Locust's web UI with the full-precision table, a CSV download, and
the same table appended to the HTML report the UI offers for download."""

from __future__ import annotations

import json
import time

from flask import make_response, request

from . import report_writers

TAB = "leakwatch"
COLUMNS = (
    ("workload", "Workload"),
    ("metric", "Metric"),
    ("count", "# samples"),
    ("mean", "Mean (ms)"),
    ("min", "Min (ms)"),
    ("p50", "p50 (ms)"),
    ("p90", "p90 (ms)"),
    ("p95", "p95 (ms)"),
    ("p99", "p99 (ms)"),
    ("p999", "p99.9 (ms)"),
    ("max", "Max (ms)"),
)


def install(web_ui, run) -> None:
    base = getattr(web_ui, "web_base_path", "") or ""
    web_ui.template_args["extended_tabs"] = [{"title": "Streaming latency", "key": TAB}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB, "structure": [{"key": key, "title": title} for key, title in COLUMNS]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": f"{base}/leakwatch/stats.csv", "title": "Download full-precision streaming latency CSV"}
    ]
    app = web_ui.app

    @app.after_request
    def _extend(response):
        path = request.path
        if path.endswith("/stats/requests") and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": TAB, "data": run.stats.rows()}]
            response.set_data(json.dumps(data))
        elif path.endswith("/stats/report") and response.mimetype == "text/html":
            body = response.get_data(as_text=True)
            response.set_data(report_writers.inject_html(body, report_writers.html_section(run.stats, run.notes)))
        return response

    @app.route(f"{base}/leakwatch/stats.csv")
    def _stats_csv():
        response = make_response(run.stats.csv_text())
        response.headers["Content-type"] = "text/csv"
        response.headers["Content-disposition"] = f"attachment;filename=leakwatch_streaming_{int(time.time())}.csv"
        return response
