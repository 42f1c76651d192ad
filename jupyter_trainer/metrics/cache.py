"""The metric series read so far from a job's log, kept next to its record.

A widget opened again on a long job (a new kernel, a reopened notebook) starts
from here instead of reading the whole log once more for its metrics. The cache
names the metrics it was made with and the log bytes just before where it
stopped, and is used only if both still match: a log that was rewritten (a
SageMaker log refetched from CloudWatch) or other metrics mean reading again.
Any kernel may write it; each write is a whole, consistent snapshot. It holds
what the view keeps, so it is as bounded as the view: a series for at most
`MetricSeries.max_names` metrics, a reader that knows only those, and a count
of the other names (not the names themselves).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from ..core.files import read_small, write_private_file
from ..core.store import METRICS_FILE as CACHE_FILE
from ..logs.source import LogSource
from .reader import MetricReader
from .series import MetricSeries

# 7: the bytes left unread (a run of NULs); 6: values of lines of their own never taken for redraws; 5: key-value
# tables (stable-baselines3); 4: the values held at a bar's last x, and an endless line's window; 3: a bounded
# number of metrics, the others counted; 2: series by step or epoch, windows of lowest and highest values, the
# reader's place
VERSION = 7
CHECK_BYTES = 64  # log bytes before the cached offset that must be unchanged
MAX_BYTES = 4 << 20  # a cache larger than this is not one this wrote (1,000 points for each of a few metrics)
MAX_OFFSET = 1 << 62  # bytes of a log: a larger place in it (or Infinity, 1e400, 2.5) was not written by this


class Cached(NamedTuple):
    offset: int  # where reading the log goes on
    unread: int  # bytes before it that were left unread: the series leave them out, and say so


def save(
    run_dir: Path,
    metrics: list[tuple[str, str]],
    offset: int,
    source: LogSource,
    series: MetricSeries,
    reader: MetricReader,
    unread: int = 0,
) -> None:
    """Keep `series` and where `reader` stands, read from the log up to `offset` but for `unread`
    bytes of it."""
    start = max(0, offset - CHECK_BYTES)
    data = {
        "version": VERSION,
        "metrics": metrics,
        "offset": offset,
        "unread": unread,
        "check": source.read(start, offset - start).hex(),
        "series": series.state(),
        "reader": reader.state(),
    }
    try:
        write_private_file(run_dir / CACHE_FILE, json.dumps(data).encode(), durable=False)
    except OSError:
        pass  # only a cache: the next reader reads the log again


def load(
    run_dir: Path,
    metrics: list[tuple[str, str]],
    source: LogSource,
    up_to: int,
    series: MetricSeries,
    reader: MetricReader,
) -> Cached | None:
    """Where the cache stands, with `series` and `reader` set as they were there, if the cache still
    describes the first bytes of this log (up to `up_to`); else None and both untouched."""
    try:
        # a job can write its run files: a regular file only (not a FIFO, not a link), bounded
        raw = read_small(run_dir / CACHE_FILE, MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            return None
        data = json.loads(raw)
        offset, unread = data["offset"], data["unread"]
        if not (_place(offset) and _place(unread)):
            return None
        if (
            data["version"] != VERSION
            or not 0 <= unread <= offset
            or data["metrics"] != metrics
            or not 0 <= offset <= up_to
        ):
            return None
        start = max(0, offset - CHECK_BYTES)
        if source.read(start, offset - start).hex() != data["check"]:
            return None
        cached_series = MetricSeries(series.max_points, series.max_names)
        cached_reader = MetricReader(reader.sink, reader.patterns, bulk=reader.bulk)
        cached_series.restore(data["series"])
        cached_reader.restore(data["reader"])
        cached_reader.position = offset
        if any(len(windows) > cached_series.max_points for windows in cached_series.windows.values()):
            return None  # more than a series ever keeps: not ours
        if not set(cached_reader.axes) <= set(cached_series.updated):
            return None  # the reader knows metrics the series does not keep: not ours either
        named = [
            *cached_series.updated,
            *cached_series.families,
            *(name for names in cached_series.families.values() for name in names or ()),
        ]
        if not all(name.isascii() and name.isprintable() for name in named):
            return None  # a reader's names are printable ASCII (the charts and tables show them): not ours
    # (OverflowError: an Infinity int()-ed in a series' or a reader's state)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, MemoryError, RecursionError):
        return None
    series.restore(cached_series.state())
    reader.restore(cached_reader.state())
    reader.position = offset
    return Cached(offset, unread)


def _place(value) -> bool:
    """A place in the log as `save` writes it: a whole number of bytes, 0 or more, of a sane size."""
    return type(value) is int and 0 <= value <= MAX_OFFSET
