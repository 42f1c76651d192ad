"""The job record, its statuses, and the rules that move a job between them.

Pure logic: nothing here touches the disk, a process or a runtime. The store
persists records; backends report what they observe as an `Observation`;
`resolve` turns the two into the job's status.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidName
from .wording import describe_exit_code, format_duration, readable  # noqa: F401  (said here for every reader)

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


class Status(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES

    def __str__(self) -> str:
        return self.value


FINAL_STATUSES = frozenset({Status.COMPLETED, Status.FAILED, Status.STOPPED, Status.LOST})


def validate_name(name: str, what: str = "job name") -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        shown = name if len(str(name)) <= 40 else str(name)[:37] + "..."
        raise InvalidName(
            f"invalid {what} {shown!r}",
            "use 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit",
        )
    return name


def generate_name(prefix: str = "job") -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{prefix}-{stamp}-{secrets.token_hex(3)}"


@dataclass
class JobRecord:
    """What the store keeps about one run of a job. Never holds secrets."""

    name: str
    backend: str
    run: int = 1
    status: Status = Status.PENDING
    reason: str = ""
    exit_code: int | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    fingerprint: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    submitter: dict[str, Any] = field(default_factory=dict)
    stop_requested: bool = False
    # whether a requested stop was handed to the backend (None: no stop asked, or asked by a version
    # that did not say): a stopper killed in between must not make a vanished job "stopped by the user"
    stop_sent: bool | None = None
    # while the job's runtime cannot be asked (a remote host offline): since when, and which host
    unreachable_since: float | None = None
    unreachable_host: str = ""
    notification: dict[str, Any] = field(default_factory=dict)  # with --notify: what came of it
    # a failure's reason that says more than a line: what went wrong in one, as its backend read it
    # (SageMaker's: the exception in its FailureReason); "": the reason's first line says it
    headline: str = ""
    # what produced the run, where known: {"git": {"commit", "dirty", "untracked", "diff"}} (jobs/provenance.py)
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "JobRecord":
        """A record as stored; ValueError for one whose fields are not of their types."""
        if not isinstance(data, dict):
            raise ValueError(f"a record is an object, not {type(data).__name__}")
        values = {key: value for key, value in data.items() if key in _FIELD_TYPES}
        for key, value in values.items():
            kinds = _FIELD_TYPES[key]
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise ValueError(f"{key} is {type(value).__name__}")
            low, high = _RANGES.get(key, (None, None))
            if low is not None and value is not None and not low <= value <= high:  # also false for nan
                raise ValueError(f"{key} is out of range")
        values["status"] = Status(values.get("status", "pending"))
        return cls(**values)

    @property
    def duration(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else time.time()
        return max(0.0, end - self.started_at)


_NUMBER = (int, float)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "backend": (str,), "run": (int,), "status": (str,), "reason": (str,), "headline": (str,),
    "exit_code": (int, type(None)), "created_at": _NUMBER, "started_at": (*_NUMBER, type(None)),
    "ended_at": (*_NUMBER, type(None)), "fingerprint": (str,), "options": (dict,), "runtime": (dict,),
    "submitter": (dict,), "stop_requested": (bool,), "stop_sent": (bool, type(None)), "notification": (dict,),
    "unreachable_since": (*_NUMBER, type(None)), "unreachable_host": (str,), "provenance": (dict,),
}  # fmt: skip
# Numbers a record can hold: times are seconds since 1970 (until the year 5000), runs and exit
# codes are small. Anything else (nan, inf, 1e309, 300 digits) was not written by us.
_RANGES = {
    "created_at": (0, 1e11), "started_at": (0, 1e11), "ended_at": (0, 1e11), "unreachable_since": (0, 1e11),
    "run": (1, 10**9), "exit_code": (-(2**31), 2**31),
}  # fmt: skip


@dataclass(frozen=True)
class Observation:
    """What a backend saw of a job's process when asked just now."""

    exit_code: int | None = None  # written by the supervisor when the job ended
    alive: bool | None = None  # None: the runtime could not be asked
    started: bool = False  # the supervisor has recorded the job's pid
    why_gone: str = ""  # when not alive: what the backend saw
    ended_at: float | None = None  # when the exit code was written, if known
    # when a job that waited in a queue started, if known (see Backend.starts_at_launch)
    started_at: float | None = None
    stopped: bool | None = None  # with exit_code: whether the supervisor stopped the job (None: unknown)
    final: "Status | None" = None  # a runtime that reports its own final status (SageMaker)
    reason: str = ""  # with `final`: the runtime's words for it; with alive and not started: why it waits
    headline: str = ""  # with `final`: what went wrong in a line, where the reason says more (see JobRecord)
    details: dict | None = None  # facts the runtime reports, kept in the record's runtime (SageMaker)
    unreachable_host: str = ""  # with alive None: the host that could not be reached (its jobs keep their status)


@dataclass(frozen=True)
class Resolution:
    status: Status
    exit_code: int | None = None
    reason: str = ""
    unreachable_since: float | None = None  # the job's host cannot be reached, since then
    unreachable_host: str = ""
    headline: str = ""  # see JobRecord
    reason_is_exit_code: bool = False  # the reason is the exit code's words: the job's runtime said no more


