"""The distributed stats merge: workers' shares of the schedule, and their stats, rows and notes to the master."""

from __future__ import annotations

SHARE_MESSAGE = "leakwatch_share"


class StatsMerge:
    """Master: hands each worker its share on test start and merges what workers report.
    Worker: takes its share, and sends its stats delta, request-log rows and notes with each report."""

    def __init__(self, run):
        self.run = run
        events = run.env.events
        if run.role == "worker":
            run.env.runner.register_message(SHARE_MESSAGE, self.on_share)
            events.report_to_master.add_listener(self.on_report_to_master)
        elif run.role == "master":
            events.test_start.add_listener(self.on_test_start)
            events.worker_report.add_listener(self.on_worker_report)

    def on_test_start(self, environment, **kwargs) -> None:
        runner = environment.runner
        clients = sorted(c.id for c in runner.clients.values() if c.state != "missing")
        for index, client_id in enumerate(clients):
            runner.send_message(SHARE_MESSAGE, {"index": index, "count": len(clients)}, client_id)

    def on_share(self, environment, msg, **kwargs) -> None:
        self.run.share = (int(msg.data["index"]), int(msg.data["count"]))

    def on_report_to_master(self, client_id, data, **kwargs) -> None:
        run = self.run
        wire = run.stats.take_delta()
        wire["cpu_seconds"] = {run.process_name: run.cpu_used()}
        data["leakwatch"] = {
            "stats": wire,
            "issued": run.issued,
            "rows": run.take_rows(),
            "model": run.model,
            "notes": run.notes,
            "samples": run.samples,
            "conventions": run.conventions_info,
        }

    def on_worker_report(self, client_id, data, **kwargs) -> None:
        run = self.run
        report = data.get("leakwatch")
        if not report:
            return
        run.stats.merge_delta(client_id, report["stats"])
        run.worker_issued[client_id] = report["issued"]
        run.issued = sum(run.worker_issued.values())
        run.model = run.model or report["model"]
        run.conventions_info = run.conventions_info or report.get("conventions")
        run.notes.extend(n for n in report["notes"] if n not in run.notes)
        run.samples.extend(s for s in report.get("samples", ()) if s not in run.samples)
        run.emit_rows(report["rows"])
