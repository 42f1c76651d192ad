"""A sweep on Slurm: one job array, `sbatch --array=0-(N-1)%K`, its task T the sweep's run T+1.

The array is submitted held, before its runs are made. Each run is then made as any job is (its
record, its run directory), knowing its task (`ArrayTask`, in its options): its launch writes the
run's command into the run and links the array directory's entry T to the run directory. Once
every run is made, the array is released; if one cannot be made, the array is cancelled.

While it is held, the array directory's HELD_FILE says who submits it (the process, on this
machine), its id and its tasks. A submitter that died before the release (a kernel killed mid-cell)
leaves it held: the sweep's next submission (the cell run again) finds the note, finds the array in
the queue by its name, output and token (the id the note gives is a hint, never trusted), cancels its
waiting tasks whose runs were never made, and releases the rest of those still held (`resume_held`).

A task runs `slurm_array.sh ARRAY_DIR TOKEN NODES REQUEUE GRACE`, which finds its run directory by
its task id and starts it as batch.sh starts a job. Its log is the run's own, through that link
(`--output=ARRAY_DIR/%a/output.log`, which squeue shows as given). Every task's command holds the
array's token, so each run's task is told from any other job as a lone job's is (queue.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import shutil
import socket
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ...core.files import read_small, write_private_file
from ...core.processes import ProcessIdentity
from ...core.store import LOG_FILE, JobStore
from ...errors import InvalidOption, TrainerError
from ..base import STOP_GRACE_SECONDS, BackendBase
from ..host import _inherited_environment
from .commands import SlurmCommandFailed, job_id_in, refused, run, sbatch_environment
from .declared import SlurmOptions
from .queue import ARRAY_TASK_ID, QUEUE, JobIdentity, SlurmJob, named_now
from .spec import sbatch_options

ARRAY_BATCH_FILE = "slurm_array.sh"  # in the array's directory: what each task runs
COMMAND_FILE = "slurm_command"  # in an array task's run: its command, NUL-separated (start.py reads it)
HELD_FILE = "held.json"  # in the array's directory until it is released or cancelled (see the module's doc)
HELD_FILE_LIMIT = 1 << 20  # a note larger than this is no note of ours
ARRAY_ID = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True)
class ArrayTask:
    """A run's place in its sweep's job array, known before the run is made."""

    job_id: str  # ARRAY_TASK, as squeue -r, sacct and scancel name it
    token: str
    submitted_at: float
    job_name: str  # the array's --job-name: the sweep's name
    output: str  # the array's --output, as squeue shows it for every task
    directory: str  # the array's directory, where the task's entry links to the run

    @property
    def task(self) -> int:
        return int(self.job_id.rsplit("_", 1)[1])


def array_spec(indices: list[int], max_running: int | None) -> str:
    """sbatch's --array for these tasks: `0-11%3`, or `2,5,7%3` for some of them."""
    ordered = sorted(indices)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        tasks = f"{ordered[0]}-{ordered[-1]}" if len(ordered) > 1 else str(ordered[0])
    else:
        tasks = ",".join(map(str, ordered))
    return f"{tasks}%{max_running}" if max_running else tasks


def output_pattern(directory: Path) -> str:
    """The array's --output: each task's log through its entry (sbatch reads % as its patterns)."""
    return str(directory).replace("%", "%%") + f"/%a/{LOG_FILE}"