def resolve(record: JobRecord, seen: Observation, now: float | None = None) -> Resolution:
    """The status a job has now, given its record and a fresh observation (made at `now`)."""
    if record.status.is_final:
        return Resolution(record.status, record.exit_code, record.reason, headline=record.headline)
    # a runtime's words can be the job's own (a failure file, what Slurm was told): kept readable
    seen = dataclasses.replace(
        seen, reason=readable(seen.reason), headline=readable(seen.headline), why_gone=readable(seen.why_gone)
    )
    stop_sent = record.stop_requested and record.stop_sent is not False
    if seen.final is not None:
        if seen.final is Status.STOPPED and stop_sent:
            return Resolution(seen.final, seen.exit_code, "stopped by the user")
        return Resolution(seen.final, seen.exit_code, seen.reason, headline=seen.headline)
    if seen.exit_code is not None:
        # a job that ended on its own just before a stop reached it keeps its own outcome
        if seen.stopped is True or (seen.stopped is None and stop_sent):
            return Resolution(Status.STOPPED, seen.exit_code, "stopped by the user")
        if seen.exit_code == 0:
            return Resolution(Status.COMPLETED, 0)
        return Resolution(Status.FAILED, seen.exit_code, describe_exit_code(seen.exit_code), reason_is_exit_code=True)
    if seen.alive is None:
        if seen.unreachable_host:
            # kept from the first failed look while the host stays unreachable
            same_host = record.unreachable_since is not None and record.unreachable_host == seen.unreachable_host
            since = record.unreachable_since if same_host else (now if now is not None else time.time())
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
            return Resolution(
                record.status, None, f"cannot reach {seen.unreachable_host} since {when}", since, seen.unreachable_host
            )
        return Resolution(record.status, None, seen.why_gone or record.reason)
    if seen.alive:
        # a queued job says why it waits, in its runtime's words (Slurm's Priority, Resources, ...)
        return Resolution(
            Status.RUNNING if seen.started else Status.PENDING, reason=seen.reason if not seen.started else ""
        )
    if stop_sent:
        return Resolution(Status.STOPPED, None, "stopped by the user")
    why = seen.why_gone or "the job's process vanished without recording an exit code"
    if record.stop_requested:  # asked for, never handed over: whatever ended the job, it was not that
        why += "; a stop had been asked for but never reached it (was the stopping process killed?)"
    return Resolution(Status.LOST, None, why)


def describe_outcome(status: Status, exit_code: int | None, reason: str, headline: str = "") -> str:
    """How a job ended, in a line: its exit code's meaning, else the reason; for a failure whose
    runtime said more than the code does, what went wrong: the `headline` its backend read in the
    reason (SageMaker's: the exception rather than its wrapper), else the reason's first line.
    Readable, whenever the reason was recorded."""
    reason = readable(reason)
    wrong = _first_line(readable(headline) or reason)
    if exit_code is None:
        return wrong if status is Status.FAILED and reason else reason
    if status is Status.STOPPED and exit_code == 137:  # a stopped job that ignored TERM: not out of memory
        return "exit code 137: killed (SIGKILL) after the grace period, as it did not end on TERM"
    said = describe_exit_code(exit_code) if exit_code else "exit code 0"
    # the code's words are not said twice (a record keeps no mark of where its reason came from)
    if status is Status.FAILED and reason and reason != said:
        return f"{said} · {wrong}"
    return said


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def parse_notification(data: bytes, check: str) -> dict[str, Any] | None:
    """What the notifier wrote (see backends/notify.py), if it is signed with `check` (a job can write
    the file too, but not sign it), checked field by field. None while nothing (or nothing
    sensible, or nothing signed) is written."""
    try:
        written = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(written, dict) or not isinstance(written.get("signature"), str):
        return None
    signature = written.pop("signature")
    body = json.dumps(written, sort_keys=True).encode("utf-8")
    if not hmac.compare_digest(signature, hmac.new(check.encode(), body, hashlib.sha256).hexdigest()):
        return None
    if not isinstance(written.get("delivered"), bool):
        return None
    detail, attempts, at = written.get("detail"), written.get("attempts"), written.get("at")
    return {
        "delivered": written["delivered"],
        "detail": detail[:300] if isinstance(detail, str) else "",
        "attempts": attempts
        if isinstance(attempts, int) and not isinstance(attempts, bool) and 0 <= attempts < 100
        else None,
        "at": at if isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at) else None,
    }


# Changes of a record around a stop (store.update applies them under the record's lock)


def mark_stop(record: JobRecord) -> None:
    record.stop_requested = True
    record.stop_sent = record.stop_sent is True  # until the backend has it


def unmark_stop(was_requested: bool):
    """A change that takes back a stop the backend did not take (one asked for before stays)."""

    def unmark(record: JobRecord) -> None:
        if not was_requested and not record.stop_sent:
            record.stop_requested = False

    return unmark


def mark_stop_sent(record: JobRecord) -> None:
    """The backend has taken the stop: a job that vanishes now was stopped, not lost."""
    if record.stop_requested:
        record.stop_sent = True
