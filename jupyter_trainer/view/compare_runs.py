"""Several jobs followed for `%train_compare`: each one's metric series, by its own x and by time.

A `ComparedRun` reads one job's log from where it left off (a bounded time per
read, so that the poller serving every view of the kernel is never held long),
and keeps each metric's series twice: on the metric's own axis (step, epoch, ...)
and on the seconds since the job's start, for a chart of jobs whose axes differ.

A value's time comes from the log's clock (the supervisor notes the log's size now
and then, see `LogClock`) at the place in the log where it was printed (the reader
says where: `MetricReader.given_at`). A log with no clock (a SageMaker job, a fake
backend) places its bytes evenly between the job's start and its end (or now).

`compare(runs, ...)` gives what every surface shows: the metric, the x, one row
per job and each job's curve. Nothing here renders or imports a widget library.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

from ..core.store import CLOCK_FILE
from ..errors import UnknownJob
from ..jobs.job import Job
from ..jobs.status_checks import StatusCheck
from ..logs.follower import Budget, Confirm, LogFollower, Read
from ..logs.reading import MetricParser
from ..metrics import comparison as rules
from ..metrics.clock import LogClock
from ..metrics.names import TIME
from ..metrics.reader import MetricReader
from ..metrics.series import MetricSeries
from ..spec.job_spec import Metric
from .words import run_label, run_params

READ_SECONDS = 0.02  # of reading per run and poll (a backlog is read over several polls)
MAX_PIECE = 64 << 10  # bytes fed to the reader at once at most (between two looks at the clock)
MAX_NAMES = 256  # metrics a run keeps the table's numbers of (a log may print endless names)


class ComparedRun:
    """One job of a comparison. `metric`: only that metric is kept (None: every one, to choose from).
    `curves` False: only the table's numbers are kept (a text table shows no curve), the values of
    a run of lines taken in one batch each; `curve` is then empty."""

    def __init__(self, job: Job, metric: str | None = None, read_seconds: float = READ_SECONDS, curves: bool = True):
        self.job = job
        self.metric = metric
        self.read_seconds = read_seconds
        self.curves = curves
        self.by_own = MetricSeries()
        self.by_time = MetricSeries()
        self.stats: dict[str, rules.Stats] = {}
        self.axes: dict[str, str] = {}  # each metric's own x
        self.others: dict[str, None] = {}  # the names of the metrics not asked for, in order
        options = job.record.options.get("metrics", [])
        self.parser = MetricParser(Metric(name, regex) for name, regex in options)
        self.clock = LogClock(job.record.started_at)
        self.reader = self._new_reader()
        # a read's budget is looked at between chunks; a run removed meanwhile is found once its
        # log reads as empty (caught up), wherever the log lies, and said, not raised
        self.follower = LogFollower(job.confirm_run, Confirm.ONCE_CAUGHT_UP, chunk_size=MAX_PIECE)
        self._size = 0  # the log's size at the last read, and when
        self._now = time.time()
        self.flushed = False
        self.caught_up = False
        self.version = 0  # moves on whenever what the comparison shows of this run may have changed
        self.status_check = StatusCheck(job)  # the checks of a view, which may be slow to answer
        self.removed = ""  # what is said once the job was removed meanwhile (its log gone with it)

    @property
    def record(self):
        return self.job.record

    @property
    def label(self) -> str:
        return run_label(self.record)

    @property
    def finished(self) -> bool:
        """Nothing more will change: the job has ended and its log is read."""
        return self.record.status.is_final and self.flushed

    def refresh_status(self) -> bool:
        if self.removed:
            return False
        before = (self.record.status, self.record.exit_code)
        try:
            self.job.refresh()
        except UnknownJob:
            return self._gone()
        changed = before != (self.record.status, self.record.exit_code)
        self.version += changed
        return changed

    def ask_status(self) -> bool:
        """Ask for the job's status without waiting for a backend slow to answer (see
        status_checks); False while a check is still under way."""
        return self.status_check.ask()

    def take_status(self) -> bool | None:
        """The answer of the last check, recorded now: whether the status changed. None while no
        answer came."""
        if self.removed:
            return False
        before = (self.record.status, self.record.exit_code)
        try:
            if self.status_check.take() is None:
                return None
        except UnknownJob:
            return self._gone()
        changed = before != (self.record.status, self.record.exit_code)
        self.version += changed
        return changed

    # -- reading --------------------------------------------------------------------

    def read(self, now: float | None = None, seconds: float | None = None) -> bool:
        """Read what the log gained, for up to `seconds` (default the run's own budget; None-like
        math.inf: all of it); True if anything shown may have changed."""
        if self.removed:
            self.caught_up = True
            return False
        self._now = time.time() if now is None else now
        seconds = self.read_seconds if seconds is None else seconds
        source = self.job.log_source()
        final = self.record.status.is_final
        self.follower.open(source, final)
        self._size = source.size()
        self._read_clock()
        version = self.version
        reading = self.follower.read(source, self._take_read, Budget(max_seconds=seconds))
        self.caught_up = reading.caught_up
        if reading.gone:  # a log removed with its run reads as empty
            return self._gone()
        if final and self.caught_up and not self.flushed:
            self.reader.flush()
            self.flushed = True
            self.version += 1
        return self.version != version

    def read_all(self, now: float | None = None) -> "ComparedRun":
        """Read the whole log now (the text table, the command line)."""
        while True:
            self.read(now, seconds=math.inf)
            if self.caught_up:
                return self

    def _take_read(self, read: Read) -> None:
        if read.truncation:
            self._start_again()
        elif read.hole_end is not None:  # a hole of a sparse file, passed over unread
            self.reader.skip_hole(read.hole_end)
        for begin in range(0, len(read.added), MAX_PIECE):  # the reader takes bytes cut anywhere
            self.reader.feed(read.added[begin : begin + MAX_PIECE])
        self.version += 1

    def _gone(self) -> bool:
        """The job was removed meanwhile: said so, and its log no longer read."""
        self.removed = f"{self.label}: removed while it was compared"
        self.caught_up = self.flushed = True
        self.version += 1
        return True

    def _start_again(self) -> None:
        """The log was cut or replaced: its series start again from its new start."""
        self.by_own, self.by_time, self.stats, self.axes, self.others = MetricSeries(), MetricSeries(), {}, {}, {}
        self.reader = self._new_reader()

    def _new_reader(self) -> MetricReader:
        return MetricReader(
            self._take, self.parser.finders(), self.clock, bulk=None if self.curves else self._take_many
        )

    def _read_clock(self) -> None:
        self.clock.started_at = self.record.started_at
        self.clock.read_more(self.job.run_dir / CLOCK_FILE)
        self.clock.until(self._size, self._now)

    def seconds_at(self, offset: int) -> float | None:
        """Seconds since the job's start when the log had `offset` bytes: from its clock, else by
        the byte's place in the log between the start and the end (or now)."""
        if self.clock.known:
            return self.clock.seconds_at(offset)
        record = self.record
        if record.started_at is None or self._size <= 0:
            return None
        end = record.ended_at if record.ended_at is not None else self._now
        return max(0.0, (end - record.started_at) * min(1.0, offset / self._size))

    def _time_of(self, point: tuple, printed_at: int) -> float | None:
        name, axis, x, _ = point
        return x if axis == TIME else self.seconds_at(printed_at)

    def _take(self, point: tuple) -> None:
        """A settled value from the reader."""
        name, axis, x, value = point
        stats = self.stats.get(name)
        if stats is None or self.axes[name] != axis:
            stats = self._stats_to_count(name, axis)
            if stats is None:
                return
        stats.add(value)
        if not self.curves:
            return
        self.by_own.add(point)
        seconds = self._time_of(point, self.reader.given_at)
        if seconds is not None:
            # tagged with its own axis, so that a metric moved to another x starts again here too
            self.by_time.add((name, f"{TIME}:{axis}", seconds, value))

    def _take_many(self, name: str, axis: str, _xs: list, values: list, _offsets) -> None:
        """Settled values of one metric from a run of lines (a reader of the table's numbers only)."""
        stats = self._stats_to_count(name, axis)
        if stats is not None:
            stats.extend(values)

    def _stats_to_count(self, name: str, axis: str) -> rules.Stats | None:
        """The table's numbers a value of `name` on `axis` counts into; None for a metric not kept."""
        if self.metric is not None and name != self.metric:
            if len(self.others) < MAX_NAMES:
                self.others[name] = None  # named when the metric asked for is not in the log
            return None
        stats = self.stats.get(name)
        if stats is None:
            if len(self.stats) >= MAX_NAMES:
                return None
        elif self.axes[name] == axis:
            return stats
        # new, or moved by the reader to another x: it starts again
        stats = self.stats[name] = rules.Stats()
        self.axes[name] = axis
        return stats

    # -- what the comparison shows ----------------------------------------------------

    def names(self) -> list[str]:
        """The metrics read so far, in the order they came."""
        names = list(self.stats)
        names += [name for name in self.reader.pending if name not in self.stats and len(names) < MAX_NAMES]
        return names + [name for name in self.others if name not in names]

    def _pending(self, name: str) -> tuple | None:
        if self.flushed:
            return None
        point = self.reader.pending.get(name)
        if point is None or (self.metric is not None and name != self.metric):
            return None
        if self.axes.get(name, point[1]) != point[1]:
            return None  # moved to another x: shown once settled
        return point

    def stats_of(self, name: str) -> rules.Stats | None:
        """The table's numbers for `name`, with the value not yet settled (a running job's latest)."""
        stats = self.stats.get(name)
        point = self._pending(name)
        if point is None:
            return stats
        with_latest = rules.Stats(**vars(stats)) if stats is not None else rules.Stats()
        with_latest.add(point[3])
        return with_latest

    def axis_of(self, name: str) -> str | None:
        point = self._pending(name)
        return self.axes.get(name) or (point[1] if point is not None else None)

    def curve(self, name: str, by_time: bool) -> list[tuple[float, float]]:
        if not self.curves:
            return []
        points = (self.by_time if by_time else self.by_own).curve(name)
        point = self._pending(name)
        if point is not None:
            x = self._time_of(point, self.follower.cursor.offset) if by_time else point[2]
            if x is not None and _finite(x) and _finite(point[3]) and (not points or points[-1][0] <= x):
                points.append((x, point[3]))
        return points


