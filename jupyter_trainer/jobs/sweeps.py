"""Sweeps: one cell run once per combination of values (spec/sweep.py), as one thing to its user.

A sweep NAME is its runs, jobs NAME-1 ... NAME-N, each an ordinary job with its parameters in its
record (`params`), and a small record of its own in the store (`sweeps/NAME.json`: the runs, their
parameters, how many may run at once), written before the first run is submitted, so that a
kernel killed half-way leaves a sweep that is found, and whose re-run cell submits the rest.

`--max-running K` puts the runs in a line of their machine of their own (core/lines.py), which lets
K of them run at once: the others are `pending`, and start by themselves as runs end, with no
kernel of ours running. Running the cell again attaches to each run that is already there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import backends as _backends
from ..core.files import write_private_file
from ..core.naming import default_name
from ..core.record import JobRecord, Status, validate_name
from ..core.store import JobStore
from ..errors import InvalidOption, NameInUse, TrainerError
from ..spec.job_spec import DetachedSpec
from ..spec.sweep import parse_axes, run_arguments, runs_of
from .job import STOP_WAIT_SECONDS, Job
from .provenance import git_state, local_directory
from .submit import Submission, submit_detached

SWEEP_FILE_LIMIT = 4 << 20  # 1000 runs and their values


@dataclass
class SweepRecord:
    """What the store keeps of a sweep besides its runs' own records."""

    name: str
    runs: list[str]
    params: list[dict[str, str]]
    max_running: int | None = None
    created_at: float = field(default_factory=time.time)
    backend: str = ""

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "SweepRecord":
        found = json.loads(data)
        if not isinstance(found, dict):
            raise ValueError("not an object")
        runs, params = found.get("runs"), found.get("params")
        if not isinstance(runs, list) or not isinstance(params, list) or len(runs) != len(params):
            raise ValueError("its runs and their values do not match")
        for name in runs:
            validate_name(name)
        if not all(isinstance(each, dict) and all(isinstance(v, str) for v in each.values()) for each in params):
            raise ValueError("a run's values are not text")
        max_running = found.get("max_running")
        return cls(
            name=validate_name(found.get("name", "")), runs=runs, params=params,
            max_running=max_running if isinstance(max_running, int) and not isinstance(max_running, bool) else None,
            created_at=found.get("created_at") if isinstance(found.get("created_at"), (int, float)) else 0.0,
            backend=found.get("backend") if isinstance(found.get("backend"), str) else "",
        )  # fmt: skip


def sweep_path(store: JobStore, name: str) -> Path:
    return store.sweep_record(name)


def load_sweep(store: JobStore, name: str) -> SweepRecord | None:
    """The sweep of that name, or None if there is none."""
    from ..core import files as _fs

    try:
        data = _fs.read_small(sweep_path(store, name), SWEEP_FILE_LIMIT)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TrainerError(f"cannot read sweep {name!r} ({exc.strerror or exc})") from None
    try:
        sweep = SweepRecord.from_json(data)
        if sweep.name != name or sweep.runs != [f"{name}-{index}" for index in range(1, len(sweep.runs) + 1)]:
            raise ValueError(f"it names other runs than {name}-1 ... {name}-{len(sweep.runs)}")  # never another job's
        return sweep
    except (ValueError, TrainerError, RecursionError) as exc:
        raise TrainerError(
            f"the record of sweep {name!r} cannot be read ({exc})", f"inspect or remove {sweep_path(store, name)}"
        ) from None


NOTIFIED_FILE = "notified"  # in the sweep's own files: what came of its --notify message (surfaces/sweep_notify.py)


def sweep_notification(store: JobStore, name: str) -> dict | None:
    """What came of the sweep's --notify message, once it was sent."""
    from ..core.files import read_small

    try:
        found = json.loads(read_small(store.sweep_files(name) / NOTIFIED_FILE, 64 << 10))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def sweep_names(store: JobStore) -> list[str]:
    try:
        entries = store.sweeps_dir.iterdir()
        return sorted(
            entry.name[: -len(".json")]
            for entry in entries
            if entry.name.endswith(".json") and not entry.name.startswith(".")
        )
    except FileNotFoundError:
        return []


def sweep_queue(store: JobStore, name: str) -> str:
    """The line of a sweep's runs with --max-running: its machine's, named for this store's sweep."""
    return "sweep-" + hashlib.sha256(f"{store.store_id()}\0{name}".encode()).hexdigest()[:16]


