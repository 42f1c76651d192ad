"""What Slurm says of the jobs a store follows, at the cost of one `squeue` per poll.

`squeue --me --states=all` answers for every job of this user the controller still holds (queued,
running, and those ended within its MinJobAge), so one call serves every job of a poll: the answer
is kept for `TTL` seconds and shared by all the jobs (and kernels' threads) of this process. Only
jobs the controller no longer holds are asked of accounting (`sacct`), all at once, with the
earliest submission time as its start (job ids are reused); a final answer is kept for good.
Without accounting ("accounting storage is disabled"), that is remembered, and the supervisor's
files say how such a job ended.

A job id alone names no job: the entry must also have the job's name and have been submitted no
earlier than the record says (a controller whose state was reset counts from 1 again).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from .commands import SlurmCommandFailed, run

TTL = 2.0  # seconds an squeue answer serves every job of a poll
SUBMIT_SLACK = 120.0  # seconds a submission time may be earlier than recorded (whole seconds, clocks)

# squeue -O: the name last, as it is the one field a user's own jobs may fill with anything
SQUEUE_FIELDS = ("JobID", "State", "Reason", "NodeList", "Partition", "SubmitTime", "RestartCnt", "TimeLimit", "Name")
SACCT_FIELDS = ("JobIDRaw", "State", "Reason", "NodeList", "Partition", "Submit", "ExitCode", "Timelimit", "JobName")

ACTIVE_STATES = {
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING",
    "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "POWER_UP_NODE",
}  # fmt: skip
WAITING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "POWER_UP_NODE"}


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm shows it."""

    job_id: str
    state: str  # RUNNING, PENDING, TIMEOUT, CANCELLED, ...
    reason: str = ""  # why it waits (Priority, Resources, BeginTime, ...), or how it ended
    node_list: str = ""
    partition: str = ""
    submitted_at: float | None = None
    restarts: int | None = None
    time_limit: str = ""
    name: str = ""
    cancelled_by: str = ""  # accounting's "CANCELLED by UID": the uid
    exit_code: str = ""  # accounting's "CODE:SIGNAL"
    source: str = "squeue"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    def is_the_job(self, name: str, submitted_at: float) -> bool:
        """Whether this entry is the job submitted as `name` at `submitted_at` (not another job
        that has its id since)."""
        if self.name and self.name != name:
            return False
        return self.submitted_at is None or self.submitted_at >= submitted_at - SUBMIT_SLACK


