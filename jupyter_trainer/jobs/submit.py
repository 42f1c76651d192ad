"""Submitting a detached job: same cell attaches, a clashing name is refused, a new run is launched.

This is the one place that creates runs, so the re-run rules of the contract
live here: a cell identical to the job of that name attaches to it; a different
cell under a pending or running job's name is an error; under a finished job's
name it needs `rerun`. A launch that fails removes the run it created, so the
store is left as it was; so does a launch whose record cannot be written (a full
store), once it has stopped the job it started, which nothing would follow.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from .. import backends as _backends
from .. import surface
from ..backends.turns import waits_in_line
from ..core import interrupts
from ..core.naming import HASH_CHARS, default_name, legacy_name
from ..core.processes import ProcessIdentity
from ..core.record import JobRecord, mark_stop_sent, validate_name
from ..core.store import JobStore
from ..errors import NameInUse, TrainerError
from ..spec.job_spec import DetachedSpec
from .job import Job
from .provenance import git_state, keep_diff, local_directory


@dataclass
class Submission:
    job: Job
    attached: bool  # True: the same cell had already been submitted; nothing was started
    facts: tuple[str, ...] = ()  # what its backend says of the new launch (see Backend.describe_facts)

    @property
    def message(self) -> str:
        if self.attached:
            source = "this cell" if surface.in_a_notebook() else "this script with these options"
            return (
                f"Job {self.job.name!r} was already submitted from {source} ({self.job.record.status.value}); "
                "attached to it, nothing new was started."
            )
        facts = "".join(f" {fact}." for fact in self.facts)  # what the launch left out, say
        return f"Started job {self.job.name!r} ({self.job.backend}).{facts}"


def submit_detached(
    spec: DetachedSpec,
    name: str | None = None,
    rerun: bool = False,
    store: JobStore | None = None,
    backends: _backends.Backends | None = None,
    label: str | None = None,
    git: tuple[dict | None, bytes] | None = None,
) -> Submission:
    """Launch `spec` as job `name` (default: `label`, the notebook's or script's name, and a hash
    of the cell), or attach to the job this very cell already started."""
    store = store or JobStore()
    backends = backends or _backends.DEFAULT
    backend = backends.get(spec.backend)
    spec = backend.preflight(spec, store) or spec  # an unreachable runtime is one line before the store is touched
    fingerprint = spec.fingerprint(store.fingerprint_key(), rerun)
    in_place = bool(spec.script_path)  # a file run in place
    if name is None:
        # the same cell gets the same name, so running it again attaches instead of training twice;
        # a script run in place is named by its path and options, not its text: once the file has
        # changed, the same line names the same job, which it then may not silently train again
        named_by = _without_text(spec).fingerprint(store.fingerprint_key()) if in_place else fingerprint
        name = _named_before(store, fingerprint) or default_name(label, named_by)
    validate_name(name)
    # before the claim: git may take a moment (a sweep asks once, for all its runs: `git`)
    git, diff = git if git is not None else git_state(local_directory(spec))

    with store.claiming(name):  # looking for the name's runs and creating the next is one step
        if store.sweep_record(name).exists():  # a job of a sweep's name would hide the sweep
            raise NameInUse(
                f"{name!r} is the name of a sweep",
                f"choose another --name, or remove the sweep first: jupyter-trainer rm {name}",
            )
        store.remove_abandoned(name)  # what a submission killed half-way left: its run number is free again
        latest = store.latest_run(name)
        run = max(store.runs(name), default=0) + 1  # past a run directory an earlier version may be creating
        if latest is not None:
            existing = Job(store.load(name, latest), store, backends).refresh()
            if existing.record.fingerprint == fingerprint:
                return Submission(existing, attached=True)
            _refuse_other_cell(name, existing.record.status, rerun, "script" if in_place else "cell")
        record = JobRecord(
            name=name,
            backend=spec.backend,
            run=run,
            fingerprint=fingerprint,
            options=spec.public_options(),
            submitter=ProcessIdentity.current().to_dict(),
            provenance={"git": git} if git else {},
        )
        run_dir = store.create(record)
    try:
        with store.writing():
            keep_diff(run_dir, diff)
            backend.prepare(run_dir, spec)
        launched_at = backend.launch(record, run_dir, spec)
    except BaseException:
        store.discard(name, run)
        raise

    def launched(record: JobRecord) -> None:
        record.runtime = runtime
        # a job that waits its turn in its machine's lines has started once its turn came
        record.started_at = time.time() if backend.starts_at_launch and not waits_in_line(spec) else None

    with interrupts.held():  # it runs now: an interrupt must not leave it unrecorded
        runtime = launched_at.to_dict()
        try:
            job = Job(store.update(name, run, launched), store, backends)
        except Exception:  # a full store, say: what runs unrecorded is stopped, and the run goes
            _undo_launch(backend, dataclasses.replace(record, runtime=runtime), run_dir, store)
            raise
    if job.record.stop_requested:  # stopped from elsewhere while it was being launched
        backend.stop(job.record, run_dir)
        job.record = store.update(name, run, mark_stop_sent)
    return Submission(job, attached=False, facts=tuple(backend.describe_facts(job.record)))


def _undo_launch(backend, record: JobRecord, run_dir, store: JobStore) -> None:
    """The launch of `record` (its runtime as the launch returned it) could not be recorded: nothing
    would follow or stop its job, so it is stopped, and the run discarded. Were the stop to fail, the
    run is kept as it is (recorded as interrupted before its job started): the store says no less
    than it knows."""
    try:
        backend.stop(record, run_dir)
    except Exception:
        return
    store.discard(record.name, record.run)


def _named_before(store: JobStore, fingerprint: str) -> str | None:
    """The default name this cell's job already has, if any: under another label (the notebook was
    renamed since) or as earlier versions named it, the cell is still the same job."""
    suffix = f"-{fingerprint[:HASH_CHARS]}"
    for name in store.names():
        if name.endswith(suffix) or name == legacy_name(fingerprint):
            try:
                if store.load(name).fingerprint == fingerprint:
                    return name
            except TrainerError:
                continue
    return None


def _without_text(spec):
    """The spec with its script's text and hash left out: what names a script run in place."""
    return dataclasses.replace(spec, script="", script_sha256=None)


def _refuse_other_cell(name: str, status, rerun: bool, what: str = "cell") -> None:
    """A different cell (or script: `what`) under a taken name: an error unless it re-runs a finished job."""
    if not status.is_final:
        raise NameInUse(
            f"job {name!r} is {status.value} with a different {what}",
            f"choose another --name, or stop it first with {surface.command('stop', name)}",
        )
    if not rerun:
        raise NameInUse(
            f"job {name!r} already ran ({status.value}) with a different {what}",
            "pass --rerun to train again under this name (the old run is kept), or choose another --name",
        )
