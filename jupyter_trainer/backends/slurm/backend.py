"""The `--slurm` backend: the job's supervisor runs as a Slurm batch job.

`sbatch --parsable` submits the run's `slurm_batch.sh` (the same for every job) with the job's
name, working directory and log, and among its arguments a token new for each submission (what
tells its Slurm job from an earlier run's of the same name and log, see queue.py); on the batch
node, `slurm_start.py` sets the job's secret environment from a private file of the run and
becomes the supervisor (supervise.sh), which runs the launcher as the host backend's does: the
same run files, exit code, clock and notify. The job store must be on a filesystem the nodes
share. Slurm says whether the job waits, runs or was ended (queue.py: one squeue per poll), the
supervisor's files how the script ended (states.py), also while Slurm cannot be asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import secrets
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ...core import files as _fs
from ...core.files import write_private_file
from ...core.record import JobRecord, Observation
from ...core.resources import Usage
from ...core.store import LOG_FILE, PID_FILE, JobStore
from ...errors import BackendUnavailable, InvalidOption, TrainerError
from ...spec.job_spec import DetachedSpec
from ..base import (
    STOP_GRACE_SECONDS,
    BackendBase,
    FileLogSource,
    ScriptPlace,
    job_command,
    job_environment,
    notify_input,
    prepare_supervised_run,
    read_runtime,
    read_supervisor_facts,
    write_launch_target,
    write_run_file,
)
from ..host import _inherited_environment
from . import states
from .array import SlurmArray, arrays_of, link_task, resume_held
from .commands import SlurmCommandFailed, job_id_in, printed_before, refused, require, run, sbatch_environment
from .declared import BATCH_FILE, ENV_FILE, NODE_FILE, NOTIFY_INPUT_FILE, SECRET_FILES, START_FILE, SlurmOptions
from .queue import QUEUE, JobIdentity, SlurmJob, find_by_identity
from .spec import check_gpus, sbatch_options

# a job's id as its record keeps it: sbatch's (with ";CLUSTER" on a federation), or a sweep's run's task of its
# job array (ARRAY_TASK)
JOB_ID = re.compile(r"(\d{1,12}(?:_\d{1,10})?)(?:;([A-Za-z0-9_.-]{1,64}))?")
TOKEN = re.compile(r"[0-9a-f]{32}")
OOM_TAIL_BYTES = 16 << 10
CLOCK_SKEW = 86400.0  # seconds another machine's clock may run ahead of the submitting one's
LOOKUP_TIMEOUT = 15.0  # seconds for the squeue and scancel of a submission that failed: its error waits for them


def _source(name: str) -> bytes:
    return resources.files("jupyter_trainer.backends.slurm").joinpath(name).read_bytes()


@dataclass(frozen=True)
class SlurmRuntime:
    """A job submitted to Slurm: its id (as sbatch gave it, never as the job wrote it), when, the
    token its batch command holds (None: submitted before there were tokens), and what Slurm said
    of it last."""

    job_id: str
    submitted_at: float
    nodes: int = 1
    cluster: str | None = None
    state: str | None = None
    partition: str | None = None
    node_list: str | None = None
    pending_reason: str | None = None
    restarts: int | None = None
    token: str | None = None
    # a task of a sweep's job array: the array's name and --output (a lone job's are its run's)
    job_name: str | None = None
    output: str | None = None

    def to_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if value is not None}

    @classmethod
    def of(cls, record: JobRecord) -> "SlurmRuntime":
        runtime = read_runtime(
            cls, record,
            {"job_id": str, "submitted_at": (int, float), "nodes": (int, "optional"), "cluster": (str, "optional"),
             "state": (str, "optional"), "partition": (str, "optional"), "node_list": (str, "optional"),
             "pending_reason": (str, "optional"), "restarts": (int, "optional"), "token": (str, "optional"),
             "job_name": (str, "optional"), "output": (str, "optional")},
        )  # fmt: skip
        if not JOB_ID.fullmatch(runtime.job_id):
            from ..base import malformed_runtime

            raise malformed_runtime(record, "job_id is not a Slurm job id")
        if runtime.token is not None and not TOKEN.fullmatch(runtime.token):
            from ..base import malformed_runtime

            raise malformed_runtime(record, "token is not one a submission made")
        if not (math.isfinite(runtime.submitted_at) and 0 < runtime.submitted_at <= time.time() + CLOCK_SKEW):
            from ..base import malformed_runtime

            raise malformed_runtime(record, "submitted_at is not a time the job was submitted at")
        return runtime if runtime.nodes is not None else SlurmRuntime(**{**runtime.__dict__, "nodes": 1})


def _followed(store: JobStore):
    """(job id, name, submitted at) of the store's unfinished Slurm jobs: one accounting query asks for all."""

    def listing():
        for record in store.records():
            if (
                isinstance(record, JobRecord)
                and record.backend == "slurm"
                and not record.status.is_final
                and record.runtime
            ):
                try:
                    runtime = SlurmRuntime.of(record)
                except Exception:
                    continue
                yield runtime.job_id, record.name, runtime.submitted_at

    return listing


