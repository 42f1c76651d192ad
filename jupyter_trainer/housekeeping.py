"""Removing finished runs: one job's (`rm`) or every job's older than an age (`prune`).

Nothing running is ever touched: each run is brought up to date first, and a run
that has not ended is refused (by `rm`, in one line, before anything is removed)
or left alone (by `prune`). A job's runs are removed while its name is claimed,
so no kernel starts a new run of it meanwhile; a widget following a removed run
says so and stops.
"""

from __future__ import annotations

import re
import shutil
import time

from . import backends as _backends, surface
from .errors import TrainerError, UnknownJob
from .job import Job
from .jobs import JobRecord
from .store import JobStore

DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """'7d', '12h', '30m', '90s', '2w' (or several: '1d12h') in seconds."""
    compact = text.strip().lower().replace(" ", "")
    parts = DURATION.findall(compact)
    if not parts or "".join(number + unit for number, unit in parts) != compact:
        raise TrainerError(f"--older-than expects an age like 7d, 12h or 30m, got {text[:40]!r}")
    return sum(float(number) * SECONDS[unit] for number, unit in parts)


def remove_runs(name: str, run: int | None = None, store: JobStore | None = None, backends: _backends.Backends | None = None) -> list[JobRecord]:
    """Remove the job's runs (run `run` only, if given): all of them must have ended."""
    store = store or JobStore()
    with store.claiming(name):
        runs = store.runs(name)
        if not runs:
            raise UnknownJob(f"no job named {name!r}", f"{surface.command('list')} shows the jobs")
        if run is not None:
            if run not in runs:
                raise UnknownJob(f"job {name} has no run {run}", f"its runs: {', '.join(map(str, runs)) or 'none'}")
            runs = [run]
        records = [Job(store.load(name, number), store, backends).refresh().record for number in runs if store.has_record(name, number)]
        if not records:
            raise UnknownJob(f"no job named {name!r}", f"{surface.command('list')} shows the jobs")
        unfinished = [record for record in records if not record.status.is_final]
        if unfinished:
            which = ", ".join(f"run {record.run} is {record.status.value}" for record in unfinished)
            raise TrainerError(f"job {name} is not finished ({which}): nothing was removed", f"stop it first: {surface.command('stop', name)}")
        for record in records:
            left = _lingering(record, store, backends)
            if left:
                raise TrainerError(
                    f"job {name} run {record.run} has ended, but processes it started still run ({', '.join(left)}): nothing was removed",
                    "end them first; once its job has ended, a stop no longer reaches them",
                )
        for record in records:
            shutil.rmtree(store.run_dir(name, record.run), ignore_errors=True)
    return records


def prune(older_than: float, store: JobStore | None = None, backends: _backends.Backends | None = None, now: float | None = None) -> list[JobRecord]:
    """Remove every finished run that ended (or was created, if it never started) more than
    `older_than` seconds ago. Runs that have not ended, or whose processes still run, are left as
    they are."""
    store = store or JobStore()
    now = time.time() if now is None else now
    removed = []
    for name in store.names():
        with store.claiming(name):
            for number in store.runs(name):
                if not store.has_record(name, number):
                    continue
                try:
                    record = Job(store.load(name, number), store, backends).refresh().record
                except TrainerError:
                    continue  # a record that cannot be read is not removed blindly
                ended = record.ended_at or record.created_at
                if record.status.is_final and now - ended > older_than and not _lingering(record, store, backends):
                    shutil.rmtree(store.run_dir(name, number), ignore_errors=True)
                    removed.append(record)
    return removed


def _lingering(record: JobRecord, store: JobStore, backends: _backends.Backends | None) -> list[str]:
    """The processes an ended run left running (its record and log are what names them)."""
    try:
        return (backends or _backends.DEFAULT).get(record.backend).lingering(record, store.run_dir(record.name, record.run))
    except (_backends.UnknownBackend, TrainerError):
        return []


def describe_removed(records: list[JobRecord]) -> str:
    if not records:
        return "nothing to remove"
    return "removed " + ", ".join(f"{record.name} (run {record.run}, {record.status.value})" for record in records)


def prune_containers(store: JobStore | None = None, backends: _backends.Backends | None = None) -> list[str]:
    """Remove the stopped containers this store's jobs ran in that no remaining job uses."""
    store = store or JobStore()
    in_use = {
        record.runtime.get("container_name")
        for record in store.records(all_runs=True)
        if isinstance(record, JobRecord) and record.backend == "docker"
    }
    return (backends or _backends.DEFAULT).get("docker").remove_stopped_containers(store.jobs_dir, in_use)