@dataclass(frozen=True)
class Comparison:
    """What every surface shows of the runs compared, at one moment."""

    metric: str | None
    axis: str  # the chart's x: the metric's own axis, or TIME
    note: str  # what x is, and why
    rows: tuple[rules.Row, ...]
    curves: tuple[tuple[str, list[tuple[float, float]]], ...]  # (label, points) of each run, in order


def compare(runs: list[ComparedRun], metric: str | None = None, by_time: bool = False) -> Comparison:
    metric = metric or rules.default_metric([run.names() for run in runs])
    if metric is None:
        rows = tuple(_said_removed(rules.row(run.label, run.record.status.value, None, None), run) for run in runs)
        return Comparison(None, TIME if by_time else "n", "", rows, tuple((run.label, []) for run in runs))
    axes = {run.label: run.axis_of(metric) for run in runs}
    axis = rules.shared_axis(axes.values(), by_time)
    timed = axis == TIME
    rows = tuple(
        _said_removed(rules.row(run.label, run.record.status.value, metric, run.stats_of(metric), run.names()), run)
        for run in runs
    )
    curves = tuple((run.label, run.curve(metric, timed)) for run in runs)
    return Comparison(metric, axis, rules.axis_note(axes, axis, by_time), rows, curves)


def _said_removed(row: rules.Row, run: ComparedRun) -> rules.Row:
    """A run removed meanwhile is said to be so, whatever its log gave before (or seemed to lack)."""
    return dataclasses.replace(row, status="removed", note=run.removed) if run.removed else row


