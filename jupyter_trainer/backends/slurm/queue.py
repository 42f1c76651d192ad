"""What Slurm says of the jobs a store follows, at the cost of one `squeue` per poll.

`squeue --me --states=all` answers for every job of this user the controller still holds (queued,
running, and those ended within its MinJobAge), so one call serves every job of a poll: the answer
is kept for `TTL` seconds and shared by all the jobs (and kernels' threads) of this process. Only
jobs the controller no longer holds are asked of accounting (`sacct`), all at once, with the
earliest submission time as its start (job ids are reused); a final answer is kept for good.
Without accounting ("accounting storage is disabled"), that is remembered, and the supervisor's
files say how such a job ended.

An answer is read whole or not at all: each field ends with a separator made afresh for each
call (a job's name, which another job of the user may fill with anything, newlines included,
cannot end a field or a line early), and an answer with anything squeue never prints is
`UnusableAnswer`, as if the controller could not be reached. A job missing from a good answer is
not taken as gone on its word alone: `scontrol show job ID` is asked first (`confirm`).

A job id alone names no job: the entry must also have the job's name and its log (the --output
it was submitted with), and have been submitted no earlier than the record says (a controller
whose state was reset counts from 1 again). A run removed and submitted again has the same name
and log: what tells its job from the earlier run's (a cancelled job stays listed for a while) is
the token its submission put in the job's batch command, which nobody can change afterwards (not
even the job, which can rename itself). Which id and token to look for is read from the record,
which the job can rewrite, and a job can submit a decoy whose command holds its token: the entry
with the record's id that holds the token is the run's, whatever was submitted later; else the
newest entry that holds it (the record's id was rewritten); else the entry with the record's id, if
it has the run's name and log (the token was rewritten). See `the_runs`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from .commands import SlurmCommandFailed, UnusableAnswer, run

TTL = 2.0  # seconds an squeue answer serves every job of a poll
SUBMIT_SLACK = 120.0  # seconds a submission time may be earlier than recorded (whole seconds, clocks)
MAX_ANSWER_CHARS = 64 << 20  # an squeue answer past this is not read (a user's jobs take a few MB)

# squeue -O: the name last, the one field a user's other jobs fill with anything (the command too)
# (JobArrayID: a job's id, or an array's task as ARRAY_TASK, which -r lists one per line)
SQUEUE_FIELDS = (
    "JobArrayID",
    "State",
    "Reason",
    "NodeList",
    "Partition",
    "SubmitTime",
    "RestartCnt",
    "TimeLimit",
    "UserID",
    "STDOUT",
    "Command",
    "Name",
)
SACCT_FIELDS = ("JobID", "State", "Reason", "NodeList", "Partition", "Submit", "ExitCode", "Timelimit", "JobName")

ACTIVE_STATES = {
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING",
    "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "POWER_UP_NODE",
}  # fmt: skip
WAITING_STATES = {
    "PENDING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "SPECIAL_EXIT",
    "POWER_UP_NODE",
}
FINAL_STATES = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
    "REVOKED",
}

# What squeue prints in its fields: a job id (of an array's task or a heterogeneous job's part too),
# a state; anything else in them is an answer squeue did not give
SQUEUE_JOB_ID = re.compile(r"\d{1,12}(?:_(?:\d{1,10}|\[[0-9,%\-]{1,200}\]))?(?:\+\d{1,6})?")
STATE_WORD = re.compile(r"[A-Z][A-Z_]{0,31}")
OUR_JOB_ID = re.compile(r"\d{1,12}")
ARRAY_TASK_ID = re.compile(r"(\d{1,12})_(\d{1,10})")  # one task of a job array, as squeue -r and sacct name it


@dataclass(frozen=True)
class JobIdentity:
    """What makes a Slurm job this run's, whatever its id: its name, its log (the --output it was
    submitted with, as squeue shows it), when it was submitted, and the token its submission put
    in its batch command ("" for a job submitted before there were tokens)."""

    name: str
    submitted_at: float
    log: str = ""
    token: str = ""


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
    user_id: str = ""
    log: str = ""  # its --output, as given
    command: str | None = None  # its batch script and arguments, as given (None: not shown, as by sacct)
    held: bool = False  # held by its user (squeue's reason code JobHeldUser: sbatch --hold, scontrol hold)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    @property
    def known(self) -> bool:
        """Whether its state is one this code knows (a newer Slurm's may not be)."""
        return self.state in ACTIVE_STATES or self.state in FINAL_STATES

    def is_the_job(self, identity: JobIdentity) -> bool:
        """Whether this entry is the job of `identity` (not another job that has its id since,
        nor one of the same name elsewhere)."""
        if self.name and self.name != identity.name:
            return False
        if self.log and identity.log and self.log != identity.log:
            return False
        if identity.token and self.command is not None and f" {identity.token} " not in f"{self.command} ":
            return False  # an earlier run's of the same name and log, or another's
        return self.submitted_at is None or self.submitted_at >= identity.submitted_at - SUBMIT_SLACK

    @property
    def submission_order(self) -> tuple[float, int]:
        """Later for a later submission: its time (whole seconds), then its id."""
        return (self.submitted_at or 0.0, int(self.job_id) if _is_number(self.job_id) else 0)


def _when(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _count(text: str) -> int | None:
    text = text.strip()
    return int(text) if _is_number(text) else None


def _is_number(text: str) -> bool:
    """ASCII digits only: "²" is a digit to str.isdigit, not to int."""
    return text.isascii() and text.isdigit()


def squeue_format(separator: str) -> str:
    """squeue's -O for SQUEUE_FIELDS, each field ended by `separator`."""
    return ",".join(f"{field}:{separator}" for field in SQUEUE_FIELDS)


def new_separator() -> str:
    """A field separator no job can have put in its name beforehand."""
    return f"|{secrets.token_hex(8)}|"


def parse_squeue(output: str, separator: str, user_id: str | None = None) -> dict[str, SlurmJob]:
    """The jobs of an squeue answer printed with `squeue_format(separator)`, by id: every field
    ends with the separator, every line with its last one. UnusableAnswer when the answer is not
    all of that shape (cut short, garbled, a field squeue never prints, an id twice). Entries of
    another user than `user_id` are left out."""
    if len(output) > MAX_ANSWER_CHARS:
        raise UnusableAnswer("squeue", f"more than {MAX_ANSWER_CHARS >> 20} MB")
    fields = output.split(separator)
    count = len(SQUEUE_FIELDS)
    if (output and fields[-1] != "\n") or (len(fields) - 1) % count:
        raise UnusableAnswer("squeue", "a line cut short or not of the format asked for")
    jobs: dict[str, SlurmJob] = {}
    for index in range(0, len(fields) - 1, count):
        values = fields[index : index + count]
        if index and not values[0].startswith("\n"):
            raise UnusableAnswer("squeue", "a line that does not end where the format says")
        job = _squeue_entry([value.strip() for value in values])
        if job.job_id in jobs:
            raise UnusableAnswer("squeue", f"job {job.job_id} listed twice")
        if user_id is None or job.user_id == user_id:
            jobs[job.job_id] = job
    return jobs


def _squeue_entry(values: list[str]) -> SlurmJob:
    job_id, state, reason, nodes, partition, submitted, restarts, limit, user_id, log, command, name = values
    if not SQUEUE_JOB_ID.fullmatch(job_id):
        raise UnusableAnswer("squeue", f"a job id {job_id[:20]!r}")
    if not STATE_WORD.fullmatch(state):
        raise UnusableAnswer("squeue", f"a state {state[:20]!r} of job {job_id}")
    if not _is_number(user_id) or (restarts and not _is_number(restarts)):
        raise UnusableAnswer("squeue", f"a user or restart count that is not a number for job {job_id}")
    return SlurmJob(
        job_id, state, "" if reason in ("None", "(null)") else reason, "" if nodes in ("(null)",) else nodes,
        partition, _when(submitted), _count(restarts), limit, name, user_id=user_id, log="" if log == "(null)" else log,
        command=command, held=reason == "JobHeldUser",
    )  # fmt: skip


def parse_scontrol(output: str, job_id: str, identity: JobIdentity) -> SlurmJob | None:
    """`scontrol show job --oneliner ID`'s answer, if it is the job of `identity` (its name, which
    has no space, then the fields read: none of them a user's text). None: another job has the id."""
    line = output.split("\n", 1)[0]
    # the command runs to the fields that follow it (its arguments are a user's text)
    command_at = line.find(" Command=")
    command = line[command_at + len(" Command=") :].split(" WorkDir=", 1)[0] if command_at >= 0 else ""
    head = _scontrol_head(job_id).match(line)
    if head is None:
        raise UnusableAnswer("scontrol", f"no JobId={job_id} at its start")
    prefix = f"{head.group(0)}JobName={identity.name} "
    if not line.startswith(prefix):
        return None
    values: dict[str, str] = {}
    for word in line[len(prefix) :].split(" "):
        key, _, value = word.partition("=")
        values.setdefault(key, value)
        if key == "StdErr":
            break  # paths and commands follow: a user's text
    state = values.get("JobState", "")
    if not STATE_WORD.fullmatch(state):
        raise UnusableAnswer("scontrol", f"a state {state[:20]!r} of job {job_id}")
    user = values.get("UserId", "")
    job = SlurmJob(
        job_id, state, "" if values.get("Reason") in (None, "None", "(null)") else values["Reason"],
        "" if values.get("NodeList") in (None, "(null)") else values["NodeList"],
        values.get("Partition", ""), _when(values.get("SubmitTime", "")), _count(values.get("Restarts", "")),
        values.get("TimeLimit", ""), identity.name, exit_code=values.get("ExitCode", ""), source="scontrol",
        user_id=user[user.find("(") + 1 : -1] if user.endswith(")") else "", command=command,
    )  # fmt: skip
    if job.user_id != str(os.getuid()) or not job.is_the_job(identity):
        return None
    return job


def _scontrol_head(job_id: str) -> re.Pattern:
    """What `scontrol show job` begins with for `job_id`: "JobId=ID ", or for an array's task
    "JobId=ITS_OWN_ID ArrayJobId=ARRAY ArrayTaskId=TASK " (and its throttle, if set)."""
    task = ARRAY_TASK_ID.fullmatch(job_id)
    if task is None:
        return re.compile(f"JobId={re.escape(job_id)} ")
    return re.compile(
        rf"JobId=\d{{1,12}} ArrayJobId={task.group(1)} ArrayTaskId={task.group(2)} (?:ArrayTaskThrottle=\d{{1,10}} )?"
    )


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
                job_id,
                words[0] if words else "",
                "" if reason in ("None", "(null)") else reason,
                "" if nodes in ("None assigned", "(null)") else nodes,
                partition,
                _when(submitted),
                None,
                limit,
                name,
                cancelled_by,
                exit_code,
                source="sacct",
            )  # fmt: skip
        )
    found = {}
    for job_id, attempts in rows.items():
        latest = attempts[-1]
        found[job_id] = SlurmJob(**{**latest.__dict__, "restarts": len(attempts) - 1})
    return found