@dataclass
class SweepSubmission:
    sweep: SweepRecord
    submissions: list[Submission]
    resumed: list[str] = field(default_factory=list)  # what an earlier, interrupted submission left, done now

    @property
    def message(self) -> str:
        started = sum(not each.attached for each in self.submissions)
        attached = len(self.submissions) - started
        said = f"Sweep {self.sweep.name!r}: {len(self.submissions)} runs"
        parts = [
            f"{started} started" if started else "",
            f"{attached} already submitted (attached)" if attached else "",
        ]
        bound = f"; at most {self.sweep.max_running} at once" if self.sweep.max_running else ""
        resumed = "".join(f" {line[0].upper()}{line[1:]}." for line in self.resumed)
        return f"{said} ({', '.join(part for part in parts if part)}){bound}.{resumed}"


def submit_sweep(
    spec: DetachedSpec,
    sweep: list[str],
    *,
    name: str | None = None,
    trials: int | None = None,
    max_running: int | None = None,
    rerun: bool = False,
    store: JobStore | None = None,
    backends: _backends.Backends | None = None,
    label: str | None = None,
) -> SweepSubmission:
    """Submit one run of `spec` per combination of the `--sweep` values (or per trial), as jobs
    NAME-1 ... NAME-N; a run already submitted by this very cell is attached to."""
    store = store or JobStore()
    backends = backends or _backends.DEFAULT
    axes = parse_axes(sweep)
    if max_running is not None and max_running < 1:
        raise InvalidOption(f"--max-running {max_running}: give 1 or more")
    if max_running is not None and spec.queue:
        raise InvalidOption(
            "--max-running gives the sweep a line of its own: it cannot also wait in --queue", "drop one of them"
        )
    name = name or default_name(label, spec.fingerprint(store.fingerprint_key()))
    validate_name(name, "sweep name")
    params = runs_of(axes, trials, name)
    if len(f"{name}-{len(params)}") > 63:
        raise InvalidOption(
            f"sweep name {name!r} is too long for its runs' names ({name}-{len(params)})", "choose a shorter --name"
        )
    record = SweepRecord(
        name, [f"{name}-{index}" for index in range(1, len(params) + 1)], params, max_running, backend=spec.backend
    )
    data = record.to_json()
    if len(data) > SWEEP_FILE_LIMIT:  # written, it could not be read back: its runs would be strays
        raise InvalidOption(
            f"the sweep's values take {len(data) >> 20} MiB, more than the {SWEEP_FILE_LIMIT >> 20} MiB "
            "a sweep may hold",
            "sweep fewer or shorter values (a long value can be a file the script reads, named by a short one)",
        )
    with store.claiming(name):  # a job of that name cannot be made meanwhile, nor the sweep twice
        if store.runs(name):
            raise NameInUse(f"{name!r} is the name of a job, not of a sweep", "choose another --name for the sweep")
        refuse_run_names(store, name, record.runs)
        before = load_sweep(store, name)
        if before is not None and (before.runs, before.params) != (record.runs, record.params) and not rerun:
            raise NameInUse(
                f"sweep {name!r} was submitted with other values ({len(before.runs)} runs)",
                "choose another --name, or pass --rerun to run these values under it",
            )
        with store.writing():
            store.sweeps_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private_file(sweep_path(store, name), data)
    # the runs not made yet (a re-run cell attaches to the others), submitted as one thing of the
    # runtime's own where it has one (a Slurm job array, which bounds how many run at once itself)
    backend = backends.get(spec.backend)
    resumed = backend.resume_batches(store, name) if backend.batches_sweeps else []
    new = [index for index, run_name in enumerate(record.runs) if rerun or not store.runs(run_name)]
    queue = sweep_queue(store, name) if max_running and not backend.batches_sweeps else spec.queue
    git = git_state(local_directory(spec)) if new else None  # once: each run was made from the same tree
    # last before the runs are made: from here, whatever interrupts the submission cancels the batch
    batch = backend.batch(spec, store, name, new, max_running) if new and backend.batches_sweeps else None
    submissions = []
    try:
        for index, (run_name, values) in enumerate(zip(record.runs, params)):
            # --notify tells of the whole sweep, once (surfaces/sweep_notify.py): no run of it tells its own end
            run_spec = dataclasses.replace(
                spec, args=run_arguments(spec.args, values), params=tuple(values.items()), sweep=name, queue=queue,
                max_running=max_running, notify=None,
            )  # fmt: skip
            if batch is not None and index in new:
                run_spec = batch.for_run(index, run_spec)
            submissions.append(
                submit_detached(
                    run_spec, name=run_name, rerun=rerun, store=store, backends=backends, label=label, git=git
                )
            )
    except BaseException as error:
        if batch is not None:
            said = batch.cancel()
            if isinstance(error, TrainerError):
                error.message = f"{error.message} (sweep {name!r}: {said})"
                error.args = (error.render(),)
        raise
    if batch is not None:
        batch.release()
    return SweepSubmission(record, submissions, resumed)