class SlurmBackend(BackendBase):
    name = "slurm"
    status_interval = 5.0  # seconds between two status checks by a widget (each poll: one squeue for all jobs)
    usage_outlives_the_job = False
    has_containers = False
    starts_at_launch = False  # a job waits in Slurm's queue first: it has started once Slurm runs it
    batches_sweeps = True  # a sweep is one job array (array.py), which Slurm runs K at a time

    def polling(self):
        """Around a poll of many jobs (job.refreshed_records): one squeue answers for all of them."""
        return QUEUE.one_poll()

    def preflight(self, spec: DetachedSpec, store) -> None:
        check_gpus(spec.gpus)
        if "\\" in str(store.home):
            # sbatch reads a backslash in --output as "no patterns here" and drops it: the log would
            # be looked for elsewhere, and the job could never start
            raise InvalidOption(
                f"the job store {store.home} has a backslash in its path, which sbatch cannot take in a job's log path",
                "set JUPYTER_TRAINER_HOME to a directory without one",
            )
        require("sbatch")  # a missing sbatch is one line before the store is touched

    def prepare(self, run_dir: Path, spec: DetachedSpec) -> None:
        prepare_supervised_run(run_dir, spec.script, spec.from_cell)
        for name, source in ((BATCH_FILE, "batch.sh"), (START_FILE, "start.py"), (NODE_FILE, "node.py")):
            write_private_file(run_dir / name, _source(source), durable=False)
        write_private_file(run_dir / ENV_FILE, json.dumps(job_environment(spec)).encode(), durable=False)

    def launch(self, record: JobRecord, run_dir: Path, spec: DetachedSpec) -> SlurmRuntime:
        options = spec.options if isinstance(spec.options, SlurmOptions) else SlurmOptions()
        nodes = options.nodes or 1
        requeue = options.requeue
        given = notify_input(record, run_dir, spec.notify)
        if given:
            write_run_file(run_dir, NOTIFY_INPUT_FILE, given)
        # a script run in place is the file as named (the nodes see this machine's paths, and follow its links)
        write_launch_target(
            run_dir, spec, spec.workdir, record.name, ScriptPlace(spec.script_path) if spec.script_path else None
        )
        command = job_command(spec, str(run_dir))
        if options.array_task is not None:  # a sweep's run: its task of the array submitted for the sweep
            task = options.array_task
            link_task(task, run_dir, command)
            return SlurmRuntime(
                task.job_id, task.submitted_at, nodes, state="PENDING", token=task.token, job_name=task.job_name,
                output=task.output,
            )  # fmt: skip
        args = [
            "--parsable",
            f"--job-name={record.name}",
            f"--output={output_option(run_dir)}",
            *sbatch_options(spec, options),
        ]
        # "--" ends sbatch's options: a last --sbatch-arg that wants a value it was not given
        # ("--comment") takes this one, never the batch file that follows. The token, new for
        # each submission, is in the job's command, which squeue shows and nobody can change
        token = secrets.token_hex(16)
        args += [
            "--",
            str(run_dir / BATCH_FILE),
            str(run_dir),
            token,
            str(nodes),
            "1" if requeue else "0",
            str(STOP_GRACE_SECONDS),
            *command,
        ]
        submitted_at = time.time()
        identity = JobIdentity(record.name, submitted_at, output_option(run_dir), token)
        try:
            output = run("sbatch", *args, env=sbatch_environment(_inherited_environment()))
        except BaseException as error:
            # sbatch may have had the job accepted before it failed, timed out or was interrupted:
            # that job must not run on, unseen, into a run that is about to be removed
            cancelled = _cancel_submitted(printed_before(error), identity)
            if isinstance(error, SlurmCommandFailed):
                raise _with_cancelled(refused(error, f"job {record.name!r}"), cancelled) from None
            if isinstance(error, TrainerError):
                raise _with_cancelled(error, cancelled) from None
            raise
        try:
            QUEUE.forget()
            match = job_id_in(output)
            if match is None:
                cancelled = _cancel_submitted(output, identity)
                answer = output.strip().splitlines()[-1].strip() if output.strip() else ""
                raise _with_cancelled(
                    InvalidOption(
                        f"sbatch answered {answer[:80]!r}, not a job id",
                        "check sbatch --parsable by hand on this machine",
                    ),
                    cancelled,
                )
            return SlurmRuntime(match.group(1), submitted_at, nodes, match.group(2), state="PENDING", token=token)
        except KeyboardInterrupt:  # after sbatch answered, before the run knows its job: not left running
            _cancel_submitted(output, identity)
            raise

    def asking(self, record: JobRecord) -> str:
        return "asking Slurm…"  # squeue, sacct, scontrol: an overloaded controller answers in its own time

    def observe(self, record: JobRecord, run_dir: Path) -> Observation:
        runtime = SlurmRuntime.of(record)
        identity = _identity(record, runtime, run_dir)
        facts = read_supervisor_facts(run_dir)
        try:
            job = _slurms_view(runtime.job_id, identity, facts, run_dir)
        except BackendUnavailable:
            # Slurm cannot be asked now (the job goes on without it), but what the supervisor
            # recorded of a script that has ended is the job's end all the same
            ended = states.ended_unseen(facts, stop_requested=record.stop_requested)
            if ended is None:
                raise
            _remove_secrets(run_dir)
            return _with_start(ended, record, facts, run_dir)
        if job is not None and not job.known:
            return Observation(
                alive=None,
                why_gone=f"Slurm says job {job.job_id} is {job.state}, a state jupyter_trainer does not know: "
                "its status is kept until Slurm says more",
            )
        tail = b""
        if job is not None and job.state == "FAILED":
            tail = self._log_tail(run_dir)
        job_id = job.job_id if job is not None else runtime.job_id
        seen = states.observe(job, facts, stop_requested=record.stop_requested, job_id=job_id, log_tail=tail)
        if seen.alive is False:
            _remove_secrets(run_dir)
        if seen.details:  # only what changed, so that an unchanged job is not written again
            changed = {key: value for key, value in seen.details.items() if record.runtime.get(key) != value}
            if changed != seen.details:
                seen = Observation(**{**seen.__dict__, "details": changed or None})
        return _with_start(seen, record, facts, run_dir)

    @staticmethod
    def _log_tail(run_dir: Path) -> bytes:
        try:
            size = _fs.regular_size(run_dir / LOG_FILE)
            return _fs.read_range(run_dir / LOG_FILE, max(0, size - OOM_TAIL_BYTES), OOM_TAIL_BYTES)
        except OSError:
            return b""

    def log_source(self, record: JobRecord, run_dir: Path) -> FileLogSource:
        return FileLogSource(run_dir / LOG_FILE)

    def describe_where(self, record: JobRecord) -> str:
        if not record.runtime:
            return "Slurm"
        runtime = SlurmRuntime.of(record)
        words = [f"Slurm job {runtime.job_id}"]
        if runtime.partition:
            words.append(f"partition {runtime.partition}")
        if runtime.node_list:
            words.append(f"{'nodes' if runtime.nodes > 1 else 'node'} {runtime.node_list}")
        if runtime.pending_reason and not record.status.is_final:
            words.append(f"pending: {runtime.pending_reason}")
        return " · ".join(words)

    def describe_host(self, record: JobRecord) -> str | None:
        return SlurmRuntime.of(record).node_list or None if record.runtime else None

    def describe_facts(self, record: JobRecord) -> list[str]:
        if not record.runtime:
            return []
        runtime = SlurmRuntime.of(record)
        facts = []
        if runtime.restarts:
            facts.append(f"restarted {runtime.restarts} time{'s' if runtime.restarts > 1 else ''} by Slurm")
        return facts

    def status_fields(self, record: JobRecord) -> dict:
        """What `status --json` says of a Slurm job besides the common fields."""
        if not record.runtime:
            return {"restarts": 0}
        runtime = SlurmRuntime.of(record)
        return {
            "slurm_job_id": runtime.job_id,
            "restarts": runtime.restarts or 0,
            **({"nodes": runtime.node_list} if runtime.node_list else {}),
        }

    def lingering(self, record: JobRecord, run_dir: Path) -> list[str]:
        return []  # Slurm ends every process of a job with it

    def usage(self, record: JobRecord, run_dir: Path) -> Usage | None:
        return None  # on another machine: sstat could tell, at a cost to the controller

    def batch(self, spec, store, name: str, indices: list[int], max_running: int | None) -> SlurmArray:
        """A sweep's runs as one job array, submitted held (array.py)."""
        self.preflight(spec, store)
        return SlurmArray(self, spec, store, name, indices, max_running).submit()

    def resume_batches(self, store, name: str) -> list[str]:
        """A sweep's job arrays left held by a submission that died before releasing them (array.py)."""
        return resume_held(store, name)

    def stop_together(self, runs: list[tuple[JobRecord, Path]]) -> list[str]:
        """One scancel for each job array of these runs that still has a task of theirs queued or
        running (each task is checked to be the run's, by squeue, as a lone job's stop does)."""
        QUEUE.forget()
        live: dict[str, str] = {}  # a task's id: its run's name
        for record, run_dir in runs:
            if not record.runtime:
                continue
            runtime = SlurmRuntime.of(record)
            job = QUEUE.job(runtime.job_id, _identity(record, runtime, run_dir))
            if job is not None and job.active:
                live[job.job_id] = record.name
        stopped: list[str] = []
        for array in arrays_of(list(live)):
            try:
                run("scancel", array, timeout=30)
            except SlurmCommandFailed as error:
                if not (error.unknown_job or error.job_ending):
                    raise InvalidOption(f"scancel refused job array {array}: {error.said}") from None
            stopped += [name for job_id, name in live.items() if job_id.split("_")[0] == array]
        QUEUE.forget()
        return stopped

    def stop(self, record: JobRecord, run_dir: Path, container: bool = False) -> None:
        """scancel: a pending job is just cancelled; a running one gets TERM, and KILL after
        Slurm's KillWait. Returns once Slurm has it; the job's end is observed as usual. Only a
        job squeue shows as this run's (its name and log) is cancelled: the record's id alone,
        which the job could have rewritten, never makes another job's cancel."""
        runtime = SlurmRuntime.of(record)
        QUEUE.forget()
        job = QUEUE.job(runtime.job_id, _identity(record, runtime, run_dir))
        if job is None or not job.active:
            _remove_secrets(run_dir)  # nothing of it in the queue: it has ended, or never will run
            return
        try:
            run("scancel", job.job_id, timeout=30)
        except SlurmCommandFailed as error:
            if not (error.unknown_job or error.job_ending):
                raise InvalidOption(f"scancel refused job {job.job_id}: {error.said}") from None
        QUEUE.forget()


