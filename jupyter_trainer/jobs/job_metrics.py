"""A job's metrics, read from its log (`Job.metric_columns`, `Job.latest_metrics`): every value
of the whole log as columns, or the latest value of each from the log's end only. `log_source`
gives the job's log source when asked."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core.record import JobRecord
from ..core.store import CLOCK_FILE
from ..logs.reading import MetricParser, written_span
from ..logs.source import LogSource
from ..metrics.clock import LogClock
from ..metrics.reader import MetricReader
from ..spec.job_spec import Metric

CLOCK_BYTES = 16 << 20  # of the log's clock read for its metrics' times
LATEST_METRICS_BYTES = 256 << 10  # of the log's end read for the latest metric values
METRICS_READ = 4 << 20  # bytes of the log read at once for its metrics


@dataclass
class MetricColumn:
    """One metric's values in log order, and what their x is ("step", "epoch", "time" or "n")."""

    axis: str
    xs: list = field(default_factory=list)
    values: list = field(default_factory=list)


def metric_columns(record: JobRecord, run_dir: Path, log_source: Callable[[], LogSource]) -> dict[str, MetricColumn]:
    """Every metric value of the whole log, a list of xs and one of values per name: what
    `metric_points` gives, without a tuple per point (a log of millions of values)."""
    found: dict[str, MetricColumn] = {}

    def column_of(name: str, axis: str) -> MetricColumn:
        column = found.get(name)
        if column is None or column.axis != axis:  # moved to another x (see MetricReader._settle)
            column = found[name] = MetricColumn(axis)  # (a name keeps its place in the dict)
        return column

    def keep(point: tuple) -> None:
        name, axis, x, value = point
        column = column_of(name, axis)
        column.xs.append(x)
        column.values.append(value)

    def keep_many(name: str, axis: str, xs: list, values: list, _offsets) -> None:
        column = column_of(name, axis)
        column.xs += xs
        column.values += values

    parser = MetricParser(Metric(name, regex) for name, regex in record.options.get("metrics", []))
    clock = LogClock(record.started_at)
    source = log_source()
    clock.read_more(run_dir / CLOCK_FILE, CLOCK_BYTES)
    clock.until(source.size(), time.time())
    reader = MetricReader(keep, parser.finders(), clock, bulk=keep_many)
    offset = 0
    while True:
        span = written_span(source, offset)  # a sparse file's holes are passed over unread
        if span is not None and span[0] > offset:
            offset = span[0]
            reader.skip_hole(offset)
        data = source.read(offset, METRICS_READ if span is None else min(METRICS_READ, span[1] - offset))
        if not data:
            break
        reader.feed(data)
        offset += len(data)
    reader.flush()
    return found


def latest_metrics(
    record: JobRecord, log_source: Callable[[], LogSource], tail_bytes: int = LATEST_METRICS_BYTES
) -> dict[str, float]:
    """Each metric's latest value, from the log's last `tail_bytes` only (a table of many jobs
    asks this of each: it never reads a whole log)."""
    latest: dict[str, float] = {}

    def keep(point: tuple) -> None:
        name, _axis, _x, value = point
        latest[name] = value

    def keep_last(name: str, _axis: str, _xs: list, values: list, _offsets) -> None:
        latest[name] = values[-1]

    source = log_source()
    size = source.size()
    start = max(0, size - tail_bytes)
    data = source.read(start, size - start)
    if start:
        data = data[data.find(b"\n") + 1 :]  # from the first whole line
    parser = MetricParser(Metric(name, regex) for name, regex in record.options.get("metrics", []))
    reader = MetricReader(keep, parser.finders(), bulk=keep_last)
    reader.feed(data)
    reader.flush()
    return latest