def refuse_run_names(store: JobStore, name: str, runs: list[str]) -> None:
    """A sweep's name and its runs' names are no other sweep's: a sweep NAME-3 beside sweep NAME's
    run NAME-3 would leave one of them unreachable by name (status, stop and rm find the job)."""
    prefix, _, number = name.rpartition("-")
    if prefix and number.isdigit() and _is_name(prefix):
        other = load_sweep_or_none(store, prefix)
        if other is not None and name in other.runs:
            raise NameInUse(f"{name!r} is the name of a run of sweep {prefix!r}", "choose another --name for the sweep")
    taken = next((run for run in runs if sweep_path(store, run).exists()), None)
    if taken is not None:
        raise NameInUse(
            f"the sweep's run {taken!r} would have the name of a sweep", "choose another --name for the sweep"
        )


def _is_name(name: str) -> bool:
    try:
        validate_name(name)
    except TrainerError:
        return False
    return True


def load_sweep_or_none(store: JobStore, name: str) -> SweepRecord | None:
    """The sweep, or None if there is none or its record cannot be read."""
    try:
        return load_sweep(store, name)
    except TrainerError:
        return None


def sweep_jobs(
    store: JobStore, sweep: SweepRecord, backends: _backends.Backends | None = None
) -> list[Job | TrainerError]:
    """The sweep's runs as jobs, in order (one removed from under it: the error that says so)."""
    jobs: list[Job | TrainerError] = []
    for name in sweep.runs:
        try:
            jobs.append(Job.load(name, store, backends))
        except TrainerError as error:
            jobs.append(error)
    return jobs


def sweep_status(records: list[JobRecord | TrainerError]) -> Status:
    """One status for the whole sweep: running while any run runs, pending while any waits (and
    none runs), else failed if any failed or was lost, stopped if any was stopped, else completed."""
    statuses = [record.status for record in records if isinstance(record, JobRecord)]
    for status in (Status.RUNNING, Status.PENDING, Status.FAILED, Status.LOST, Status.STOPPED):
        if status in statuses:
            return Status.FAILED if status is Status.LOST else status
    return Status.COMPLETED if statuses else Status.LOST


def progress_text(records: list[JobRecord | TrainerError]) -> str:
    """ "4 of 12 done, 2 running, 6 waiting" (and how many failed, stopped or are gone)."""
    statuses = [record.status if isinstance(record, JobRecord) else None for record in records]
    done = sum(status is Status.COMPLETED for status in statuses)
    parts = [f"{done} of {len(statuses)} done"]
    for status, word in (
        (Status.RUNNING, "running"),
        (Status.PENDING, "waiting"),
        (Status.FAILED, "failed"),
        (Status.STOPPED, "stopped"),
        (Status.LOST, "lost"),
    ):
        count = sum(found is status for found in statuses)
        if count:
            parts.append(f"{count} {word}")
    gone = statuses.count(None)
    if gone:
        parts.append(f"{gone} removed")
    return ", ".join(parts)


def stop_sweep(
    store: JobStore, sweep: SweepRecord, backends: _backends.Backends | None = None, container: bool = False
) -> list[Job]:
    """Stop the whole sweep: its waiting runs first, so that none starts as a running one ends, then
    its running ones. Returns the runs (a removed one is passed over)."""
    jobs = [job.refresh() for job in sweep_jobs(store, sweep, backends) if isinstance(job, Job)]
    unfinished = [job for job in jobs if not job.record.status.is_final]
    asked_before = {job.name: job.request_stop() for job in unfinished}  # each run's end then reads as this stop
    try:
        sent: list[str] = []
        for backend in {id(job.backend_impl()): job.backend_impl() for job in unfinished}.values():
            sent += backend.stop_together(
                [(job.record, job.run_dir) for job in unfinished if job.backend_impl() is backend]
            )
        for job in unfinished:
            if job.name in sent:
                job.stop_sent()
    except TrainerError:
        for job in unfinished:
            job.undo_stop_request(asked_before[job.name])
        raise
    # sent together, they end together (a stop of each would send it again): waited for as one
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    for job in unfinished:
        if job.name in sent:
            job.wait(max(0.0, deadline - time.monotonic()), interval=0.2)
    for job in sorted(jobs, key=lambda job: job.record.status is not Status.PENDING):
        if not job.record.status.is_final or container:
            job.stop(container=container)
    return jobs


