"""The metric series read so far from a job's log, kept next to its record.

A widget opened again on a long job (a new kernel, a reopened notebook) starts
from here instead of reading the whole log once more for its metrics. The cache
names the metrics it was made with and the log bytes just before where it
stopped, and is used only if both still match: a log that was rewritten (a
SageMaker log refetched from CloudWatch) or other metrics mean reading again.
Any kernel may write it; each write is a whole, consistent snapshot.
"""

from __future__ import annotations

import json
from pathlib import Path

from .logs import LogSource
from .plot import MetricSeries
from ._fs import write_private_file
from .store import METRICS_FILE as CACHE_FILE

VERSION = 1
CHECK_BYTES = 64  # log bytes before the cached offset that must be unchanged


def save(run_dir: Path, metrics: list[tuple[str, str]], offset: int, source: LogSource, series: MetricSeries) -> None:
    """Keep `series`, read from the log up to `offset` (the start of a line)."""
    start = max(0, offset - CHECK_BYTES)
    data = {
        "version": VERSION,
        "metrics": metrics,
        "offset": offset,
        "check": source.read(start, offset - start).hex(),
        "points": series.points,
        "counts": series.counts,
        "latest": series.latest,
        "stride": series.stride,
    }
    try:
        write_private_file(run_dir / CACHE_FILE, json.dumps(data).encode(), durable=False)
    except OSError:
        pass  # only a cache: the next reader reads the log again


def load(run_dir: Path, metrics: list[tuple[str, str]], source: LogSource, up_to: int) -> tuple[int, MetricSeries] | None:
    """The cached offset and series, if they still describe the first bytes of this log (up to `up_to`)."""
    try:
        data = json.loads((run_dir / CACHE_FILE).read_text())
        offset = int(data["offset"])
        if data["version"] != VERSION or data["metrics"] != metrics or not 0 <= offset <= up_to:
            return None
        start = max(0, offset - CHECK_BYTES)
        if source.read(start, offset - start).hex() != data["check"]:
            return None
        series = MetricSeries()
        series.points = {name: [(int(x), float(y)) for x, y in points] for name, points in data["points"].items()}
        series.counts = {name: int(count) for name, count in data["counts"].items()}
        series.latest = {name: (int(x), float(y)) for name, (x, y) in data["latest"].items()}
        series.stride = {name: int(stride) for name, stride in data["stride"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return offset, series
