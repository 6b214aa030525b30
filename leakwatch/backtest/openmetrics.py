"""OpenMetrics files for `promtool tsdb create-blocks-from openmetrics`, one per 2-hour block.

promtool (2.42) reads its whole input once per 2-hour block it writes, so one file holding 30 days
costs 360 passes over everything; files that each hold one block's samples are read twice. Sample
lines carry timestamps in seconds; every file ends with `# EOF`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..core.errors import LeakwatchError

BLOCK_S = 7200
_FLUSH_LINES = 20000


def format_value(value: float) -> str:
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def format_series(name: str, labels: dict) -> str:
    body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
    return f"{name}{{{body}}}" if body else name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class BlockFiles:
    """Collects samples into per-block OpenMetrics files in a directory (any time order)."""

    def __init__(self, directory: Path, prefix: str = "samples"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self._buffers: dict[int, list[str]] = {}
        self._paths: dict[int, Path] = {}
        self.samples = 0
        self.min_ts = math.inf
        self.max_ts = -math.inf

    def _block(self, ts: float) -> int:
        return int(ts // BLOCK_S)

    def add(self, series: str, value: float, ts: float) -> None:
        block = self._block(ts)
        buf = self._buffers.setdefault(block, [])
        buf.append(f"{series} {format_value(value)} {format_value(round(ts, 3))}\n")
        self.samples += 1
        self.min_ts = min(self.min_ts, ts)
        self.max_ts = max(self.max_ts, ts)
        if len(buf) >= _FLUSH_LINES:
            self._flush(block)

    def tick(self, ts: float, samples: list[tuple[str, float]]) -> None:
        """All samples of one scrape (the simulator's sink interface); values must be finite."""
        block = self._block(ts)
        buf = self._buffers.setdefault(block, [])
        stamp = format_value(round(ts, 3))
        buf.extend([f"{s} {v} {stamp}\n" for s, v in samples])
        self.samples += len(samples)
        self.min_ts = min(self.min_ts, ts)
        self.max_ts = max(self.max_ts, ts)
        if len(buf) >= _FLUSH_LINES:
            self._flush(block)

    def _flush(self, block: int) -> None:
        lines = self._buffers.pop(block, [])
        if not lines:
            return
        path = self._paths.setdefault(block, self.directory / f"{self.prefix}-{block}.om")
        with open(path, "a") as fh:
            fh.writelines(lines)

    def close(self) -> list[Path]:
        for block in list(self._buffers):
            self._flush(block)
        for path in self._paths.values():
            with open(path, "a") as fh:
                fh.write("# EOF\n")
        return sorted(self._paths.values())


# -- reading OpenMetrics / Prometheus text exports ----------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+(\S+))?\s*$")


def split_file(source: Path, sink: BlockFiles) -> None:
    """Copies a text export with timestamps (OpenMetrics, or Prometheus text format with
    millisecond timestamps) into per-block files. Comment lines are dropped: types do not matter
    to PromQL, and promtool wants each file to stand on its own."""
    try:
        fh = open(source, errors="strict")  # noqa: SIM115 - closed by the `with fh` below, outside the try
    except OSError as exc:
        raise LeakwatchError(f"cannot read {source}: {exc}") from None
    with fh:
        for number, line in enumerate(_lines(fh), 1):
            if not line.strip() or line.startswith("#"):
                continue
            match = _SAMPLE.match(line)
            if not match:
                raise LeakwatchError(f"{source}:{number}: not a sample line: {line[:120]!r}")
            name, labels, value, ts = match.groups()
            if ts is None:
                raise LeakwatchError(
                    f"{source}:{number}: sample without a timestamp; a backtest needs history "
                    "(export with timestamps, e.g. `leakwatch backtest --prometheus URL` or "
                    "promtool tsdb dump --format=openmetrics)"
                )
            stamp = float(ts)
            if stamp > 1e11:  # Prometheus text format: milliseconds
                stamp /= 1000
            try:
                float(value)
            except ValueError:
                raise LeakwatchError(f"{source}:{number}: value {value!r} is not a number") from None
            sink.add(f"{name}{labels or ''}", float(value), stamp)


def _lines(fh) -> Iterator[str]:
    try:
        yield from fh
    except UnicodeDecodeError as exc:
        raise LeakwatchError(f"{fh.name}: not a text file ({exc})") from None


def write_matrix(sink: BlockFiles, name: str, extra_labels: dict, matrix: Iterable[dict]) -> int:
    """Writes a range query's result (Prometheus API matrix) under a new metric name."""
    count = 0
    for item in matrix:
        labels = {k: v for k, v in item["metric"].items() if k != "__name__"}
        labels.update(extra_labels)
        text = format_series(name, labels)
        for ts, value in item["values"]:
            sink.add(text, float(value), float(ts))
            count += 1
    return count