def remove_sweep(store: JobStore, sweep: SweepRecord, backends: _backends.Backends | None = None) -> list[str]:
    """Remove the sweep's runs and its record; refused, before anything is removed, while a run has
    not ended. Returns what was removed, in words."""
    from .housekeeping import describe_removed, remove_runs

    jobs = [job.refresh() for job in sweep_jobs(store, sweep, backends) if isinstance(job, Job)]
    unfinished = [job.name for job in jobs if not job.record.status.is_final]
    if unfinished:
        raise InvalidOption(
            f"sweep {sweep.name!r} has runs that have not ended: "
            f"{', '.join(unfinished[:5])}{' ...' if len(unfinished) > 5 else ''}",
            f"stop it first: jupyter-trainer stop {sweep.name}",
        )
    said = [describe_removed(remove_runs(job.name, None, store, backends)) for job in jobs]
    with store.writing():
        sweep_path(store, sweep.name).unlink(missing_ok=True)
        shutil.rmtree(store.sweep_files(sweep.name), ignore_errors=True)  # links, never followed
    return [*said, f"removed sweep {sweep.name}"]


SWEEP_OF = "sweep_of"  # in a sweep's row's options: how many runs it has (see sweep_row)


def with_sweeps(items: list, store: JobStore, all_runs: bool = False) -> list:
    """A jobs list with each sweep's runs as one row (`sweep_row`), where its first run was; with
    `all_runs`, its runs follow it. A sweep's runs are those its record names (a run of values it
    had before --rerun is a job of its own)."""
    member: dict[str, str] = {}  # a run's name: its sweep's
    sizes: dict[str, int] = {}
    for name in sweep_names(store):
        try:
            sweep = load_sweep(store, name)
        except TrainerError:  # a record that cannot be read: its runs are listed as jobs
            continue
        if sweep is not None:
            sizes[name] = len(sweep.runs)
            member.update((run, name) for run in sweep.runs)

    def sweep_of(item) -> str | None:
        sweep = item.options.get("sweep") if isinstance(item, JobRecord) else None
        return sweep if isinstance(sweep, str) and member.get(item.name) == sweep else None

    grouped: dict[str, list[JobRecord]] = {}
    for item in items:
        if sweep_of(item) is not None:
            grouped.setdefault(sweep_of(item), []).append(item)
    shown, placed = [], set()
    for item in items:
        sweep = sweep_of(item)
        if sweep is None:
            shown.append(item)
            continue
        if sweep not in placed:
            placed.add(sweep)
            shown.append(sweep_row(sweep, grouped[sweep], sizes[sweep]))
        if all_runs:
            shown.append(item)
    return shown


def sweep_row(name: str, records: list[JobRecord], size: int | None = None) -> JobRecord:
    """A record standing for a whole sweep in a jobs table: its status, its progress as its reason
    (`size`: its runs, those removed from under it counted as such), from its first start to its
    last end."""
    latest = {record.name: record for record in records}  # each run's latest
    runs = list(latest.values())
    started = [record.started_at for record in runs if record.started_at is not None]
    status = sweep_status(runs)
    ended = [record.ended_at for record in runs if record.ended_at is not None]
    removed = [TrainerError("removed")] * max(0, (size or 0) - len(runs))
    return JobRecord(
        name=name, backend=runs[0].backend, status=status, reason=progress_text([*runs, *removed]),
        created_at=min(record.created_at for record in runs), started_at=min(started) if started else None,
        ended_at=max(ended) if status.is_final and ended else None, options={SWEEP_OF: len(runs)},
    )  # fmt: skip


def runs_named(names: list[str], store: JobStore) -> list[str]:
    """Job names, with a sweep's name standing for its runs (compare NAME compares a sweep's runs;
    one removed from under it is left out, unless none is left)."""
    found: list[str] = []
    for name in names:
        sweep = load_sweep(store, name) if store.latest_run(name) is None else None
        present = [run for run in sweep.runs if store.latest_run(run) is not None] if sweep is not None else []
        found += present or (sweep.runs if sweep is not None else [name])
    return found
