"""The report's PNG plots (matplotlib, Agg backend), drawn from a leak check's result."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import numpy as np

from ..leakcheck.analysis import LEAK, NO_LEAK, CheckResult, SeriesResult

VERDICT_COLOURS = {LEAK: "#c0392b", NO_LEAK: "#1e8449"}
INCONCLUSIVE_COLOUR = "#b7950b"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _dates(t: np.ndarray):
    return [datetime.fromtimestamp(float(x), timezone.utc) for x in t]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    _pyplot().close(fig)
    return buf.getvalue()


def _gb(values) -> np.ndarray:
    return np.asarray(values, dtype=float) / 1e9


def _fitted(r: SeriesResult) -> np.ndarray:
    """The request fit's line at the analysed points: segment intercept + bytes/request * requests."""
    intercepts = dict(r.request_fit.intercepts)
    base = np.array([intercepts.get(int(s), np.nan) for s in r.segment_ids])
    return base + r.bytes_per_request.estimate * r.requests


def _mark_restarts(ax, result: CheckResult) -> None:
    for i, when in enumerate(result.segments.boundaries):
        ax.axvline(
            _dates([when])[0], color="#7f8c8d", linestyle="--", linewidth=0.8, label="restart / gap" if i == 0 else None
        )


def memory_trend(result: CheckResult) -> bytes:
    """One panel per series: every sample, the analysed ones highlighted, the fitted slope on top."""
    plt = _pyplot()
    rows = max(len(result.series), 1)
    fig, axes = plt.subplots(rows, 1, figsize=(11, 2.6 * rows), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], result.series):
        ax.plot(_dates(r.series.t), _gb(r.series.values), color="#bdc3c7", linewidth=1, label="all samples")
        if r.points:
            ax.plot(_dates(r.t), _gb(r.memory), ".", markersize=2, color="#2471a3", label="after warm-up")
        if r.request_fit is not None and r.request_fit.ok:
            ax.plot(
                _dates(r.t),
                _gb(_fitted(r)),
                color=VERDICT_COLOURS.get(r.verdict, INCONCLUSIVE_COLOUR),
                linewidth=2,
                label="fitted slope",
            )
        _mark_restarts(ax, result)
        ax.set_title(f"{r.series.key}: {r.verdict}", loc="left", fontsize=10)
        ax.set_ylabel("GB")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[-1, 0].set_xlabel("time (UTC)")
    fig.autofmt_xdate()
    return _png(fig)


def _request_rate(result: CheckResult) -> tuple[np.ndarray, np.ndarray]:
    tl = result.timeline
    if len(tl) < 2:
        return np.array([]), np.array([])
    dt = np.diff(tl.t)
    dr = np.diff(tl.requests)
    same = np.diff(result.segments.ids) == 0
    ok = same & (dt > 0)
    # Per minute, averaged over ~1/100 of the window: Poisson traffic at 1000/day is all spikes otherwise.
    k = max(1, len(dt) // 100)
    kernel = np.ones(k)
    served = np.convolve(np.where(ok, dr, 0.0), kernel, mode="same")
    elapsed = np.convolve(np.where(ok, dt, 0.0), kernel, mode="same")
    rate = np.where(elapsed > 0, served / np.where(elapsed > 0, elapsed, 1) * 60.0, np.nan)
    return tl.t[1:], np.clip(rate, 0, None)


def requests_vs_memory(result: CheckResult, primary: SeriesResult) -> bytes:
    """Request rate next to memory over time, and memory against requests served (the fitted slope)."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5))
    t, rate = _request_rate(result)
    top.plot(_dates(t), rate, color="#7d3c98", linewidth=0.8)
    top.set_ylabel("requests / minute", color="#7d3c98")
    twin = top.twinx()
    twin.plot(_dates(primary.series.t), _gb(primary.series.values), color="#2471a3", linewidth=1.2)
    twin.set_ylabel(f"{primary.series.key} GB", color="#2471a3")
    top.set_title("request rate and memory over time", loc="left", fontsize=10)
    top.grid(alpha=0.3)
    for seg in np.unique(primary.segment_ids):
        m = primary.segment_ids == seg
        bottom.plot(primary.requests[m], _gb(primary.memory[m]), ".", markersize=3, label=f"segment {seg + 1}")
        if primary.request_fit is not None and primary.request_fit.ok:
            order = np.argsort(primary.requests[m])
            bottom.plot(primary.requests[m][order], _gb(_fitted(primary)[m][order]), color="#c0392b", linewidth=1.5)
    bottom.set_xlabel("requests served since the process started")
    bottom.set_ylabel("GB")
    bottom.set_title(
        f"{primary.series.key} against requests served (red: fitted bytes per request)", loc="left", fontsize=10
    )
    bottom.grid(alpha=0.3)
    if len(np.unique(primary.segment_ids)) > 1:
        bottom.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def breakdown(result: CheckResult) -> bytes:
    """Host memory per vLLM process role and GPU memory per device/role, side by side in time."""
    plt = _pyplot()
    kinds = [k for k in ("host", "gpu", "gpu_process") if any(r.series.kind == k for r in result.series)]
    titles = {
        "host": "host memory per vLLM process role (anonymous memory + swap)",
        "gpu": "GPU memory per device",
        "gpu_process": "GPU memory per device and vLLM process role",
    }
    fig, axes = plt.subplots(len(kinds), 1, figsize=(11, 3.2 * len(kinds)), sharex=True, squeeze=False)
    for ax, kind in zip(axes[:, 0], kinds):
        for r in (r for r in result.series if r.series.kind == kind):
            ax.plot(_dates(r.series.t), _gb(r.series.values), linewidth=1.2, label=r.series.key)
        _mark_restarts(ax, result)
        ax.set_title(titles[kind], loc="left", fontsize=10)
        ax.set_ylabel("GB")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    return _png(fig)


def alert_timeline(result: CheckResult, alerts: dict[str, list[tuple[float, float]]]) -> bytes:
    """One row per alert name: when it was firing in the window."""
    plt = _pyplot()
    from matplotlib.dates import date2num

    names = sorted(alerts)
    fig, ax = plt.subplots(figsize=(11, 0.6 * max(len(names), 1) + 1.4))
    for row, name in enumerate(names):
        for start, end in alerts[name]:
            left = date2num(_dates([start])[0])
            ax.barh(row, max(end - start, 1.0) / 86400.0, left=left, height=0.6, color="#c0392b")
    ax.xaxis_date()
    ax.set_yticks(range(len(names)), names)
    ax.set_xlim(date2num(_dates([result.start])[0]), date2num(_dates([result.end])[0]))
    if not names:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no alert fired in this window", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("firing alerts (Prometheus ALERTS)", loc="left", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    fig.autofmt_xdate()
    return _png(fig)