def _with_start(seen: Observation, record: JobRecord, facts, run_dir: Path) -> Observation:
    """The observation with when the job started, for a record that has no start yet: when the
    supervisor wrote the job's pid (the job can touch the file: the record keeps it within the
    run's life)."""
    if record.started_at is not None or facts.job_pid is None:
        return seen
    try:
        started_at = os.stat(run_dir / PID_FILE, follow_symlinks=False).st_mtime
    except OSError:
        return seen
    return dataclasses.replace(seen, started_at=started_at)


def output_option(run_dir: Path) -> str:
    """sbatch's --output for the run's log: sbatch reads % as its patterns."""
    return str(run_dir / LOG_FILE).replace("%", "%%")


def _identity(record: JobRecord, runtime: SlurmRuntime, run_dir: Path) -> JobIdentity:
    """What tells the run's Slurm job: a lone job's name and log are the run's; a sweep's run's
    task has its array's."""
    return JobIdentity(
        runtime.job_name or record.name,
        runtime.submitted_at,
        runtime.output or output_option(run_dir),
        runtime.token or "",
    )


def _slurms_view(job_id: str, identity: JobIdentity, facts, run_dir: Path) -> SlurmJob | None:
    """What Slurm says of the job: squeue's answer; for a job it no longer lists, accounting's;
    and before a job is taken as gone (not listed, or listed ended with no exit code recorded),
    the controller asked by its id."""
    job = QUEUE.job(job_id, identity)
    if job is not None and job.active:
        return job
    if job is None:
        job = QUEUE.ended(job_id, identity, _followed(JobStore.of_run(run_dir)))
    if job is None or (job.source == "squeue" and facts.exit_code is None and not facts.problem):
        return QUEUE.confirm(job.job_id if job is not None else job_id, identity) or job
    return job


