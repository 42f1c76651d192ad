"""Removing finished runs: one job's (`rm`) or every job's older than an age (`prune`).

Nothing running is ever touched: each run is brought up to date first, and a run
that has not ended is refused (by `rm`, in one line, before anything is removed)
or left alone (by `prune`). A job's runs are removed while its name is claimed,
so no kernel starts a new run of it meanwhile; a widget following a removed run
says so and stops.

What a submission killed half-way left of a name (a run directory without its
record, see `JobStore.abandoned`) goes with the name's runs: `rm` and `prune` leave
nothing of it behind.

A run is removed in two steps (see store.py): one rename takes it out of every
listing, then its files are deleted. Where the rename fails (a read-only or full
file system, a mount), nothing was removed and the run is listed as before; where
some files cannot be deleted, the run is no longer listed and the next `rm` of its
name, or any `prune`, deletes the rest. Either way the command says what could not
be removed, in one line, and fails: it never says "removed" of what is still there.
"""

from __future__ import annotations

import errno
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import backends as _backends
from .. import surface
from ..core.record import JobRecord
from ..core.store import JobStore
from ..errors import StoreError, TrainerError, UnknownJob
from .job import Job

DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
PROBLEMS_SHOWN = 3  # of the runs that could not be removed, named in the one line


def parse_age(text: str) -> float:
    """'7d', '12h', '30m', '90s', '2w' (or several: '1d12h') in seconds."""
    compact = text.strip().lower().replace(" ", "")
    parts = DURATION.findall(compact)
    if not parts or "".join(number + unit for number, unit in parts) != compact:
        raise TrainerError(f"--older-than expects an age like 7d, 12h or 30m, got {text[:40]!r}")
    return sum(float(number) * SECONDS[unit] for number, unit in parts)


@dataclass
class Removal:
    """What a removal did, and what it could not do."""

    removed: list[JobRecord] = field(default_factory=list)  # runs gone, every file of them
    finished: list[str] = field(default_factory=list)  # runs removed earlier whose last files went now
    # runs a submission killed half-way left without a record, gone now
    abandoned: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what could not be removed, each with why

    def checked(self, again: str) -> "Removal":
        """Itself when everything went; else the one-line error that says what could not be removed
        (after what was), and that `again` (a command) finishes the job."""
        if not self.problems:
            return self
        shown = self.problems[:PROBLEMS_SHOWN]
        more = len(self.problems) - len(shown)
        failed = "could not remove " + "; ".join(shown) + (f"; and {more} more" if more else "")
        done = describe_removed(self) if self.removed or self.finished or self.abandoned else ""
        raise TrainerError(
            f"{done}; {failed}" if done else failed,
            "make that place writable (a read-only or full file system, an immutable file or a mount may be in the "
            f"way), then {again}",
        )


def remove_runs(
    name: str, run: int | None = None, store: JobStore | None = None, backends: _backends.Backends | None = None
) -> Removal:
    """Remove the job's runs (run `run` only, if given): all of them must have ended. What an
    earlier removal of them could not delete goes too."""
    store = store or JobStore()
    again = f"run {surface.command('rm', name)}{'' if run is None else f' --run {run}'} again"
    removal = Removal()
    with store.claiming(name):
        leftovers = [(number, path) for number, path in store.leftovers(name) if run in (None, number)]
        abandoned = [(number, path) for number, path in store.abandoned(name) if run in (None, number)]
        records = _finished_runs(name, run, store, backends, found_before=bool(leftovers or abandoned))
        for number, path in leftovers:
            _delete_leftover(name, number, path, removal)
        for number, path in abandoned:
            _delete_abandoned(name, number, path, removal)
        for record in records:
            _remove_run(record, store, removal)
    return removal.checked(again)


def _finished_runs(
    name: str, run: int | None, store: JobStore, backends: _backends.Backends | None, found_before: bool
) -> list[JobRecord]:
    """The runs to remove, brought up to date; a refusal (unknown, not finished, processes left)
    before anything is removed. `found_before`: what an earlier removal left of them was found,
    so a job with no run left is no error."""
    runs = store.runs(name)
    if run is not None:
        if run not in runs and not found_before:
            raise UnknownJob(f"job {name} has no run {run}", f"its runs: {', '.join(map(str, runs)) or 'none'}")
        runs = [run] if run in runs else []
    records = [
        Job(store.load(name, number), store, backends).refresh().record
        for number in runs
        if store.has_record(name, number)
    ]
    if not records and not found_before:
        raise UnknownJob(f"no job named {name!r}", f"{surface.command('list')} shows the jobs")
    unfinished = [record for record in records if not record.status.is_final]
    if unfinished:
        which = ", ".join(f"run {record.run} is {record.status.value}" for record in unfinished)
        raise TrainerError(
            f"job {name} is not finished ({which}): nothing was removed",
            f"stop it first: {surface.command('stop', name)}",
        )
    for record in records:
        left = _lingering(record, store, backends)
        if left:
            raise TrainerError(
                f"job {name} run {record.run} has ended, but processes it started still run ({', '.join(left)}): "
                "nothing was removed",
                "end them first; once its job has ended, a stop no longer reaches them",
            )
    return records


