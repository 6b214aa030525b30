"""`leakwatch report` over a backfilled real Prometheus: self-contained HTML whose numbers are
`leakwatch check`'s, and whose plots render in headless Chromium (DOM probe plus screenshot pixels)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from leakwatch.cli import main
from tests.support.leak_scenarios import MB, make, to_openmetrics
from tests.support.prom_backfill import backfilled_prometheus

END = float(int(time.time() // 3600 * 3600) - 3600)
DAY = 86400.0
SCENARIO = make(
    hours=24,
    step=60,
    requests_per_s=1000 / 86400,
    bytes_per_request=6 * MB,
    noise=20 * MB,
    ar=0.5,
    restarts_at=(14 * 3600,),
    warmup_s=600,
    warmup_bytes=300 * MB,
    t0=END - DAY,
    seed=31,
)
# A healthy worker next to the leaking API server, for the per-role breakdown.
SCENARIO.memory["worker"] = make(
    hours=24,
    step=60,
    requests_per_s=1000 / 86400,
    bytes_per_request=0,
    noise=15 * MB,
    base=1_700 * MB,
    restarts_at=(14 * 3600,),
    t0=END - DAY,
    seed=32,
).memory["api_server"]
ALERT_FROM, ALERT_TO = END - DAY + 9 * 3600, END - DAY + 14 * 3600


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed; scripts/bootstrap.sh --dev installs it"
    return path


HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1"]
PROBE = """<script>
window.addEventListener('load', () => {
  const images = [...document.images].map(i => {
    const r = i.getBoundingClientRect();
    return {figure: i.closest('figure').id, width: i.naturalWidth, height: i.naturalHeight, complete: i.complete,
            x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height};
  });
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({images, page_height: document.documentElement.scrollHeight});
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    with backfilled_prometheus(
        to_openmetrics(SCENARIO, alerts=(("LeakwatchHostMemoryLeak", ALERT_FROM, ALERT_TO),))
    ) as url:
        args = ["--prometheus", url, "--end", str(END)]
        assert main(["report", *args, "--period", "day", "--out", str(out)]) == 0
        import contextlib
        from io import StringIO

        buf = StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(["check", *args, "--window", "1d", "--json"])
        check = json.loads(buf.getvalue())
    (page,) = out.glob("leakwatch-report-day-*.html")
    return page, check, code


def test_report_numbers_are_the_checks(report):
    page, check, code = report
    text = page.read_text()
    embedded = json.loads(
        re.search(r'<script type="application/json" id="leakwatch-check">(.*?)</script>', text, re.S)
        .group(1)
        .replace("<\\/", "</")
    )
    assert embedded == check
    assert code == 1 and check["verdict"] == "LEAK"
    api = next(s for s in check["series"] if s["key"] == "host/api_server")
    assert api["bytes_per_request"]["estimate"] == pytest.approx(6 * MB, rel=0.1)
    assert next(s for s in check["series"] if s["key"] == "host/worker")["verdict"] == "NO-LEAK"
    # The table shows the same figures the check printed.
    assert "LEAK: memory is leaking" in text
    assert html.escape(api["reason"]) in text


def test_report_is_self_contained(report):
    text = report[0].read_text()
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:|//|file:)""", text)
    assert text.count("data:image/png;base64,") == 4


def test_plots_render_in_headless_chromium(report, tmp_path):
    page = report[0]
    probe_page = tmp_path / "probe.html"
    probe_page.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = subprocess.run(
        [
            chromium(),
            *HEADLESS,
            "--window-size=1200,900",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe_page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    ).stdout
    probe = json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1)))
    figures = {img["figure"]: img for img in probe["images"]}
    assert set(figures) == {"memory-trend", "requests-vs-memory", "breakdown", "alerts"}
    for img in figures.values():
        assert img["complete"] and img["width"] > 300 and img["height"] > 100, img

    shot = tmp_path / "report.png"
    height = int(probe["page_height"]) + 50
    subprocess.run(
        [chromium(), *HEADLESS, f"--window-size=1200,{height}", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=180,
        check=True,
    )
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert pixels.shape[0] >= height - 60
    for name, img in figures.items():
        x, y, w, h = (int(round(img[k])) for k in ("x", "y", "w", "h"))
        region = pixels[y : y + h, x : x + w]
        assert region.size, name
        # A rendered plot has lines, text and colours; a missing or blank image is flat white.
        colours = len(np.unique(region.reshape(-1, 3), axis=0))
        assert region.std() > 20 and colours > 50, (name, region.std(), colours)
        assert (np.abs(region - [192, 57, 43]).sum(axis=2) < 60).any() or name in ("breakdown",), name
    Path(shot).replace(tmp_path / "kept.png")  # left in tmp_path for a person to look at on failure