def find_by_identity(identity: JobIdentity, timeout: float) -> SlurmJob | None:
    """The job squeue shows as the one of `identity`, asked now and alone (a submission that
    failed or was interrupted may have left it)."""
    return newest_of(named_now(identity.name, timeout), identity)


def named_now(name: str, timeout: float) -> list[SlurmJob]:
    """Every job (an array's tasks each) of this user that squeue shows under `name`, asked now."""
    separator = new_separator()
    output = run(
        "squeue",
        "--me",
        "--states=all",
        "--array",
        "--noheader",
        f"--name={name}",
        "-O",
        squeue_format(separator),
        timeout=timeout,
    )
    return list(parse_squeue(output, separator, str(os.getuid())).values())


def newest_of(jobs: Iterable[SlurmJob], identity: JobIdentity) -> SlurmJob | None:
    """Of `jobs`, the newest submission that is the job of `identity` by its name and log (and
    token), whatever its id: a run's job is submitted after any earlier run's of that name and log."""
    if not identity.log:
        return None
    found = [
        job
        for job in jobs
        if OUR_JOB_ID.fullmatch(job.job_id)
        and job.name == identity.name
        and job.log == identity.log
        and job.is_the_job(identity)
    ]
    return max(found, key=lambda job: job.submission_order, default=None)