def _when(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _count(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def parse_squeue(output: str) -> dict[str, SlurmJob]:
    jobs = {}
    for line in output.splitlines():
        parts = line.split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS) or not parts[0].strip():
            continue
        job_id, state, reason, nodes, partition, submitted, restarts, limit, name = (part.strip() for part in parts)
        name = name[:-1] if name.endswith("|") else name  # the suffix after the last field
        jobs[job_id] = SlurmJob(
            job_id, state.split()[0] if state else "", "" if reason in ("None", "(null)") else reason, "" if nodes in ("(null)",) else nodes,
            partition, _when(submitted), _count(restarts), limit, name,
        )  # fmt: skip
    return jobs


def parse_sacct(output: str) -> dict[str, SlurmJob]:
    """The latest row of each job (with -D, one row per attempt: the earlier ones count as restarts)."""
    rows: dict[str, list[SlurmJob]] = {}
    for line in output.splitlines():
        parts = line.split("|", len(SACCT_FIELDS) - 1)
        if len(parts) != len(SACCT_FIELDS) or not parts[0].strip():
            continue
        job_id, state, reason, nodes, partition, submitted, exit_code, limit, name = (part.strip() for part in parts)
        words = state.split()
        cancelled_by = words[2] if len(words) == 3 and words[1] == "by" else ""
        rows.setdefault(job_id, []).append(
            SlurmJob(
                job_id, words[0] if words else "", "" if reason in ("None", "(null)") else reason, "" if nodes in ("None assigned", "(null)") else nodes,
                partition, _when(submitted), None, limit, name, cancelled_by, exit_code, source="sacct",
            )  # fmt: skip
        )
    found = {}
    for job_id, attempts in rows.items():
        latest = attempts[-1]
        found[job_id] = SlurmJob(**{**latest.__dict__, "restarts": len(attempts) - 1})
    return found


class Queue:
    """What squeue (and accounting) said lately, shared by every job of this process."""

    def __init__(self, ttl: float = TTL, clock: Callable[[], float] = time.time):
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._asked_at: float | None = None
        self._jobs: dict[str, SlurmJob] = {}
        self._error: Exception | None = None
        self._ended: dict[str, SlurmJob] = {}  # accounting's final answers, kept
        self._accounting_asked_at: float | None = None
        self._accounting_asked: set[str] = set()
        self.accounting = True  # until sacct says it is disabled
        self._pinned = 0  # polls under way: an answer got since the first began serves them to their end
        self._poll_started = 0.0

    @contextlib.contextmanager
    def one_poll(self):
        """A poll of many jobs: one squeue answer serves it to its end, however long it takes."""
        with self._lock:
            if not self._pinned:
                self._poll_started = self.clock()
            self._pinned += 1
        try:
            yield
        finally:
            with self._lock:
                self._pinned -= 1

    def _serves_the_poll(self, asked_at: float) -> bool:
        return bool(self._pinned) and asked_at >= self._poll_started

    def reset(self) -> None:
        """As new: nothing known (another cluster, say)."""
        with self._lock:
            self._asked_at, self._jobs, self._error = None, {}, None
            self._ended, self._accounting_asked_at, self._accounting_asked = {}, None, set()
            self.accounting = True

    def forget(self) -> None:
        """The next question asks squeue again (a poll just submitted or cancelled a job)."""
        with self._lock:
            self._asked_at = None

    def job(self, job_id: str, name: str, submitted_at: float) -> SlurmJob | None:
        """The job as squeue shows it now, or None when the controller no longer holds it.
        Raises Unreachable (again, for `TTL` seconds) when the controller cannot be reached."""
        with self._lock:
            now = self.clock()
            stale = self._asked_at is None or self._asked_at < submitted_at or (now - self._asked_at > self.ttl and not self._serves_the_poll(self._asked_at))
            if stale:
                try:
                    self._jobs = parse_squeue(
                        run("squeue", "--me", "--states=all", "--noheader", "-O", ",".join(f"{field}:|" for field in SQUEUE_FIELDS))
                    )
                    self._error = None
                except Exception as error:  # kept: every job of this poll is told the same
                    self._error = error
                self._asked_at = now
            if self._error is not None:
                raise self._error
            found = self._jobs.get(job_id)
        return found if found is not None and found.is_the_job(name, submitted_at) else None

    def ended(self, job_id: str, name: str, submitted_at: float, followed: Callable[[], Iterable[tuple[str, str, float]]]) -> SlurmJob | None:
        """How accounting says a job the controller no longer holds ended (None: accounting is
        disabled, or knows nothing of it). One sacct asks for it and for every other job of
        `followed()` ((job id, name, submitted at) of the store's unfinished Slurm jobs) that the
        controller no longer holds either."""
        with self._lock:
            if job_id in self._ended:
                found = self._ended[job_id]
                return found if found.is_the_job(name, submitted_at) else None
            if not self.accounting:
                return None
            now = self.clock()
            fresh = self._accounting_asked_at is not None and (
                now - self._accounting_asked_at <= self.ttl or self._serves_the_poll(self._accounting_asked_at)
            )
            if fresh and job_id in self._accounting_asked:
                return None  # asked in this poll: accounting does not have it (yet)
            wanted = {job_id: submitted_at}
            for other, _name, at in followed():
                if other not in self._jobs and other not in self._ended:
                    wanted[other] = at
            start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(min(wanted.values()) - SUBMIT_SLACK))
            try:
                output = run(
                    "sacct", "--noheader", "--parsable2", "--allocations", "--duplicates", f"--jobs={','.join(sorted(wanted))}",
                    f"--starttime={start}", "--endtime=now", f"--format={','.join(SACCT_FIELDS)}",
                )  # fmt: skip
            except SlurmCommandFailed as error:
                if "accounting storage is disabled" in error.message.lower() or "slurmdbd" in error.message.lower():
                    self.accounting = "slurmdbd" in error.message.lower()  # a slurmdbd down now may answer later
                return None
            self._accounting_asked_at, self._accounting_asked = now, set(wanted)
            for other, found in parse_sacct(output).items():
                if other in wanted and not found.active:
                    self._ended[other] = found
            found = self._ended.get(job_id)
        return found if found is not None and found.is_the_job(name, submitted_at) else None


QUEUE = Queue()
