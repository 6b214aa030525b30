"""Where the full-precision numbers are written: the per-request CSV log, the section added to
Locust's HTML report, and the JSON summary."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

from .stats import RunStats

REQUEST_LOG_FIELDS = (
    "sent_unix",
    "process",
    "workload",
    "outcome",
    "detail",
    "status",
    "scheduled_s",
    "queue_delay_s",
    "connect_s",
    "ttft_s",
    "e2e_s",
    "itl_mean_s",
    "itl_max_s",
    "tpot_s",
    "chunks",
    "prompt_tokens",
    "output_tokens",
    "corpus_prompt_tokens",
    "target_prompt_tokens",
    "max_tokens",
    "repo",
    "retried",
    "request_id",
)


class RequestLog:
    """One CSV row per request, flushed as it goes (a long soak loses nothing when killed)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.parent:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("w", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._fh, fieldnames=REQUEST_LOG_FIELDS, extrasaction="ignore")
        self._writer.writeheader()

    def write(self, rows: list[dict]) -> None:
        if rows:
            self._writer.writerows(rows)
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def read_request_log(path: str | Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>No requests recorded.</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in row.values()) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_section(stats: RunStats, notes: list[str]) -> str:
    """A self-contained block for Locust's HTML report (times in ms, 3 decimals)."""
    style = (
        "<style>#leakwatch-loadgen{font-family:sans-serif;margin:2em}#leakwatch-loadgen table"
        "{border-collapse:collapse;margin:1em 0}#leakwatch-loadgen td,#leakwatch-loadgen th"
        "{border:1px solid #999;padding:2px 8px;text-align:right}</style>"
    )
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return (
        f'{style}<section id="leakwatch-loadgen"><h2>Streaming latency at full precision (leakwatch)</h2>'
        f"<p>Times in milliseconds, from the load generator's own records (Locust's tables above round "
        f"response times).</p>{_table(stats.rows())}<h3>Requests and tokens</h3>{_table(stats.totals())}"
        f"<ul>{items}</ul></section>"
    )


def inject_html(report_html: str, section: str) -> str:
    marker = "</body>"
    if marker in report_html:
        return report_html.replace(marker, section + marker, 1)
    return report_html + section


def write_json(path: str | Path, data: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
