"""`Job`: one job as users see it, joining its record in the store to its backend."""

from __future__ import annotations

import contextlib
import copy
import os
import time
from itertools import repeat
from pathlib import Path
from typing import Callable, Iterator

from .. import backends as _backends
from ..backends.base import Backend, notification_check
from ..backends.notify import PYTHON_RAISED, exception_line
from ..core import files as _fs
from ..core.processes import ProcessIdentity
from ..core.record import (
    JobRecord,
    Observation,
    Status,
    mark_stop,
    mark_stop_sent,
    parse_notification,
    resolve,
    unmark_stop,
)
from ..core.resources import Usage, cpu_between
from ..core.store import NOTIFIED_FILE, RECORD_FILE, JobStore
from ..errors import (
    BackendUnavailable,
    InvalidOption,
    JobReplaced,
    StoreError,
    TrainerError,
    UnknownBackend,
    Unreachable,
)
from ..logs.follower import ONE_READ, Confirm, LogFollower, Read
from ..logs.reading import read_all_lines, tail_lines, tail_screen
from ..logs.source import LogSource
from ..logs.terminal import SettledLines
from . import job_metrics
from .job_metrics import LATEST_METRICS_BYTES, MetricColumn

EXCEPTION_LINES = 200  # of a failed job's log, read for the exception it ended with
STOP_WAIT_SECONDS = 30  # a stop waits this long for the job to end (a remote runtime takes its time)