def prune(
    older_than: float,
    store: JobStore | None = None,
    backends: _backends.Backends | None = None,
    now: float | None = None,
) -> Removal:
    """Remove every finished run that ended (or was created, if it never started) more than
    `older_than` seconds ago, and what earlier removals could not delete. Runs that have not ended,
    or whose processes still run, are left as they are."""
    store = store or JobStore()
    now = time.time() if now is None else now
    removal = Removal()
    for name in store.names():
        with store.claiming(name):
            for number, path in store.leftovers(name):
                _delete_leftover(name, number, path, removal)
            for number, path in store.abandoned(name):  # no run: --older-than does not apply
                _delete_abandoned(name, number, path, removal)
            for number in store.runs(name):
                if not store.has_record(name, number):
                    continue
                try:
                    record = Job(store.load(name, number), store, backends).refresh().record
                except TrainerError:
                    continue  # a record that cannot be read is not removed blindly
                ended = record.ended_at or record.created_at
                if record.status.is_final and now - ended > older_than and not _lingering(record, store, backends):
                    _remove_run(record, store, removal)
    return removal.checked("run the prune again")


def _remove_run(record: JobRecord, store: JobStore, removal: Removal) -> None:
    """Take the run out of the listings, then delete its files; note in `removal` what came of it."""
    which = f"{record.name} run {record.run}"
    try:
        hidden = store.retire(record.name, record.run)
    except (OSError, StoreError) as exc:
        where = store.run_dir(record.name, record.run)
        removal.problems.append(
            f"{which} ({_why(exc, named=False)}, at {where}): nothing of it was removed, it is listed as before"
        )
        return
    try:
        _delete_tree(hidden)
    except OSError as exc:
        removal.problems.append(
            f"all of {which} ({_why(exc)}): it is no longer listed, and the rest of its files is in {hidden}"
        )
        return
    removal.removed.append(record)


def _delete_leftover(name: str, run: int, path: Path, removal: Removal) -> None:
    """Delete what an earlier removal of the run could not."""
    if not path.is_dir():
        return  # deleted meanwhile, by hand
    try:
        _delete_tree(path)
    except OSError as exc:
        removal.problems.append(f"the rest of {name} run {run}, removed earlier ({_why(exc)}), in {path}")
        return
    removal.finished.append(f"{name} (run {run})")


def _delete_abandoned(name: str, run: int, path: Path, removal: Removal) -> None:
    """Delete what a submission killed half-way left of the run."""
    try:
        _delete_tree(path)
    except OSError as exc:
        removal.problems.append(f"what an interrupted submission left of {name} run {run} ({_why(exc)}), in {path}")
        return
    removal.abandoned.append(f"{name} (run {run})")


def _delete_tree(path: Path) -> None:
    """Delete `path` and all in it, as much of it as can be deleted; if anything is left, the
    OSError of the first file that could not be deleted (by its whole path)."""
    failures: list[OSError] = []

    def note(function, name, error) -> None:
        error = error[1] if isinstance(error, tuple) else error  # onerror's exc_info, onexc's exception
        if isinstance(error, OSError) and not isinstance(error, FileNotFoundError):
            failures.append(OSError(error.errno, error.strerror, name))

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=note)
    else:
        shutil.rmtree(path, onerror=note)
    if failures:  # a directory left not empty is what the file in it caused
        raise next((failure for failure in failures if failure.errno != errno.ENOTEMPTY), failures[0])


def _why(exc: BaseException, named: bool = True) -> str:
    """An OS error in words: what went wrong (and, if `named`, on which file)."""
    if isinstance(exc, StoreError) and isinstance(exc.__cause__, OSError):
        exc = exc.__cause__
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename and named else exc.strerror
    return str(exc)


def _lingering(record: JobRecord, store: JobStore, backends: _backends.Backends | None) -> list[str]:
    """The processes an ended run left running (its record and log are what names them)."""
    try:
        return (
            (backends or _backends.DEFAULT)
            .get(record.backend)
            .lingering(record, store.run_dir(record.name, record.run))
        )
    except TrainerError:
        return []


def describe_removed(removal: Removal) -> str:
    said = []
    if removal.removed:
        said.append(
            "removed "
            + ", ".join(f"{record.name} (run {record.run}, {record.status.value})" for record in removal.removed)
        )
    if removal.finished:
        said.append("finished removing " + ", ".join(removal.finished))
    if removal.abandoned:
        said.append("removed what an interrupted submission left of " + ", ".join(removal.abandoned))
    return "; ".join(said) or "nothing to remove"


def prune_containers(store: JobStore | None = None, backends: _backends.Backends | None = None) -> list[str]:
    """Remove the stopped containers this store's jobs ran in that no remaining job uses. Done while
    holding the store's containers lock, which a submission holds while it finds, creates or starts
    its container: the records are read, and the containers removed, with no submission in between."""
    store = store or JobStore()
    registry = backends or _backends.DEFAULT
    with store.containers_lock(shared=False):
        records = [record for record in store.records(all_runs=True) if isinstance(record, JobRecord)]
        removed: list[str] = []
        for name in registry.names():
            backend = registry.get(name)
            if backend.has_containers:  # each backend with containers knows which of its own are unused
                removed += backend.remove_unused_containers(
                    store, [record for record in records if record.backend == name]
                )
        return removed