class SlurmArray:
    """One sweep's job array, submitted held (`submit`), then each run given its task."""

    def __init__(
        self, backend: BackendBase, spec, store: JobStore, name: str, indices: list[int], max_running: int | None
    ):
        self.backend, self.spec, self.store, self.name = backend, spec, store, name
        self.indices, self.max_running = indices, max_running
        self.token = secrets.token_hex(16)
        self.directory = store.sweep_files(name) / f"array-{self.token[:12]}"
        self.job_id: str | None = None
        self.submitted_at = 0.0

    def submit(self) -> "SlurmArray":
        options = self.spec.options if isinstance(self.spec.options, SlurmOptions) else SlurmOptions()
        with self.store.writing():
            self.store.sweeps_dir.mkdir(mode=0o700, exist_ok=True)
            self.directory.parent.mkdir(mode=0o700, exist_ok=True)
            self.directory.mkdir(mode=0o700)
            source = resources.files("jupyter_trainer.backends.slurm").joinpath("array.sh").read_bytes()
            write_private_file(self.directory / ARRAY_BATCH_FILE, source, durable=False)
            self.submitted_at = time.time()  # once: the note says it, and the tasks are told by it (queue.py)
            self._note_held()
        args = [
            "--parsable", "--hold", f"--array={array_spec(self.indices, self.max_running)}", f"--job-name={self.name}",
            f"--output={output_pattern(self.directory)}", *sbatch_options(self.spec, options),
            "--", str(self.directory / ARRAY_BATCH_FILE), str(self.directory), self.token, str(options.nodes or 1),
            "1" if options.requeue else "0", str(STOP_GRACE_SECONDS),
        ]  # fmt: skip
        try:
            output = run("sbatch", *args, env=sbatch_environment(_inherited_environment()))
        except SlurmCommandFailed as error:
            self._remove_directory()
            raise refused(error, f"sweep {self.name!r} as a job array") from None
        except BaseException:
            self._remove_directory()
            raise
        finally:
            QUEUE.forget()
        answer = job_id_in(output)
        if answer is None:
            self._remove_directory()
            said = output.strip().splitlines()[-1].strip() if output.strip() else ""
            raise InvalidOption(
                f"sbatch answered {said[:80]!r}, not a job id", "check sbatch --parsable by hand on this machine"
            )
        self.job_id = answer.group(1)
        self._note_held()
        return self

    def _note_held(self) -> None:
        note = {
            "submitter": ProcessIdentity.current().to_dict(), "host": socket.gethostname(), "job_id": self.job_id,
            "indices": self.indices, "token": self.token, "submitted_at": self.submitted_at, "name": self.name,
        }  # fmt: skip
        write_private_file(self.directory / HELD_FILE, json.dumps(note).encode(), durable=False)

    def for_run(self, index: int, spec):
        """The run's spec, with its task of the array."""
        task = ArrayTask(
            f"{self.job_id}_{index}",
            self.token,
            self.submitted_at,
            self.name,
            output_pattern(self.directory),
            str(self.directory),
        )
        options = spec.options if isinstance(spec.options, SlurmOptions) else SlurmOptions()
        return dataclasses.replace(spec, options=dataclasses.replace(options, array_task=task))

    def release(self) -> None:
        """Let the tasks run: every run has been made."""
        try:
            run("scontrol", "release", str(self.job_id), timeout=30)
        except SlurmCommandFailed as error:
            raise InvalidOption(
                f"the job array {self.job_id} of sweep {self.name!r} is held and could not be released: {error.said}",
                f"release it by hand: scontrol release {self.job_id}",
            ) from None
        finally:
            QUEUE.forget()
        _forget_held(self.directory)

    def cancel(self) -> str:
        """The whole array cancelled (a run could not be made): what came of it, in words."""
        try:
            run("scancel", str(self.job_id), timeout=30)
        except (TrainerError, KeyboardInterrupt):
            return f"its job array {self.job_id} could not be cancelled: scancel {self.job_id}"
        finally:
            QUEUE.forget()
        _forget_held(self.directory)
        return f"its job array {self.job_id} was cancelled"

    def _remove_directory(self) -> None:
        with contextlib.suppress(OSError):
            shutil.rmtree(self.directory)


def link_task(task: ArrayTask, run_dir: Path, command: list[str]) -> None:
    """What a task needs of its run, written at the run's launch: its command, and the array
    directory's entry that leads the task (and its log) to the run."""
    write_private_file(run_dir / COMMAND_FILE, b"\0".join(os.fsencode(word) for word in command), durable=False)
    entry = Path(task.directory) / str(task.task)
    with contextlib.suppress(FileNotFoundError):
        entry.unlink()
    os.symlink(run_dir, entry)


def arrays_of(job_ids: list[str]) -> list[str]:
    """The job arrays these ids are tasks of, each once, in order."""
    found: list[str] = []
    for job_id in job_ids:
        task = ARRAY_TASK_ID.fullmatch(job_id)
        if task is not None and task.group(1) not in found:
            found.append(task.group(1))
    return found