def load_runs(
    names: list[str], metric: str | None = None, store=None, backends=None, refresh: bool = True, curves: bool = True
) -> list[ComparedRun]:
    """The runs of the jobs called `names` (each once), refreshed (`refresh` False: as recorded, for
    a view that asks for their statuses itself); an unknown name is a TrainerError. `curves` False:
    for a text table, which shows none (see ComparedRun)."""
    jobs = [Job.load(name, store, backends) for name in rules.unique(names)]
    runs = [ComparedRun(job, metric, curves=curves) for job in jobs]
    if refresh:
        for run in runs:
            run.refresh_status()
    return runs


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except (OverflowError, TypeError):
        return False


def what_differs(records: list) -> list[dict[str, str]]:
    """For each run, what tells it from the others it is compared with: its values (a sweep's), its
    script's arguments, its git commit, its image, each where they differ between the runs."""
    facts = [_run_facts(record) for record in records]
    keys = list(dict.fromkeys(key for each in facts for key in each))
    differing = [key for key in keys if len({each.get(key) for each in facts}) > 1]
    return [{key: each.get(key, "-") for key in differing} for each in facts]


def _run_facts(record) -> dict[str, str]:
    facts = dict(run_params(record))
    args = record.options.get("args")
    if isinstance(args, list) and all(isinstance(word, str) for word in args) and not facts:
        facts["args"] = " ".join(args) or "-"
    git = record.provenance.get("git") if isinstance(record.provenance, dict) else None
    if isinstance(git, dict) and isinstance(git.get("commit"), str):
        facts["commit"] = git["commit"][:10] + (" (dirty)" if git.get("dirty") else "")
    image = record.options.get("image")
    if isinstance(image, str):
        facts["image"] = image
    return facts
