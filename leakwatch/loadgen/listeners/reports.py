"""The reports: the per-request CSV log, the full-precision CSV next to Locust's, the JSON summary,
the log lines at the end, the section added to Locust's HTML report, and the web UI tab."""

from __future__ import annotations

import logging
from pathlib import Path

from .. import report_writers

log = logging.getLogger("leakwatch.loadgen")


class Reports:
    """Writes on the master (or the local runner); a worker only produces rows for the master."""

    def __init__(self, run):
        self.run = run
        self.request_log: report_writers.RequestLog | None = None
        run.keep_rows = bool(run.options.request_log)
        if run.role == "worker":
            return
        if run.options.request_log:
            self.request_log = report_writers.RequestLog(run.options.request_log)
            run.row_sink = self.request_log.write
        events = run.env.events
        events.quitting.add_listener(self.on_quitting)
        events.quit.add_listener(self.on_quit)
        web_ui = run.env.web_ui
        if web_ui is not None:
            from ..webui import install

            install(web_ui, run)

    def on_quitting(self, environment, **kwargs) -> None:
        self.write()
        if self.request_log is not None:
            self.request_log.close()

    def write(self) -> None:
        run, opts = self.run, self.run.options
        prefix = getattr(run.env.parsed_options, "csv_prefix", None)
        if prefix:
            Path(f"{prefix}_leakwatch.csv").write_text(run.stats.csv_text())
        if opts.summary_file:
            report_writers.write_json(opts.summary_file, run.summary())
        for row in run.stats.totals():
            log.info(
                "leakwatch %s: %d requests, %d ok, %d failed (%s), %.1f output tokens/s",
                row["workload"],
                row["requests"],
                row["ok"],
                row["failed"],
                row["failures"],
                row["output_tokens_per_s"],
            )
        for row in run.stats.rows():
            if row["count"]:
                log.info(
                    "leakwatch %s %s (ms): p50 %s p90 %s p99 %s max %s (n=%d)",
                    row["workload"],
                    row["metric"],
                    row["p50"],
                    row["p90"],
                    row["p99"],
                    row["max"],
                    row["count"],
                )
        for sample in run.samples:
            # Completions as a person reads them (with the model's newline token turned back into line breaks).
            log.info("leakwatch %s completion %s:\n%s", sample["workload"], sample["request_id"], sample["completion"])

    def on_quit(self, exit_code, **kwargs) -> None:
        # Locust writes its --html report before `quitting`; the full-precision section is added after.
        html_file = getattr(self.run.env.parsed_options, "html_file", None)
        if html_file and Path(html_file).is_file():
            path = Path(html_file)
            section = report_writers.html_section(self.run.stats, self.run.notes)
            path.write_text(report_writers.inject_html(path.read_text(encoding="utf-8"), section), encoding="utf-8")
