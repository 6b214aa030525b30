"""The report as one self-contained HTML file: PNG plots as data URIs, the check's JSON embedded."""

from __future__ import annotations

import base64
import json
from html import escape

from ..leakcheck import compare
from ..leakcheck.analysis import INCONCLUSIVE, LEAK, NO_LEAK, CheckResult, format_hours, human_bytes
from ..leakcheck.window import iso

BANNER = {
    LEAK: ("#c0392b", "memory is leaking"),
    NO_LEAK: ("#1e8449", "no leak"),
    INCONCLUSIVE: ("#b7950b", "not enough evidence either way"),
}

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto; max-width: 1150px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
.sub { color: #666; margin-top: 0; }
.verdict { color: #fff; padding: 0.8em 1.2em; border-radius: 6px; font-size: 1.3em; margin: 1em 0; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.35em 0.5em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
.reason { color: #555; font-size: 0.85em; }
footer { color: #777; font-size: 0.8em; margin-top: 3em; }
"""


def _interval(iv: dict, unit: str = "") -> str:
    if iv.get("estimate") is None:
        return "n/a"
    low = "unbounded" if iv["low"] is None else human_bytes(iv["low"])
    high = "unbounded" if iv["high"] is None else human_bytes(iv["high"])
    return f"{human_bytes(iv['estimate'])}{unit}<br><span class=reason>[{low} .. {high}]</span>"


def _table(data: dict) -> str:
    conf = int(round(data["thresholds"]["confidence"] * 100))
    rows = []
    for s in data["series"]:
        colour = BANNER[s["verdict"]][0]
        hours = format_hours(s["hours_to_exhaustion"])
        now = "-" if s["current_bytes"] is None else human_bytes(s["current_bytes"])
        rows.append(
            f"<tr><td>{escape(s['key'])}<br><span class=reason>{escape(s['source'])}</span></td>"
            f"<td style='color:{colour};font-weight:bold'>{escape(s['verdict'])}</td>"
            f"<td class=num>{_interval(s['bytes_per_request'])}</td>"
            f"<td class=num>{_interval(s['growth_bytes_per_hour'], '/h')}</td>"
            f"<td class=num>{now}</td><td class=num>{hours}</td>"
            f"<td class=num>{s['requests_served']:.0f}</td></tr>"
            f"<tr><td></td><td colspan=6 class=reason>{escape(s['reason'])}</td></tr>"
        )
    return (
        "<table><tr><th>series</th><th>verdict</th>"
        f"<th>bytes per request ({conf}% CI)</th><th>growth per hour ({conf}% CI)</th>"
        "<th>now</th><th>exhausted in</th><th>requests</th></tr>" + "".join(rows) + "</table>"
    )


def _embedded(data: dict) -> str:
    """JSON verbatim inside a script element (the report's numbers are `leakwatch check --json`'s)."""
    return json.dumps(data, indent=1).replace("</", "<\\/")


COMPARE_COLOUR = {
    compare.LESS: "#1e8449",
    compare.SAME: "#1e8449",
    compare.MORE: "#c0392b",
    compare.INCONCLUSIVE: "#b7950b",
}


def _comparison(c: compare.Comparison | None) -> str:
    """The canary section: per series, each side's bytes/request and the verdict on the difference."""
    if c is None:
        return ""
    data = c.as_dict()
    stable_name, canary_name = c.names
    rows = []
    for s in data["series"]:
        sides = "".join(
            f"<td class=num>{_interval(side['bytes_per_request'])}<br><span class=reason>"
            f"{side['requests_served']:.0f} requests, {escape(side['verdict'])}</span></td>"
            if side is not None
            else "<td class=num>no data</td>"
            for side in (s["stable"], s["canary"])
        )
        rows.append(
            f"<tr><td>{escape(s['key'])}</td><td style='color:{COMPARE_COLOUR[s['verdict']]};font-weight:bold'>"
            f"{escape(s['verdict'])}</td>{sides}</tr>"
            f"<tr><td></td><td colspan=3 class=reason>{escape(s['reason'])}</td></tr>"
        )
    return f"""<h2 id=compare>Canary {escape(canary_name)} against {escape(stable_name)}</h2>
<div class=verdict id=compare-verdict style="background:{COMPARE_COLOUR[c.verdict]}">{escape(c.verdict)}:
exit code {c.exit_code} of <code>leakwatch check --compare {escape(stable_name)} {escape(canary_name)}</code></div>
<table><tr><th>series</th><th>canary vs stable</th><th>{escape(stable_name)}: bytes per request</th>
<th>{escape(canary_name)}: bytes per request</th></tr>{"".join(rows)}</table>
<p class=reason>The verdict, the table and the plots of the rest of this page are the {escape(stable_name)} side's.</p>
<script type="application/json" id="leakwatch-compare">{_embedded(data)}</script>
"""


def render(
    result: CheckResult,
    figures: list[tuple[str, str, bytes]],
    *,
    title: str,
    prometheus_url: str,
    comparison: compare.Comparison | None = None,
) -> str:
    """figures: (id, caption, PNG bytes) in page order; comparison: the canary section (--compare)."""
    data = result.as_dict()
    colour, meaning = BANNER[result.verdict]
    th = data["thresholds"]
    figs = "".join(
        f"<figure id='{escape(fid)}'><img alt='{escape(caption)}' "
        f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
        f"<figcaption>{escape(caption)}</figcaption></figure>"
        for fid, caption, png in figures
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{escape(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{escape(title)}</h1>
<p class=sub>{iso(result.start)} .. {iso(result.end)} (UTC), {result.segments.restarts} restart(s),
resolution {result.step:g} s{"" if result.time_compression == 1 else f", time compression {result.time_compression:g}"}</p>
<div class=verdict id=verdict style="background:{colour}">{escape(result.verdict)}: {escape(meaning)}</div>
{_table(data)}
{_comparison(comparison)}
{figs}
<footer>
Decision rule: LEAK when the bytes-per-request interval is above {human_bytes(th["min_bytes_per_request"])},
the growth-per-hour interval above {human_bytes(th["min_growth_bytes_per_hour"])}/h and the last
{th["recent_fraction"]:.0%} of the window still grows; NO-LEAK when that last part is flat or either interval
is below its threshold; INCONCLUSIVE otherwise (config/leak_check.yaml, docs/leak-check.md).
Source: {escape(prometheus_url)}. Generated by <code>leakwatch report</code>; the same numbers as
<code>leakwatch check --json</code> for this window, embedded below.
</footer>
<script type="application/json" id="leakwatch-check">{_embedded(data)}</script>
</body></html>
"""
