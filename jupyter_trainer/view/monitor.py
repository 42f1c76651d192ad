"""What a job's view shows, as plain state: the model behind the widget and the text summary.

A `JobMonitor` follows one job: it reads the log from where it left off (a
bounded amount per poll), keeps the last lines and the metric series (a bounded
number of them, however many names the log prints), and gives a `Snapshot` of
it all. What a view shows of a snapshot is said once, as fields (fields.py), and
drawn by the renderers: the widget's HTML (job_html.py) and plain text
(summary.py). Nothing here renders, imports a widget library or reads the
clock, so it is tested without a frontend and without sleeping.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..core.record import JobRecord, Status, describe_outcome
from ..core.resources import Usage, UsageHistory, format_bytes
from ..core.store import CLOCK_FILE
from ..jobs.job import Job
from ..jobs.status_checks import StatusCheck
from ..logs.follower import Budget, Confirm, LogFollower, NulRuns, NulsLeft, Read
from ..logs.reading import MetricParser, last_lines, tail_screen
from ..logs.source import TellingLog
from ..logs.terminal import SCREEN_ROWS, Screen
from ..logs.watch import LOG_NEWS
from ..metrics import cache as metrics_cache
from ..metrics.clock import LogClock
from ..metrics.progress import Progress, progress_of
from ..metrics.reader import MetricReader
from ..metrics.series import MetricSeries
from ..spec.job_spec import Metric
from .words import facts, host, own_fields, status_text, where

# A poll reads until either budget is spent, so that a backlog never holds the kernel for long:
# on a 2-core machine a log full of metric lines is read at about 8 MB a poll, one with a few at 50.
READ_BUDGET = 64 << 20  # bytes
READ_SECONDS = 0.02
SAVE_BYTES = 64 << 20  # the metrics are saved after this much more of the log is read...
SAVE_SECONDS = 60.0  # ...or, once caught up, this long after the last save (at once when the job has ended)
NOTE_HISTORY_FROM = 64 << 20  # bytes of history from which the view says it is still reading it
QUIET_AFTER = 300.0  # seconds without output after which a running job's view says so
USAGE_INTERVAL = 5.0  # seconds between two looks at what a running job uses (an engine call each)
# NULs read in a row after which the rest of their run is left unread: so many are no job's output
# but a sparse file's hole where its holes cannot be told apart (a poll reads at most a read's worth)
NUL_RUN_LEFT = 64 << 10
NUL_LOOK = 4096  # bytes read first once a run was left: NULs again are left too
NUL_RUNS = NulRuns(left_after=NUL_RUN_LEFT, look=NUL_LOOK)
# bytes of whole lines the reader is given at a time: after each, it forgets the names the series
# does not keep, so that a piece full of new names (per-class metrics) costs a few MB at most
METRIC_PIECE = 64 << 10


@dataclass(frozen=True)
class Snapshot:
    """Everything a view of one job shows, at one moment."""

    name: str
    run: int
    backend: str
    where: str  # where it runs, in its backend's words
    status: Status
    exit_code: int | None
    outcome: str  # how it ended, or why it is not running: "" while all is well
    elapsed: float | None  # seconds since it started, until it ended
    lines: tuple[str, ...]  # the log's last lines, the unended one last
    metrics: MetricSeries  # the series read so far (the monitor's own: read it, never change it)
    notes: tuple[str, ...]  # what the view should say about itself (still reading, lines skipped)
    progress: Progress | None = None  # what the progress bar being drawn says, while running
    quiet_for: float | None = None  # seconds without output, once a running job has been quiet a while
    facts: tuple[str, ...] = ()  # what the runtime says of the job besides its status (SageMaker's)
    ended_at: float | None = None  # when it ended (wall clock), once it has
    usage: Usage | None = None  # what it uses now, while it runs and where that can be seen
    usage_series: dict = field(default_factory=dict)  # recent readings of each quantity (see UsageHistory.series)
    status_text: str = ""  # the status as shown: "running (restart 1)" (words.status_text)
    # while a slow status check is under way, in its backend's words ("asking Slurm…"); the status is the last known
    asking: str = ""
    record: JobRecord | None = None  # the record it was taken of
    host: str | None = None  # the machine it runs on, by the name its user knows (words.host)
    metric_text: str = ""  # a table's row: its main metric's latest value
    own: dict = field(default_factory=dict)  # what its backend adds to `status --json` (words.own_fields)


@dataclass(frozen=True)
class RecordWords:
    """A snapshot's parts that come from the job's record alone (see JobMonitor._record_words)."""

    record: object
    where: str
    status_text: str
    outcome: str
    facts: tuple[str, ...]
    host: str | None
    own: dict


_looker: ThreadPoolExecutor | None = None


def _usage_looker() -> ThreadPoolExecutor:
    """The one thread that looks at what jobs use, for every view of the kernel."""
    global _looker
    if _looker is None:
        _looker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jupyter_trainer-usage")
    return _looker


class JobMonitor:
    def __init__(
        self, job: Job, log_lines: int = 200, read_budget: int = READ_BUDGET, read_seconds: float = READ_SECONDS
    ):
        self.job = job
        # The log's last lines as a terminal shows them: those that scrolled off the screen, then the
        # screen, whose rows later output can still redraw (a nested progress bar moves up into them).
        self.lines: deque[str] = deque(maxlen=log_lines)
        self.screen = Screen()
        self.metrics = MetricSeries()
        self.metric_options = [[name, regex] for name, regex in job.record.options.get("metrics", [])]
        self.parser = MetricParser(Metric(name, regex) for name, regex in self.metric_options)
        self.clock = LogClock(job.record.started_at)
        self.reader = MetricReader(self.metrics.add, self.parser.finders(), self.clock, bulk=self.metrics.add_many)
        # a log at a path may be another job's after a removal: the run is confirmed before each read
        self.follower = LogFollower(job.confirm_run, Confirm.BEFORE_READING, chunk_size=1 << 20, nul_runs=NUL_RUNS)
        self.read_budget = read_budget
        self.read_seconds = read_seconds
        self.caught_up = False
        self.unread = 0  # bytes of the log left unread for metrics (see _left_nuls)
        self._saved = (0, time.monotonic())  # where the metrics cache stands, and since when
        self.last_output_at: float | None = None  # when the log last grew (wall clock), if known
        self.usage = UsageHistory()
        self._usage_looked = float("-inf")
        self._usage_pending: Future | None = None
        self._said: RecordWords | None = None
        self._clock_file: Path | None = None  # the supervisor's samples of the log's size (see LogClock)
        self.status_check = StatusCheck(job)  # the checks of a view, which may be slow to answer

    @property
    def record(self):
        return self.job.record

    @property
    def cursor(self):
        return self.follower.cursor

    @property
    def history_end(self) -> int:
        """Log bytes that existed when the view opened (shown as a tail), or up to a run of NULs left."""
        return self.follower.history_end

    @history_end.setter
    def history_end(self, offset: int) -> None:
        self.follower.history_end = offset

    @property
    def log_file(self) -> Path | None:
        """The log's file, when it is one on this machine (as the last read found it)."""
        return self.follower.log_file

    @property
    def log_stream(self) -> TellingLog | None:
        """Else the stream that brings it, when it tells of its news (a remote container's)."""
        return self.follower.log_stream

    @property
    def finished(self) -> bool:
        """Nothing more will change: the job has ended and its log is read."""
        return self.record.status.is_final and self.caught_up

    # -- reading -----------------------------------------------------------

    def refresh_status(self) -> bool:
        """Ask for the job's status; True if anything of its record changed (the job keeps the
        record it has while the stored one is unchanged, see Job.refresh)."""
        record = self.record
        before = (record.status, record.exit_code, record.reason)
        self.job.refresh()
        return self.record is not record or before != (self.record.status, self.record.exit_code, self.record.reason)

    def ask_status(self) -> bool:
        """Ask for the job's status without waiting for a backend slow to answer (see
        status_checks): `take_status` gives the answer. False while a check is still under way."""
        return self.status_check.ask()

    def take_status(self) -> bool | None:
        """The answer of the last check, recorded now: whether anything of the record changed. None
        while no answer came."""
        return self.status_check.take()

    def status_news(self, names: set[str]) -> bool:
        """Whether a change of these files of the job's directory may be a change of its status:
        any but its log (which every read looks at), the metrics cache (which this writes), the
        supervisor's clock (a sample of the log's size every 15 s, which says nothing of the
        status) and files still being written (a "." name, renamed once whole)."""
        mine = {self.log_file.name if self.log_file else None, metrics_cache.CACHE_FILE, CLOCK_FILE, LOG_NEWS}
        return any(name not in mine and not name.startswith(".") for name in names)

    def start(self) -> None:
        """Show the log's last lines at once; metrics catch up from the start over later polls."""
        source = self.job.log_source()
        self.history_end = source.size()
        self.last_output_at = source.modified()
        # an unfinished last line is left out: the cursor will show it as it grows
        if self.lines.maxlen:
            self.screen = tail_screen(source, self.lines.maxlen, end=self.history_end, ended_only=True)
            self.lines.extend(self.screen.take_scrolled())
        cached = metrics_cache.load(
            self.job.run_dir, self.metric_options, source, self.history_end, self.metrics, self.reader
        )
        if cached is not None:
            self.cursor.offset, self.unread = cached
            self._saved = (self.cursor.offset, time.monotonic())

    def read_log(self, now: float | None = None) -> bool:
        """Read what the log gained, up to the budget; True if anything shown changed. `now`: the
        wall clock, to tell when the job last printed."""
        source = self.job.log_source()
        offset_before = self.cursor.offset
        self.follower.open(source, final=self.record.status.is_final)
        size = source.size()
        if size == offset_before and self.caught_up:
            # a quiet log costs this one look at its size (a log rewritten to the very size it had
            # is seen once it changes again)
            if self._saved[0] != self.reader.resume_at:  # the series read last are not saved yet
                self._keep_metrics(source)
            return False
        if size != offset_before:  # something to read, whose values may need the clock
            self._read_clock(size, now)
        metrics_before = self.metrics.version
        pending_before = self._shown_pending()
        notes_before = self.notes()
        shown: list[bytes] = []  # the last lines of each read after the history, decoded once at the end

        def take(read: Read) -> None:
            nonlocal shown
            if read.truncation:  # everything from the log's new start is news
                self._show(shown)
                shown = []
                self._note(read.truncation)
                self._saved = (0, time.monotonic())
                self.reader.skip_to(0)
            elif read.hole_end is not None:
                self.reader.skip_hole(read.hole_end)
            for begin in range(0, len(read.added), METRIC_PIECE):  # the reader takes bytes cut anywhere
                self.reader.feed(read.added[begin : begin + METRIC_PIECE])
                self._take_metrics()
            if not read.in_history and read.data:  # a copy: the cursor reuses its buffer
                shown.append(bytes(last_lines(read.data, self._kept_lines)))

        budget = Budget(max_bytes=self.read_budget, max_seconds=self.read_seconds, stop_when_short=True)
        reading = self.follower.read(source, take, budget)
        self._show(shown)
        if reading.nuls_left is not None:
            self._left_nuls(source, reading.nuls_left)
        self._take_metrics()
        self.caught_up = reading.caught_up
        if now is not None and self.cursor.offset != offset_before:
            self.last_output_at = now
        self._keep_metrics(source)
        changed_note = self._shown_pending() != pending_before or self.notes() != notes_before
        return bool(shown) or changed_note or self.metrics.version != metrics_before

    def _left_nuls(self, source, left: NulsLeft) -> None:
        """A run of NULs was left unread (see NulRuns): say how much the metrics leave out, and show
        the log's last lines after it."""
        self.unread += left.end - left.start
        self.reader.skip_hole(left.end)
        if self.lines.maxlen and left.end > left.shown_to:
            self._note()
            self.screen = tail_screen(source, self.lines.maxlen, end=left.end, start=left.shown_to)
            self.lines.extend(self.screen.take_scrolled())

    def _take_metrics(self) -> None:
        """Give the series the newest values, then let the reader forget the metrics the series
        does not keep: it holds a place for every name it reads, and a log of endless names
        (per-class metrics) must cost no more memory than one of a few. A name it forgot and
        reads again starts anew there (only a series numbered by value, with no step, epoch or
        clock, would count from 1 again, should the series take it in later)."""
        reader, kept = self.reader, self.metrics.updated
        self.metrics.set_latest(reader.pending, reader.counts)
        if not all(name in kept for name in reader.axes):
            reader.keep_only(kept)

    def _read_clock(self, size: int, now: float | None) -> None:
        """What the supervisor noted of the log's size since the last read (see LogClock)."""
        self.clock.started_at = self.record.started_at
        if self._clock_file is None:
            self._clock_file = self.job.run_dir / CLOCK_FILE
        if not self.clock.read_more(self._clock_file):
            return
        if now is not None:
            self.clock.until(size, now)

    def _shown_pending(self) -> str | None:
        """The unended last line as the view shows it (None while the cursor is in the history)."""
        return self.cursor.pending if self.cursor.offset >= self.history_end else None

    def _keep_metrics(self, source) -> None:
        """Save the series now and then, so that the next view of this job need not read it all again."""
        offset, saved_at = self._saved
        scanned_to = self.reader.resume_at  # from there on, a next view counts nothing twice
        read = scanned_to - offset
        quiet = self.caught_up and (self.record.status.is_final or time.monotonic() - saved_at >= SAVE_SECONDS)
        if read >= SAVE_BYTES or (read > 0 and quiet):
            metrics_cache.save(
                self.job.run_dir, self.metric_options, scanned_to, source, self.metrics, self.reader, self.unread
            )
            self._saved = (scanned_to, time.monotonic())

    @property
    def _kept_lines(self) -> int:
        """Lines of new output replayed at most: those shown, and a screen's worth above them that
        a redraw could reach into."""
        return (self.lines.maxlen or 0) + SCREEN_ROWS if self.lines.maxlen else 0

    def _show(self, chunks: list[bytes]) -> None:
        """Replay the last lines of what was read on the screen: only those are decoded."""
        wanted = self._kept_lines
        parts: list[bytes] = []
        for data in reversed(chunks):
            if wanted <= 0:
                break
            part = last_lines(data, wanted)
            parts.append(part)
            wanted -= part.count(b"\n")
        if parts and wanted <= 0:  # output was left out above these: the screen they draw on starts clear
            self._note()
        for part in reversed(parts):
            self.screen.feed(part.decode("utf-8", errors="replace"))
        self.lines.extend(self.screen.take_scrolled())

    def _note(self, line: str | None = None) -> None:
        """What is on the screen is kept as it is, then `line`, and later output starts on a clear screen."""
        self.lines.extend(self.screen.lines())
        self.screen = Screen()
        if line is not None:
            self.lines.append(line)

    def look_at_usage(self, now: float) -> bool:
        """What the running job uses, looked at once every USAGE_INTERVAL; True with a new reading.
        The look runs on a thread of its own: a runtime slow to answer (a container whose tools
        hang) never holds up the poller that serves every view of the kernel."""
        changed = False
        pending = self._usage_pending
        if pending is not None and pending.done():
            self._usage_pending = None
            try:
                look = pending.result()
            except Exception:  # a backend's usage never raises; a bug there costs only the reading
                look = None
            if look is not None and look.scope != "instances":  # SageMaker's instances: "where" says them
                self.usage.add(look)
                changed = True
        # on one grid of USAGE_INTERVAL for every view: the views of a poller look in the same tick,
        # and share what one look at the machine's processes found (see proc.session_usage)
        slot = now // USAGE_INTERVAL if USAGE_INTERVAL > 0 else now
        if self._usage_pending is None and self.record.status is Status.RUNNING and slot != self._usage_looked:
            self._usage_looked = slot
            self._usage_pending = _usage_looker().submit(self.job.backend_impl().usage, self.record, self.job.run_dir)
        return changed

    @property
    def looking_at_usage(self) -> bool:
        """Whether a look at the job's usage is under way."""
        return self._usage_pending is not None and not self._usage_pending.done()

    # -- the snapshot --------------------------------------------------------

    def elapsed(self, now: float) -> float | None:
        """Seconds since the job started, until it ended (None before it starts)."""
        record = self.record
        if record.started_at is None:
            return None
        end = record.ended_at if record.ended_at is not None else now
        return max(0.0, end - record.started_at)

    def quiet_for(self, now: float) -> float | None:
        """Seconds without output, once a running job has been quiet for QUIET_AFTER."""
        if self.record.status is not Status.RUNNING or self.last_output_at is None:
            return None
        quiet = now - self.last_output_at
        return quiet if quiet >= QUIET_AFTER else None

    def snapshot(self, now: float) -> Snapshot:
        record = self.record
        said = self._record_words(record)
        lines = self._shown_lines()
        running = record.status is Status.RUNNING
        return Snapshot(
            name=record.name,
            run=record.run,
            backend=record.backend,
            where=said.where,
            status=record.status,
            status_text=said.status_text,
            asking=self.status_check.words(),
            exit_code=record.exit_code,
            outcome=said.outcome,
            elapsed=self.elapsed(now),
            lines=tuple(lines),
            metrics=self.metrics,
            notes=tuple(self.notes()),
            progress=progress_of(lines[-1]) if running and lines else None,
            quiet_for=self.quiet_for(now),
            facts=said.facts,
            ended_at=record.ended_at,
            usage=self.usage.latest if running else None,
            usage_series=self.usage.series() if running else {},
            record=record,
            host=said.host,
            own=said.own,
        )

    def _record_words(self, record) -> "RecordWords":
        """What the record says in words: the same until the record changes (a view takes a
        snapshot with every update, and a record changes with its status)."""
        said = self._said
        if said is None or said.record is not record:
            backends = self.job.backends
            said = self._said = RecordWords(
                record,
                where=where(record, backends),
                status_text=status_text(record, backends),
                # a running job's reason says what keeps it from being followed ("cannot reach gpu1 since …")
                outcome=describe_outcome(record.status, record.exit_code, record.reason, record.headline),
                facts=tuple(facts(record, backends)) + notification_facts(record.notification),
                host=host(record, backends),
                own=own_fields(record, backends),
            )
        return said

    def _shown_lines(self) -> list[str]:
        screen = self.screen
        pending = self._shown_pending()
        if pending:  # drawn on a copy: the line's next read draws it again, whole
            screen = screen.copy()
            screen.feed(pending)
        lines = list(self.lines) + screen.lines()
        shown = (self.lines.maxlen or 0) + bool(pending)  # as many ended lines as asked for, and the unended one
        return lines[-shown:] if shown else []

    def log_text(self) -> str:
        return "\n".join(self._shown_lines())

    def notes(self) -> list[str]:
        """A long history takes a while to read: say that the curves are still growing. And say which
        metrics could not read every line (a pattern too slow on this log), rather than hide it."""
        notes = [
            f"--metric {name}: {count} line{'s' * (count != 1)} too long or too slow for its pattern, read in part"
            for name, count in self.parser.skipped.items()
        ]
        if self.cursor.offset < self.history_end and self.history_end >= NOTE_HISTORY_FROM:
            notes.insert(0, f"reading the log for metrics: {self.cursor.offset / self.history_end:.0%}")
        if self.unread:
            notes.append(f"metrics leave out {format_bytes(self.unread)} of the log, not read: a run of NUL bytes")
        return notes


def notification_facts(notification: dict) -> tuple[str, ...]:
    """What came of --notify, in a few words."""
    if not notification:
        return ()
    if notification.get("delivered"):
        return ("notified",)
    return (f"could not notify: {notification.get('detail') or 'no answer'}",)