def _forget_held(directory: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (directory / HELD_FILE).unlink()


@dataclass(frozen=True)
class _HeldNote:
    submitter: ProcessIdentity
    host: str
    job_id: str | None
    indices: list[int]
    token: str
    submitted_at: float


def _read_held(path: Path) -> _HeldNote | None:
    """The note, or None when it cannot be ours (the store's files are hostile input)."""
    try:
        data = json.loads(read_small(path, HELD_FILE_LIMIT))
        job_id, indices, token = data.get("job_id"), data["indices"], data["token"]
        if job_id is not None and not (isinstance(job_id, str) and ARRAY_ID.fullmatch(job_id)):
            return None
        if not (isinstance(indices, list) and indices and all(type(i) is int and 0 <= i < 1_000_000 for i in indices)):
            return None
        if not (isinstance(token, str) and re.fullmatch(r"[0-9a-f]{32}", token)):
            return None
        return _HeldNote(
            ProcessIdentity.from_dict(data["submitter"]),
            str(data["host"]),
            job_id,
            indices,
            token,
            float(data["submitted_at"]),
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
        return None  # (OverflowError: an int too large for a float; RecursionError: JSON nested past reading)


def resume_held(store: JobStore, name: str) -> list[str]:
    """The job arrays of sweep `name` that a submitter on this machine left held when it died
    (between sbatch and the release): their tasks whose runs were never made are cancelled, the
    others released. What was done, in words (one line per array)."""
    said: list[str] = []
    for held in sorted(store.sweep_files(name).glob(f"array-*/{HELD_FILE}")):
        note = _read_held(held)
        if note is None or note.host != socket.gethostname() or note.submitter.is_alive():
            continue  # not ours to read, another machine's submitter, or one still at work
        directory = held.parent
        # what the queue shows of the note's array, found by its name, output and token (never by
        # the id the note gives: a note can be stale or a job's): released or cancelled by hand
        # since, or ended, it has no task left to release, and a task that runs is left to run
        waiting = {index: job for index, job in _tasks_of(name, note, directory).items() if job.state == "PENDING"}
        # a run never made has no entry: its task would find no run to start
        unmade = [job.job_id for index, job in waiting.items() if not os.path.lexists(directory / str(index))]
        made = [job.job_id for index, job in waiting.items() if job.job_id not in unmade and job.held]
        try:
            if unmade:
                run("scancel", *unmade, timeout=30)
            if made:
                run("scontrol", "release", ",".join(made), timeout=30)
        except SlurmCommandFailed as error:
            # one that has ended since is nothing to release
            if not (error.unknown_job or error.job_ending or error.job_ended):
                array_id = next(iter(waiting.values())).job_id.split("_")[0]
                raise InvalidOption(
                    f"the job array {array_id} of sweep {name!r}, left held by a submission that was interrupted, "
                    f"could not be released: {error.said}",
                    f"release it by hand: scontrol release {array_id}",
                ) from None
        finally:
            QUEUE.forget()
        _forget_held(directory)
        if waiting:
            array_id = next(iter(waiting.values())).job_id.split("_")[0]
            said.append(
                f"job array {array_id}, left held by an interrupted submission: {len(made)} run(s) released, "
                f"{len(unmade)} never made cancelled"
            )
    return said


def _tasks_of(name: str, note: _HeldNote, directory: Path) -> dict[int, SlurmJob]:
    """The tasks of the note's array Slurm still knows, by index: found in the queue by the array's
    name, its output and its token, as a lone job's is (none: sbatch never accepted it, or it has
    ended and been forgotten)."""
    identity = JobIdentity(name, note.submitted_at, output_pattern(directory), note.token)
    tasks: dict[int, SlurmJob] = {}
    for job in named_now(name, timeout=30):
        task = ARRAY_TASK_ID.fullmatch(job.job_id)
        if task is not None and job.log == identity.log and job.command is not None and job.is_the_job(identity):
            tasks[int(task.group(2))] = job
    return tasks