def _cancel_submitted(output: str, identity: JobIdentity) -> str:
    """Cancel what a failed or interrupted sbatch may have submitted after all: the job squeue
    shows with this run's name, log and token (never the id sbatch printed alone, nor an earlier
    run's job of the same name and log). Best effort; what was done, as words for the error (""
    when no job was found)."""
    match = job_id_in(output or "")
    printed = match.group(1) if match else None
    job_id = None
    try:
        # only a job squeue shows with this submission's token: the id a failing sbatch printed
        # may be another job's
        found = find_by_identity(identity, timeout=LOOKUP_TIMEOUT)
        job_id = found.job_id if found is not None else None
        if job_id is None:
            return f"sbatch printed job id {printed}, but no job of this run is in the queue" if printed else ""
        run("scancel", job_id, timeout=LOOKUP_TIMEOUT)
    except (TrainerError, KeyboardInterrupt):
        return (
            f"Slurm had accepted it as job {job_id}, which could not be cancelled: scancel {job_id}" if job_id else ""
        )
    finally:
        QUEUE.forget()
    return f"Slurm had accepted it as job {job_id}, which was cancelled"


def _with_cancelled(error: TrainerError, cancelled: str) -> TrainerError:
    """The error, saying what became of the job sbatch had submitted after all."""
    if cancelled:
        error.message = f"{error.message} ({cancelled})"
        error.args = (error.render(),)
    return error


def _remove_secrets(run_dir: Path) -> None:
    """The job's --env values and --notify details, once nothing will start it (again)."""
    for name in SECRET_FILES:
        with contextlib.suppress(OSError):
            os.unlink(run_dir / name)