def the_runs(by_id: SlurmJob | None, named: Iterable[SlurmJob], identity: JobIdentity) -> SlurmJob | None:
    """Which entry of an answer is the run's job: `by_id`, the entry with the record's id, and
    `named`, the entries of the run's name. The token and the id to look for are read from the
    record, which the job can rewrite; what they are looked for in (a job's command) it cannot
    change, but it can submit a decoy whose command holds its token. So: the entry with the
    record's id that holds the token; else the newest that holds it (the id was rewritten); else
    the entry with the record's id, if it has the run's name and log (the token was rewritten)."""
    if not identity.token:  # submitted before there were tokens: the newest of its name and log
        newest = newest_of(named, identity)
        if by_id is None or not by_id.is_the_job(identity):
            return newest
        return newest if newest is not None and newest.submission_order > by_id.submission_order else by_id
    if by_id is not None and by_id.command is not None and by_id.is_the_job(identity):
        return by_id
    newest = newest_of(named, identity)
    if newest is not None:
        return newest
    untokened = dataclasses.replace(identity, token="")
    if (
        by_id is not None
        and identity.log
        and by_id.name == identity.name
        and by_id.log == identity.log
        and by_id.is_the_job(untokened)
    ):
        return by_id
    return None


class Queue:
    """What squeue (and accounting) said lately, shared by every job of this process."""

    def __init__(self, ttl: float = TTL, clock: Callable[[], float] = time.time):
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()  # over what is known, never over a command: held for a moment only
        # One command at a time: a question that comes while squeue (or sacct) runs waits for its
        # answer, which serves it too. `one_poll`, `forget` and `reset` take only the other lock:
        # the kernel's poller, which calls them, never waits for a command (its views' questions
        # are asked on threads of their own, see status_checks).
        self._asking = threading.Lock()
        self._generation = 0  # moved on by forget and reset: an answer asked before then is not kept as fresh
        self._asked_at: float | None = None
        self._jobs: dict[str, SlurmJob] = {}
        self._named: dict[str, list[SlurmJob]] = {}  # the same entries, by name
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
            self._generation += 1
            self._asked_at, self._jobs, self._named, self._error = None, {}, {}, None
            self._ended, self._accounting_asked_at, self._accounting_asked = {}, None, set()
            self.accounting = True

    def forget(self) -> None:
        """The next question asks squeue again (a poll just submitted or cancelled a job)."""
        with self._lock:
            self._generation += 1
            self._asked_at = None

    def job(self, job_id: str, identity: JobIdentity) -> SlurmJob | None:
        """The job as squeue shows it now (by its id and identity, see `the_runs`), or None when
        the controller's answer does not hold it. Raises
        Unreachable or UnusableAnswer (again, for `TTL` seconds) when the controller cannot be
        reached or its answer cannot be read."""
        with self._asking:
            with self._lock:
                now, generation = self.clock(), self._generation
                asked, jobs, named, error = self._asked_at, self._jobs, self._named, self._error
                stale = (
                    asked is None
                    or asked < identity.submitted_at
                    or (now - asked > self.ttl and not self._serves_the_poll(asked))
                )
            if stale:
                try:
                    separator = new_separator()
                    output = run(
                        "squeue", "--me", "--states=all", "--array", "--noheader", "-O", squeue_format(separator)
                    )
                    jobs, error = parse_squeue(output, separator, str(os.getuid())), None
                except Exception as failure:  # kept: every job of this poll is told the same
                    jobs, error = {}, failure
                named = {}
                for entry in jobs.values():
                    named.setdefault(entry.name, []).append(entry)
                with self._lock:
                    self._jobs, self._named, self._error = jobs, named, error
                    # asked before a forget: it answers this question, not the next one
                    self._asked_at = now if generation == self._generation else None
        if error is not None:
            raise error
        return the_runs(jobs.get(job_id), named.get(identity.name, ()), identity)

    def confirm(self, job_id: str, identity: JobIdentity) -> SlurmJob | None:
        """The job as `scontrol show job ID` shows it: asked by its id, before a job that squeue
        does not list (or lists as ended with no exit code) is taken as gone. None: the controller
        does not know the id, or it is another job's."""
        try:
            output = run("scontrol", "show", "job", "--oneliner", job_id)
        except SlurmCommandFailed as error:
            if error.unknown_job:
                return None
            raise
        return parse_scontrol(output, job_id, identity)

    def ended(
        self, job_id: str, identity: JobIdentity, followed: Callable[[], Iterable[tuple[str, str, float]]]
    ) -> SlurmJob | None:
        """How accounting says a job the controller no longer holds ended (None: accounting is
        disabled, or knows nothing of it). One sacct asks for it and for every other job of
        `followed()` ((job id, name, submitted at) of the store's unfinished Slurm jobs) that the
        controller no longer holds either."""
        with self._asking:
            with self._lock:
                if job_id in self._ended:
                    found = self._ended[job_id]
                    return found if found.is_the_job(identity) else None
                if not self.accounting:
                    return None
                now = self.clock()
                fresh = self._accounting_asked_at is not None and (
                    now - self._accounting_asked_at <= self.ttl or self._serves_the_poll(self._accounting_asked_at)
                )
                if fresh and job_id in self._accounting_asked:
                    return None  # asked in this poll: accounting does not have it (yet)
                listed, ended = self._jobs, dict(self._ended)
            wanted = {job_id: identity.submitted_at}
            for other, _name, at in followed():
                if other not in listed and other not in ended:
                    wanted[other] = at
            start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(min(wanted.values()) - SUBMIT_SLACK))
            try:
                output = run(
                    "sacct", "--noheader", "--parsable2", "--allocations", "--duplicates",
                    f"--jobs={','.join(sorted(wanted))}", f"--starttime={start}", "--endtime=now",
                    f"--format={','.join(SACCT_FIELDS)}",
                )  # fmt: skip
            except SlurmCommandFailed as error:
                if error.no_accounting:
                    with self._lock:
                        self.accounting = error.accounting_down  # a slurmdbd down now may answer later
                return None
            with self._lock:
                self._accounting_asked_at, self._accounting_asked = now, set(wanted)
                for other, found in parse_sacct(output).items():
                    if other in wanted and found.known and not found.active:
                        self._ended[other] = found
                found = self._ended.get(job_id)
        return found if found is not None and found.is_the_job(identity) else None


QUEUE = Queue()
