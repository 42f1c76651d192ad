"""The seam between jobs and the places they run.

A backend starts a job's supervisor somewhere (this machine, a container, a
SageMaker job), tells what it sees of it now (`observe`), gives access to the
log, and stops it. Everything else — names, records, statuses, logs — is
shared and lives outside the backends.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol

from ..jobs import JobRecord, Observation
from ..logs import LogSource
from ..spec import DetachedSpec
from ..store import create_private_file, write_private_file

SCRIPT_FILE = "script.py"
LOG_FILE = "output.log"
PID_FILE = "pid"
EXIT_CODE_FILE = "exit_code"
SUPERVISOR_FILE = "supervise.sh"

# pid and exit_code are overwritten in place by the supervisor: room reserved beforehand.
RESERVED = b" " * 64

# Seconds between SIGTERM and SIGKILL when a job is stopped, as `docker stop`.
STOP_GRACE_SECONDS = 10


class Backend(Protocol):
    name: str
    has_containers: bool  # whether `stop(container=True)` means something
    status_interval: float  # seconds between two status checks by a widget (a check may cost API calls)

    def preflight(self, spec) -> None:
        """Raise a TrainerError if the runtime cannot take the job (checked before anything is written)."""

    def launch(self, record: JobRecord, run_dir: Path, spec: DetachedSpec) -> dict:
        """Start the job; return the runtime facts to keep in the record."""

    def observe(self, record: JobRecord, run_dir: Path) -> Observation: ...

    def log_source(self, record: JobRecord, run_dir: Path) -> LogSource: ...

    def stop(self, record: JobRecord, run_dir: Path, container: bool = False) -> None: ...


@dataclass(frozen=True)
class SupervisorFacts:
    """What the supervisor wrote: its pid, the job's pid, and the exit code."""

    supervisor_pid: int | None = None
    job_pid: int | None = None
    exit_code: int | None = None
    ended_at: float | None = None  # when the exit code was written, where the file's time is known

    @classmethod
    def parse(cls, pid_text: str, exit_code_text: str) -> "SupervisorFacts":
        pids = pid_text.split()
        supervisor_pid = int(pids[0]) if len(pids) >= 2 else None
        job_pid = int(pids[1]) if len(pids) >= 2 else None
        # the line is complete only once its newline is written
        line = exit_code_text.split("\n")[0] if "\n" in exit_code_text else ""
        exit_code = int(line) if line.strip().lstrip("-").isdigit() else None
        return cls(supervisor_pid, job_pid, exit_code)


def read_supervisor_facts(run_dir: Path) -> SupervisorFacts:
    def read(name: str) -> str:
        try:
            return (run_dir / name).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    facts = SupervisorFacts.parse(read(PID_FILE), read(EXIT_CODE_FILE))
    if facts.exit_code is None:
        return facts
    try:  # the job ended when its exit code was written, not when somebody looked
        ended_at = os.stat(run_dir / EXIT_CODE_FILE).st_mtime
    except FileNotFoundError:
        return facts
    return dataclasses.replace(facts, ended_at=ended_at)


@functools.lru_cache(maxsize=1)
def _supervisor_source() -> bytes:
    return resources.files("jupyter_trainer.backends").joinpath(SUPERVISOR_FILE).read_bytes()


def prepare_run_dir(run_dir: Path, script: str) -> None:
    """Write the script and the supervisor, and create the files it appends to."""
    # the run is not recorded as launched before these are used, so they need no fsync of their own
    write_private_file(run_dir / SCRIPT_FILE, script.encode(), durable=False)
    write_private_file(run_dir / SUPERVISOR_FILE, _supervisor_source(), durable=False)
    create_private_file(run_dir / LOG_FILE)
    for name in (PID_FILE, EXIT_CODE_FILE):
        create_private_file(run_dir / name, RESERVED)


class FileLogSource:
    """A log that is a file on this machine."""

    def __init__(self, path: Path):
        self.path = path

    def size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def read(self, offset: int, limit: int) -> bytes:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset)
                return handle.read(limit)
        except FileNotFoundError:
            return b""


def job_environment(spec: DetachedSpec) -> dict[str, str]:
    """The variables the job gets on top of its runtime's own."""
    return {**spec.env, "PYTHONUNBUFFERED": "1"}