class Job:
    """A handle on a job. Attributes reflect the last `refresh()`; status-reading calls refresh first."""

    def __init__(self, record: JobRecord, store: JobStore, backends: _backends.Backends | None = None):
        self.record = record
        self.store = store
        self.backends = backends or _backends.DEFAULT  # where its backend is found by name
        self._run_dir: tuple | None = None
        self._record_version = None  # the record file's version (see _fs.version) when `record` was read from it
        self._confirmed_version = None  # a version found to be this run's record (see confirm_run)
        self._log_source: tuple | None = None  # (the record it was made for, the log source)

    @classmethod
    def load(cls, name: str, store: JobStore | None = None, backends: _backends.Backends | None = None) -> "Job":
        store = store or JobStore()
        return cls(store.load(name), store, backends)

    def __repr__(self) -> str:
        return f"<Job {self.name!r} {self.backend} {self.record.status.value}>"

    # -- what users read ---------------------------------------------------

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def backend(self) -> str:
        return self.record.backend

    @property
    def run(self) -> int:
        return self.record.run

    @property
    def status(self) -> Status:
        self.refresh()
        return self.record.status

    @property
    def exit_code(self) -> int | None:
        self.refresh()
        return self.record.exit_code

    @property
    def reason(self) -> str:
        return self.record.reason

    @property
    def run_dir(self) -> Path:
        key = (self.name, self.run)
        if self._run_dir is None or self._run_dir[0] != key:  # asked at every poll: made once
            self._run_dir = (key, self.store.run_dir(self.name, self.run))
        return self._run_dir[1]

    def logs(self, tail: int | None = None, strip_ansi: bool = True) -> str:
        """The log as text as a terminal would have shown it (progress-bar redraws and nested bars
        collapsed, see terminal.py); the last `tail` lines if given. The log file itself is left as
        the job wrote it."""
        return "".join(line + "\n" for line in self.log_lines(tail, strip_ansi))

    def log_lines(self, tail: int | None = None, strip_ansi: bool = True) -> Iterator[str]:
        """The log's lines one by one, as `logs` gives them: a log of gigabytes is never held whole."""
        source = self.log_source()
        return iter(tail_lines(source, tail, strip_ansi)) if tail is not None else read_all_lines(source, strip_ansi)

    def follow(self, tail: int | None = None, interval: float = 1.0) -> Iterator[str]:
        """Yield log lines as they are written, until the job has ended and its log is read: the
        last `tail` lines as `log_lines` shows them, then each line once it is settled (see
        terminal.SettledLines: a progress bar's redraws are not printed one by one)."""
        source = self.log_source()
        settled = SettledLines()
        offset = 0
        if tail is not None:
            offset = source.size()
            screen = tail_screen(source, tail) if tail > 0 else None
            if screen is not None:
                yield from screen.lines()[-tail:]
                settled = SettledLines(screen)  # the tail's bars go on drawing where they are
        # a log at a path: after a removal it may be a new job's, which raises (see confirm_run)
        follower = LogFollower(self.confirm_run, Confirm.BEFORE_READING, offset=offset)
        printed: list[str] = []

        def take(read: Read) -> None:
            nonlocal settled
            if read.truncation:  # said once, before what follows it
                printed.extend(settled.end() + [read.truncation])
                settled = SettledLines()
            # (a read inside a line of megabytes, or over a hole, gives no whole line: reading goes on)
            printed.extend(settled.feed(read.data.decode("utf-8", errors="replace")))

        def read() -> tuple[bool, list[str]]:
            printed.clear()
            follower.open(source, final=False)  # settled below, once the job has ended
            return follower.read(source, take, ONE_READ, look_at_size=False).moved, list(printed)

        while True:
            try:
                grew, lines = read()
            except Unreachable:
                # its host cannot be reached now (the job goes on there): the cursor has not moved,
                # so the log resumes where it stopped once the host answers again
                self.refresh()  # the record says since when
                time.sleep(interval)
                continue
            yield from lines
            if grew:
                continue
            if self.status.is_final:
                # the exit code is written after the job's output is closed: one more read drains it
                follower.settle(source)  # a streamed log: up to the end, not the stream's
                while True:
                    grew, lines = read()
                    yield from lines
                    if not grew:
                        break
                yield from settled.end(follower.cursor.pending)
                return
            time.sleep(interval)

    def metrics(self) -> dict[str, list[tuple[float, float]]]:
        """Every metric value the whole log gives, `{name: [(x, value), ...]}` in log order: x is the
        step or epoch where the log says one, else the seconds since the start, else the value's
        number (`metric_axes` says which).
        The names found on their own and the job's `--metric` definitions, as its view plots them."""
        return {name: [(x, value) for _, x, value in points] for name, points in self.metric_points().items()}

    def metric_axes(self) -> dict[str, str]:
        """What each metric's x is: "step", "epoch", "time" (seconds since the start) or "n" (its
        number in its series)."""
        return {name: points[0][0] for name, points in self.metric_points().items() if points}

    def metric_points(self) -> dict[str, list[tuple[str, float, float]]]:
        """`{name: [(axis, x, value), ...]}`: `metrics()` with what each x is."""
        return {
            name: list(zip(repeat(column.axis), column.xs, column.values))
            for name, column in self.metric_columns().items()
        }

    def metric_columns(self) -> dict[str, MetricColumn]:
        """Every metric value of the whole log, a list of xs and one of values per name: what
        `metric_points` gives, without a tuple per point (a log of millions of values)."""
        return job_metrics.metric_columns(self.record, self.run_dir, self.log_source)

    def latest_metrics(self, tail_bytes: int = LATEST_METRICS_BYTES) -> dict[str, float]:
        """Each metric's latest value, from the log's last `tail_bytes` only (a table of many jobs
        asks this of each: it never reads a whole log)."""
        return job_metrics.latest_metrics(self.record, self.log_source, tail_bytes)

    def log_source(self) -> LogSource:
        """The log, as the backend reads it for this record (made again once the record changes:
        a view asks at every poll)."""
        made = self._log_source
        if made is None or made[0] is not self.record:
            made = self._log_source = (self.record, self.backend_impl().log_source(self.record, self.run_dir))
        return made[1]

    def usage(self, interval: float = 1.0) -> Usage | None:
        """What the job uses now (CPU, memory, GPUs; a SageMaker job's instances), or None. The CPU %
        needs two looks: they are `interval` seconds apart (none with 0)."""
        backend = self.backend_impl()
        if self.record.status.is_final and not backend.usage_outlives_the_job:
            return None  # nothing of its own is left to look at (its container may run another job)
        look = backend.usage(self.record, self.run_dir)
        if look is None or look.cpu_seconds is None or interval <= 0:
            return look
        time.sleep(interval)
        second = backend.usage(self.record, self.run_dir)
        return cpu_between(look, second) if second is not None else look

    # -- what users do -----------------------------------------------------

    def stop(self, container: bool = False, wait: float | None = None) -> "Job":
        """Stop the job's whole process group (and its container with container=True), and wait up
        to `wait` seconds (default STOP_WAIT_SECONDS) for it to end, so that on every backend a stop
        is reported `stopped` once it is; a runtime still stopping after that keeps its status."""
        backend = self.backend_impl()
        if container and not backend.has_containers:
            raise InvalidOption(f"job {self.name!r} does not run in a container", "drop --container")
        self.refresh()
        if self.record.status.is_final and not container:
            return self
        was_requested = self.record.stop_requested
        if not self.record.status.is_final:
            self.request_stop()
        if self.record.runtime:
            try:
                backend.stop(self.record, self.run_dir, container=container)
            except TrainerError:
                # not stopped: a later end by someone else must not read as this user's stop
                self.undo_stop_request(was_requested)
                raise
            self.stop_sent()
        self.wait(STOP_WAIT_SECONDS if wait is None else wait, interval=1.0)
        return self

    def request_stop(self) -> bool:
        """Record the user's stop before it is sent (the job's end then reads as it, whoever ends
        it); whether it had been asked before, for `undo_stop_request` if it cannot be sent."""
        was_requested = self.record.stop_requested
        self.record = self._update_or_hold(mark_stop)
        return was_requested

    def undo_stop_request(self, was_requested: bool) -> None:
        self.record = self._update_or_hold(unmark_stop(was_requested))

    def stop_sent(self) -> None:  # its backend has the stop: a job that vanishes now was stopped
        self.record = self._update_or_hold(mark_stop_sent)

    def wait(self, timeout: float | None = None, interval: float = 0.5) -> Status:
        """Block until the job ends (or `timeout` seconds pass); return its status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.status.is_final:
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
        return self.record.status

    # -- keeping the record true ---------------------------------------------

    def refresh(self) -> "Job":
        """Ask the backend what it sees now and record any change of status."""
        question = self.status_question()
        if question is not None:
            self._record_answer(question())
        return self

    def status_question(self) -> Callable[[], Observation] | None:
        """What asks the backend for the job's status, as the stored record says it now (read again
        if it changed): a call that touches nothing of this handle, so that it may be made on
        another thread (a view's, see status_checks) while this one goes on. None once the job has
        ended: there is nothing to ask."""
        self._reload_record()
        if self.record.status.is_final:
            self._record_notification()
            return None
        record, run_dir, backend = self.record, self.run_dir, self.backend_impl()
        return lambda: _observe(backend, record, run_dir)

    def take_answer(self, seen: Observation) -> "Job":
        """Record what the backend saw (the answer to `status_question`'s call) as `refresh` does,
        against the record as it is stored now: it may have changed while the question was out."""
        self._reload_record()
        if self.record.status.is_final:
            self._record_notification()
            return self
        return self._record_answer(seen)

    def _record_answer(self, seen: Observation) -> "Job":
        outcome = resolve(self.record, seen)
        new_details = seen.details and any(self.record.runtime.get(k) != v for k, v in seen.details.items())
        starts = self.record.started_at is None and _has_started(seen)
        if (
            not new_details
            and not starts
            and (outcome.status, outcome.exit_code, outcome.reason, outcome.headline, outcome.unreachable_since)
            == (
                self.record.status,
                self.record.exit_code,
                self.record.reason,
                self.record.headline,
                self.record.unreachable_since,
            )
        ):
            return self

        disk_full = outcome.status is Status.FAILED and _disk_full(self.run_dir)
        # exit code 1 is how a Python script ends on an exception: then the exception says more (a
        # job killed, by SIGKILL say, may have printed a traceback it had handled long before)
        raised = (
            self._exception_line() if outcome.status is Status.FAILED and outcome.exit_code == PYTHON_RAISED else ""
        )

        def apply(record: JobRecord) -> None:
            latest = resolve(record, seen)  # again under the lock: a stop may have been asked meanwhile
            record.status, record.exit_code, record.reason, record.headline = (
                latest.status,
                latest.exit_code,
                latest.reason,
                latest.headline,
            )
            record.unreachable_since, record.unreachable_host = latest.unreachable_since, latest.unreachable_host
            if seen.details:
                record.runtime.update(seen.details)
            if raised and latest.reason_is_exit_code:
                record.reason = raised  # what the script raised says more than its exit code
            if disk_full and latest.status is Status.FAILED:
                record.reason += f"; the disk holding its log ({self.run_dir}) is full"
            if record.started_at is None and _has_started(seen):
                record.started_at = _start_time(record, seen.started_at)
            if latest.status.is_final and record.ended_at is None:
                record.ended_at = _end_time(record, seen.ended_at)

        try:
            self.record = self._update(apply)
        except StoreError:
            # the store is full or read-only: report the truth (in a record of its own: what was
            # drawn from the one before is drawn again), and record it later
            self.record = copy.deepcopy(self.record)
            apply(self.record)
            self._record_version = self._log_source = None  # read again next time, and tried again
        if self.record.status.is_final:
            self._record_notification()
        return self

    def _exception_line(self) -> str:
        """The exception a failed script ended with, from its log's last lines ("" if none)."""
        try:
            return exception_line(tail_lines(self.log_source(), EXCEPTION_LINES))
        except (OSError, TrainerError):
            return ""

    def _record_notification(self) -> None:
        """What came of --notify, once the notifier has written it: into the record, once."""
        if "notify_to" not in self.record.options or self.record.notification:
            return
        try:
            # only what the notifier wrote: a job can write the file too, but cannot sign it
            result = parse_notification(
                _fs.read_small(self.run_dir / NOTIFIED_FILE, 4096), notification_check(self.record, self.run_dir)
            )
        except (OSError, TrainerError):
            return
        if result is None:
            return

        def note(record: JobRecord) -> None:
            record.notification = record.notification or result

        try:
            self.record = self._update(note)
        except StoreError:
            note(self.record)
            self._record_version = None

    def confirm_run(self) -> None:
        """Raise JobReplaced if this handle's run was removed and its place taken by a new job (its
        log, at the same path, is another job's); UnknownJob if it is gone. One lstat while the
        record file is unchanged: a view calls it before each read of the log. The record held is
        kept (it may hold what the store could not record yet)."""
        version = _fs.version(self.run_dir / RECORD_FILE)
        if version is None or version not in (self._record_version, self._confirmed_version):
            self._same_run(self.store.load(self.name, self.run))
            self._confirmed_version = version

    def _same_run(self, stored: JobRecord) -> None:
        """Another job in this run's place means this one was removed and its name taken again (a
        record keeps its creation time for good): this handle must not follow, nor write, it."""
        if stored.created_at != self.record.created_at:
            raise JobReplaced(
                f"job {self.name!r} (run {self.run}) was removed and a new job of that name took its place",
                f"%train_attach {self.name} follows the new one",
            )

    def _update(self, change) -> JobRecord:
        """`store.update` of this handle's run, refused (JobReplaced, nothing written) if the record
        found under the lock is a new job's: a removal and a new submission may have come between
        this handle's last look and its write (while it asked the runtime, or waited for the lock)."""

        def change_ours(record: JobRecord) -> None:
            self._same_run(record)
            change(record)

        return self.store.update(self.name, self.run, change_ours)

    def _update_or_hold(self, change) -> JobRecord:
        """`_update`, or where the store cannot be written (full, read-only) the change made to this
        handle's record alone, as `_record_answer` does: a stop must reach the job even then (the
        job filling the disk is the one the user stops), and its supervisor's exit code says it
        was stopped once the store has room to record it."""
        try:
            return self._update(change)
        except StoreError:
            held = copy.deepcopy(self.record)
            change(held)
            self._record_version = None  # read again next time
            return held

    def _reload_record(self) -> None:
        """The record as stored, read again only once its file has changed: a status check of a
        quiet job costs one lstat, not a read and a JSON parse. (The store writes a record by
        replacing its file, so each write gives it a new version.)"""
        version = _fs.version(self.run_dir / RECORD_FILE)  # before the read: a write meanwhile is read next time
        if version is None or version != self._record_version:
            record = self.store.load(self.name, self.run)
            self._same_run(record)
            self.record = record
            self._record_version = version

    def backend_impl(self) -> Backend:
        """The backend object that runs this job (`backend` is its name)."""
        try:
            return self.backends.get(self.backend)
        except UnknownBackend:
            raise InvalidOption(f"job {self.name!r} uses the unknown backend {self.backend!r}") from None


def _has_started(seen: Observation) -> bool:
    """Whether the observation shows a job that has started (running, or ended after it ran)."""
    return seen.started or seen.started_at is not None


def _start_time(record: JobRecord, reported: float | None) -> float:
    """When a job that waited in a queue started: as reported (a file's time, which the job can
    touch), kept between its creation and now; now if unknown."""
    now = time.time()
    if reported is None:
        return now
    return min(max(reported, record.created_at), max(now, record.created_at))


def _observe(backend: Backend, record: JobRecord, run_dir: Path) -> Observation:
    """What `backend` sees of the job of `record` now."""
    if not record.runtime:
        # still being launched: pending while the submitting process lives
        submitter = record.submitter
        if submitter and not ProcessIdentity.from_dict(submitter).is_alive():
            return Observation(alive=False, why_gone="the submission was interrupted before the job started")
        return Observation(alive=True, started=False)
    try:
        return backend.observe(record, run_dir)
    except Unreachable as error:
        # the host may be down or this machine offline: that says nothing of the job, which
        # keeps its status and says since when its host could not be reached (see resolve)
        return Observation(alive=None, why_gone=str(error), unreachable_host=error.host)
    except BackendUnavailable as error:
        return Observation(alive=None, why_gone=str(error))


def _end_time(record: JobRecord, reported: float | None) -> float:
    """When the job ended: as reported (a file's time, whole seconds where it was read through the
    engine, or another clock), kept between its start and now; now if unknown."""
    now = time.time()
    started = record.started_at
    if started is not None and now < started:
        # this reader's clock is behind the one that recorded the start (it was set back, or it is
        # another machine's): the job's own report, or its start, is nearer the truth than now
        return reported if reported is not None and reported >= started else started
    if reported is None:
        return now
    return min(max(reported, started or reported), now)


def _disk_full(path: Path) -> bool:
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    return stats.f_bavail == 0 or stats.f_bfree == 0


def get_job(name: str, store: JobStore | None = None, backends: _backends.Backends | None = None) -> Job:
    """The latest run of the job called `name`, refreshed."""
    return Job.load(name, store, backends).refresh()


def refreshed_records(
    store: JobStore | None = None, all_runs: bool = False, backends: _backends.Backends | None = None
) -> list[JobRecord | TrainerError]:
    """Every job's latest run (every run with all_runs), brought up to date, oldest first.
    A record that cannot be read is kept in the list as its error, after the others."""
    store = store or JobStore()
    records: list[JobRecord] = []
    problems: list[TrainerError] = []
    items = list(store.records(all_runs))
    with one_poll(items, backends or _backends.DEFAULT):
        for item in items:
            if isinstance(item, TrainerError):
                problems.append(item)
                continue
            if not item.status.is_final:
                try:
                    item = Job(item, store, backends).refresh().record
                except TrainerError:
                    pass  # shown as last recorded
            records.append(item)
    return [*sorted(records, key=lambda record: record.created_at), *problems]


@contextlib.contextmanager
def one_poll(items: list, backends: _backends.Backends) -> Iterator[None]:
    """Refreshing many jobs is one poll: a backend that can answer for all its jobs at once (an
    `polling()` context: Slurm's one squeue) is told where the poll starts and ends."""
    with contextlib.ExitStack() as stack:
        for name in sorted(
            {item.backend for item in items if isinstance(item, JobRecord) and not item.status.is_final}
        ):
            try:
                backend = backends.get(name)
            except UnknownBackend:
                continue
            stack.enter_context(backend.polling())
        yield


def list_jobs(
    store: JobStore | None = None, all_runs: bool = False, backends: _backends.Backends | None = None
) -> list[Job]:
    """Every job's latest run (every run with all_runs), oldest first, refreshed."""
    store = store or JobStore()
    items = refreshed_records(store, all_runs, backends)
    return [Job(item, store, backends) for item in items if isinstance(item, JobRecord)]
