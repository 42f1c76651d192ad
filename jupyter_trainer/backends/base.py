"""The seam between jobs and the places they run.

A backend starts a job's supervisor somewhere (this machine, a container, a
SageMaker job), tells what it sees of it now (`observe`), gives access to the
log, and stops it. Everything else — names, records, statuses, logs — is
shared and lives outside the backends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import hmac
import json
import os
import posixpath
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import ContextManager, Protocol

from ..core import files as _fs
from ..core.files import create_private_file, write_private_file
from ..core.record import JobRecord, Observation
from ..core.resources import Usage
from ..core.store import (
    CLOCK_FILE,
    EXIT_CODE_FILE,
    LAUNCH_FILE,
    LAUNCH_TARGET_FILE,
    LOG_FILE,
    NOTIFIED_FILE,
    NOTIFY_FILE,
    PID_FILE,
    SCRIPT_FILE,
    SUPERVISOR_FILE,
    JobStore,
)
from ..errors import CorruptRecord, RunFileError
from ..logs.source import LogSource, LogSourceBase
from ..spec.job_spec import DetachedSpec, Metric

# pid and exit_code are overwritten in place by the supervisor: room reserved beforehand.
RESERVED = b" " * 64

# Seconds between SIGTERM and SIGKILL when a job is stopped, as `docker stop`.
STOP_GRACE_SECONDS = 10


class JobSpec(Protocol):
    """What a cell asks for, whichever backend runs it (DetachedSpec, SageMakerSpec)."""

    script: str
    backend: str  # the name of the backend that runs it
    metrics: tuple[Metric, ...]
    script_path: str | None  # the file run in place, None for a cell

    def public_options(self) -> dict:
        """The options as stored and shown: never a secret."""

    def fingerprint(self, key: bytes, rerun: bool = False) -> str:
        """Same cell, same fingerprint (keyed, so that it reveals nothing of the secrets in it)."""


class Runtime(Protocol):
    """What a backend keeps in a job's record about where the job runs (the record's `runtime`)."""

    def to_dict(self) -> dict: ...


class Backend(Protocol):
    name: str
    has_containers: bool  # whether `stop(container=True)` means something (and `remove_unused_containers`)
    status_interval: float  # seconds between two status checks by a widget (a check may cost API calls)
    # the same while the widget is woken by each change of the run's files: longer for a backend
    # whose changes of status show there (the host's supervisor); BackendBase: status_interval
    watched_status_interval: float
    usage_outlives_the_job: bool  # whether `usage` still says something once the job has ended
    # whether a launched job has started; False: it may wait in a queue first (Slurm's), and its
    # record gets its start once it is seen started (a job stopped while it waited never started)
    starts_at_launch: bool
    # whether a sweep's runs are submitted as one thing of the runtime's own (`batch`: a Slurm job
    # array), which bounds how many run at once itself; False: the machine's lines bound them
    batches_sweeps: bool

    def preflight(self, spec: JobSpec, store: JobStore) -> JobSpec | None:
        """Raise a TrainerError if the runtime cannot take the job (checked before anything is
        written to `store`, the job's). It may return the spec completed with what only the runtime
        knows (the text of a script that lies on a remote host), which is then the job's spec."""

    def prepare(self, run_dir: Path, spec: JobSpec) -> None:
        """Write what the job needs into its new run directory (before `launch`)."""

    def launch(self, record: JobRecord, run_dir: Path, spec: JobSpec) -> Runtime:
        """Start the job; return what to keep in the record about where it runs."""

    def observe(self, record: JobRecord, run_dir: Path) -> Observation: ...

    def asking(self, record: JobRecord) -> str:
        """How a view says it waits for `observe`'s answer ("asking Slurm…"), where that may take
        long (a cluster's command, a remote engine, a cloud API): a view then asks on a thread of
        that place's own (status_checks) and goes on meanwhile. "" where it answers at once from
        this machine's files and processes: asked in the view's own thread."""

    def log_source(self, record: JobRecord, run_dir: Path) -> LogSource: ...

    def stop(self, record: JobRecord, run_dir: Path, container: bool = False) -> None: ...

    def remove_unused_containers(self, store: JobStore, records: list[JobRecord]) -> list[str]:
        """With `has_containers`: remove the stopped containers the store's jobs ran in that none of
        `records` (this backend's remaining ones) names; their names."""

    def describe_where(self, record: JobRecord) -> str:
        """Where the job runs, in a few words, for tables and headers. The record may not be
        launched yet (an empty runtime)."""

    def describe_host(self, record: JobRecord) -> str | None:
        """The machine the job runs on, by the name its user knows it by, for the jobs table's host
        column and `status --json`'s `host`; None where the backend has no such notion."""

    def describe_facts(self, record: JobRecord) -> list[str]:
        """What the runtime last said of the job besides its status (a SageMaker job's secondary
        status, billable time, model artifact), a few words each; often nothing."""

    def lingering(self, record: JobRecord, run_dir: Path) -> list[str]:
        """Processes an ended job started that still run ("pid 123: python3 worker.py"): its
        housekeeping waits for them. Often none can be seen (a container's are the container's)."""

    def usage(self, record: JobRecord, run_dir: Path) -> Usage | None:
        """What the running job uses now, as one look (CPU time, memory, GPUs), or None when that
        cannot be seen. Never raises: a view asks this now and then, and goes on without it."""

    def polling(self) -> ContextManager[None]:
        """Entered around a poll of many jobs (jobs.job.one_poll): a backend that can answer for all
        its jobs at once does so (Slurm's one squeue). BackendBase: nothing to do."""

    def status_fields(self, record: JobRecord) -> dict:
        """What `status --json` says of the job besides the fields every job has (a Slurm job's
        `slurm_job_id`, how often a job was started again: `restarts`). BackendBase: nothing."""

    def batch(
        self, spec: JobSpec, store: JobStore, name: str, indices: list[int], max_running: int | None
    ) -> "RunBatch | None":
        """The runs `indices` (0-based) of sweep `name` submitted as one thing of the runtime's own
        (a Slurm job array, at most `max_running` at once), or None: each run is submitted alone,
        and the machine's lines bound how many run at once. BackendBase: None."""

    def resume_batches(self, store: JobStore, name: str) -> list[str]:
        """Let go what an earlier submission of sweep `name` made held and could not let go (its
        process died between the two): what was done, in words. BackendBase: nothing."""

    def stop_together(self, runs: list[tuple[JobRecord, Path]]) -> list[str]:
        """Stop these runs (a sweep's) at once where the runtime can (one scancel of their array);
        the names of those it sent the stop to. Each run's own `stop` follows. BackendBase: none."""


class RunBatch(Protocol):
    """Several runs submitted as one: made held, then each run made knowing its place in it
    (`for_run`), then let go (`release`); `cancel` if a run could not be made."""

    def for_run(self, index: int, spec: JobSpec) -> JobSpec: ...

    def release(self) -> None: ...

    def cancel(self) -> str: ...


class BackendBase:
    """The defaults of Backend's members that not every backend needs: every backend inherits
    them, so that one that leaves them out behaves as these say."""

    status_interval: float
    batches_sweeps = False

    @property
    def watched_status_interval(self) -> float:
        return self.status_interval

    def polling(self) -> ContextManager[None]:
        return contextlib.nullcontext()

    def status_fields(self, record: JobRecord) -> dict:
        from .turns import turn_fields  # a job that waited its turn: the GPUs it holds, or its place in line

        return turn_fields(record)

    def batch(self, spec, store: JobStore, name: str, indices: list[int], max_running: int | None) -> RunBatch | None:
        return None

    def resume_batches(self, store: JobStore, name: str) -> list[str]:
        return []

    def stop_together(self, runs: list[tuple[JobRecord, Path]]) -> list[str]:
        return []


def malformed_runtime(record: JobRecord, problem: str) -> CorruptRecord:
    return CorruptRecord(
        f"the record of job {record.name!r} (run {record.run}) says where it runs in a form that cannot be read "
        f"({problem})",
        f"inspect or remove jobs/{record.name}/{record.run} in the job store",
    )


def read_runtime(cls, record: JobRecord, kinds: dict):
    """A backend's runtime dataclass from a record: each field checked to be of its kind
    (`kinds`: field name -> type, or (type, "optional")); a malformed one is a CorruptRecord."""
    values = {}
    try:
        for key, kind in kinds.items():
            optional = isinstance(kind, tuple) and kind[1:] == ("optional",)
            values[key] = require(record.runtime, key, kind[0] if optional else kind, optional)
    except ValueError as exc:
        raise malformed_runtime(record, str(exc)) from None
    return cls(**values)


def require(data: dict, key: str, kind: type | tuple[type, ...], optional: bool = False):
    """A field of a runtime read from a record, of the type it must have."""
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise ValueError(f"{key} is {type(value).__name__}")
    return value


# What the supervisor writes, and nothing else: a job can write into these files too, so anything
# that does not match exactly is a run file we cannot trust.
PID_LINE = re.compile(rb"(\d{1,10}) (\d{1,10})\n *")
EXIT_CODE_LINE = re.compile(rb"(\d{1,3})(?: (stopped|exited))?\n *")
EXIT_CODE_BEING_WRITTEN = re.compile(rb"\d{1,3}(?: [a-z]{0,7})?")
RUN_FILE_LIMIT = len(RESERVED) + 1  # the supervisor's files never grow past the space reserved for them


@dataclass(frozen=True)
class SupervisorFacts:
    """What the supervisor wrote: its pid, the job's pid, the exit code and whether it stopped the job."""

    supervisor_pid: int | None = None
    job_pid: int | None = None
    exit_code: int | None = None
    ended_at: float | None = None  # when the exit code was written, where the file's time is known
    stopped: bool | None = None  # the supervisor signalled the job (None: a supervisor too old to say)
    problem: str = ""  # a run file that could not be read or holds what no supervisor writes
    clock_ended: bool = False  # its clock file ends with the "end" it writes as it ends (read with an exit code only)

    @classmethod
    def parse(cls, pid_data: bytes, exit_code_data: bytes) -> "SupervisorFacts":
        problems = []
        supervisor_pid = job_pid = exit_code = stopped = None
        if pid_data.strip(b" "):  # only the reserved spaces: the job has not started yet
            match = PID_LINE.fullmatch(pid_data)
            if match:
                supervisor_pid, job_pid = int(match.group(1)), int(match.group(2))
            else:
                problems.append(f"its {PID_FILE} file holds what no supervisor writes")
        if exit_code_data.strip(b" "):
            match = EXIT_CODE_LINE.fullmatch(exit_code_data)
            if match:
                exit_code = int(match.group(1))
                stopped = None if match.group(2) is None else match.group(2) == b"stopped"
            elif EXIT_CODE_BEING_WRITTEN.fullmatch(exit_code_data.rstrip(b" ")):
                pass  # being written this instant: complete once its newline is there
            else:
                problems.append(f"its {EXIT_CODE_FILE} file holds what no supervisor writes")
        return cls(supervisor_pid, job_pid, exit_code, stopped=stopped, problem="; ".join(problems))

    def ended(self) -> Observation:
        """What these facts show of a job whose exit code is written."""
        return Observation(
            exit_code=self.exit_code, alive=False, started=True, ended_at=self.ended_at, stopped=self.stopped
        )

    def unknown(self, supervisor_alive: bool) -> Observation:
        """What a run file we cannot read leaves us to say: while the supervisor runs, the job's
        state is unknown (it can still be stopped through the supervisor); once it is gone, the
        outcome is lost."""
        if supervisor_alive:
            return Observation(alive=None, why_gone=f"state unknown: {self.problem}")
        return Observation(alive=False, why_gone=f"the job ended, but its outcome is unknown: {self.problem}")


def read_supervisor_facts(run_dir: Path) -> SupervisorFacts:
    problems = []

    def read(name: str) -> bytes:
        try:
            return _fs.read_small(run_dir / name, RUN_FILE_LIMIT)
        except FileNotFoundError:
            return b""
        except OSError as exc:  # unreadable (permissions, a link the job put there): say so, never guess
            problems.append(f"its {name} file cannot be read ({exc.strerror or exc})")
            return b""

    facts = SupervisorFacts.parse(read(PID_FILE), read(EXIT_CODE_FILE))
    if problems:
        facts = dataclasses.replace(facts, problem="; ".join(filter(None, [*problems, facts.problem])))
    if facts.exit_code is None:
        return facts
    facts = dataclasses.replace(facts, clock_ended=_clock_ended(run_dir))
    try:  # the job ended when its exit code was written, not when somebody looked
        ended_at = os.stat(run_dir / EXIT_CODE_FILE, follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return facts
    return dataclasses.replace(facts, ended_at=ended_at)


CLOCK_END = b"\nend\n"  # what the supervisor appends to its clock file as it ends (see supervise.sh)


def _clock_ended(run_dir: Path) -> bool:
    try:
        size = _fs.regular_size(run_dir / CLOCK_FILE)
        return _fs.read_range(run_dir / CLOCK_FILE, max(0, size - len(CLOCK_END)), len(CLOCK_END)) == CLOCK_END
    except OSError:
        return False


@functools.lru_cache(maxsize=4)
def _source(name: str) -> bytes:
    return resources.files("jupyter_trainer.backends").joinpath(name).read_bytes()


@functools.lru_cache(maxsize=1)
def notifier_source() -> bytes:
    """What the supervisor runs to notify: the package's wording of exit codes and durations, then
    the notifier, which runs alone on the job's python3 and can import neither."""
    wording = resources.files("jupyter_trainer.core").joinpath("wording.py").read_bytes()
    return wording + b"\n\n" + _source(NOTIFY_FILE)


def write_script(run_dir: Path, script: str, from_cell: bool = True) -> None:
    """Write the script, and create the log it will append to. A cell's script starts with an
    empty line, standing for the magic's line: a traceback's line numbers are the cell's own."""
    # the run is not recorded as launched before these are used, so they need no fsync of their own
    write_private_file(run_dir / SCRIPT_FILE, (b"\n" if from_cell else b"") + script.encode(), durable=False)
    create_private_file(run_dir / LOG_FILE)


def prepare_supervised_run(run_dir: Path, script: str, from_cell: bool = True) -> None:
    """The script, the supervisor and its notifier, and the files they write into (see supervise.sh)."""
    write_script(run_dir, script, from_cell)
    write_private_file(run_dir / SUPERVISOR_FILE, _source(SUPERVISOR_FILE), durable=False)
    write_private_file(run_dir / LAUNCH_FILE, _source(LAUNCH_FILE), durable=False)
    write_private_file(run_dir / NOTIFY_FILE, notifier_source(), durable=False)
    for name in (PID_FILE, EXIT_CODE_FILE):
        create_private_file(run_dir / name, RESERVED)
    create_private_file(run_dir / NOTIFIED_FILE)
    create_private_file(run_dir / CLOCK_FILE)


@dataclass(frozen=True)
class ScriptPlace:
    """Where the job sees a script run in place. `file`: its path as the user named it, which is
    its `__file__` and `sys.argv[0]` (a link keeps its own name, as under `python3 train.py`).
    `directory`: where its real file lies there, which Python makes `sys.path[0]`, when the job's
    machine cannot find that by following `file` (a link naming its target by a path of this
    machine, in a container that sees the folder elsewhere); None: the launcher finds it there."""

    file: str
    directory: str | None = None


def job_command(spec, inner_run_dir: str) -> list[str]:
    """What the supervisor starts: the interpreter, running the launcher (launch.py), which runs
    the script (see write_launch_target). Every word after the launcher's path is the script's:
    a wrapping interpreter may add its own (`sh -c 'exec python3 "$0" --steps 1'`)."""
    return [*spec.interpreter, f"{inner_run_dir}/{LAUNCH_FILE}", *spec.args]


def write_launch_target(
    run_dir: Path, spec, working_dir: str, job_name: str, script_in_job: ScriptPlace | None = None
) -> None:
    """Tell the run's launcher which file it runs the script as, a file of `working_dir` (the job's
    working directory, where the job sees it): a script run in place is that file (`script_in_job`,
    where the job sees it; None: it was sent alone, and named as if it lay there); a cell,
    `NAME.cell.py` there, never written. Read by launch.py: FILE, NUL, DIRECTORY (or nothing)."""
    if spec.script_path and script_in_job:
        place = script_in_job
    elif spec.script_path:  # sent alone to where it cannot be seen: run as if it lay in working_dir
        place = ScriptPlace(posixpath.join(working_dir, posixpath.basename(spec.script_path)))
    else:
        place = ScriptPlace(posixpath.join(working_dir, cell_file_name(job_name)))
    target = os.fsencode(place.file) + b"\0" + os.fsencode(place.directory or "")
    write_run_file(run_dir, LAUNCH_TARGET_FILE, target)


def write_run_file(run_dir: Path, name: str, data: bytes) -> None:
    """Write one of the run's files at launch; a store that cannot take it (full, read-only) is a
    StoreError, said in one line."""
    with JobStore.of_run(run_dir).writing():
        write_private_file(run_dir / name, data, durable=False)


def cell_file_name(job_name: str) -> str:
    """The name a cell runs under in its working directory (`__file__`, a traceback's lines)."""
    return f"{job_name}.cell.py"


def notify_input(record: JobRecord, run_dir: Path, url: str | None) -> bytes:
    """What the supervisor reads on its stdin before it starts the job, for --notify (see
    supervise.sh and notify.py): the URL, what names the job, and the check its notifier signs
    its result with. None of it is put in an environment or a file the job can read."""
    if not url:
        return b""
    job = json.dumps({"name": record.name, "run": record.run, "backend": record.backend})
    return f"{url}\n{job}\n{notification_check(record, run_dir)}\n".encode()


def notification_check(record: JobRecord, run_dir: Path) -> str:
    """The check a notifier's result must carry to be recorded: keyed by the store's own key,
    which a job in a container never sees."""
    key = JobStore.of_run(run_dir).fingerprint_key()
    return hmac.new(
        key, f"notify {record.name} {record.run} {record.created_at!r}".encode(), hashlib.sha256
    ).hexdigest()


class FileLogSource(LogSourceBase):
    """A log that is a file on this machine."""

    def __init__(self, path: Path):
        self.path = path

    def local_file(self) -> Path:
        """The file on this machine that holds the log: a view may wait for it to change."""
        return self.path

    def modified(self) -> float | None:
        """When the log last grew (its modification time), if it exists."""
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    def size(self) -> int:
        with self._reading():
            return _fs.regular_size(self.path)

    def read(self, offset: int, limit: int) -> bytes:
        with self._reading():
            return _fs.read_range(self.path, offset, limit)

    @contextlib.contextmanager
    def _reading(self):
        try:
            yield
        except OSError as exc:
            raise RunFileError(f"cannot read the job's log {self.path} ({exc.strerror or exc})") from None


def job_environment(spec: DetachedSpec) -> dict[str, str]:
    """The variables the job gets on top of its runtime's own."""
    return {**spec.env, "PYTHONUNBUFFERED": "1"}
