"""Jobs as text: the one-line summary, `status` (a line each, or JSON), the jobs table and a job's
view for frontends without widgets.

Shared by the magics (`--no-widget`, terminal IPython) and the CLI. What is shown of a job, and in
which words, is its fields' (fields.py); these draw them as text.
"""

from __future__ import annotations

from typing import Iterable

from .. import surface
from ..backends import Backends
from ..core.record import JobRecord
from ..core.resources import Usage
from ..core.store import JobStore
from ..core.wording import text_table
from ..errors import TrainerError
from ..jobs.job import Job
from .fields import BLOCK, FACT, LINE, TEXT, USAGE, json_object, record_snapshot, row_fields, row_titles, shown_in
from .monitor import Snapshot
from .words import metric_text, printable


def record_row(record: JobRecord, backends: Backends, metric: str = "") -> tuple[str, ...]:
    return tuple(field.text for field in row_fields(record_snapshot(record, backends, metric=metric)))


def jobs_table(items: Iterable[JobRecord | TrainerError], backends: Backends, metrics: dict | None = None) -> str:
    """The jobs table as text, the notebook's columns (`metrics`: each run's main metric, by its
    (name, run), where it was read); a record that could not be read is named under it."""
    rows = []
    problems = []
    for item in items:
        if isinstance(item, TrainerError):
            problems.append(f"! {item}")
        else:
            rows.append(record_row(item, backends, (metrics or {}).get((item.name, item.run), "")))
    if not rows and not problems:
        return "No jobs yet."
    return "\n".join([text_table(rows, row_titles())] + problems) if rows else "\n".join(problems)


def main_metrics(
    items: Iterable[JobRecord | TrainerError], store: JobStore, backends: Backends
) -> dict[tuple[str, int], str]:
    """Each run's main metric's latest value, for the text table's metric column, read from the end
    of each log that lies on this machine (a remote one would cost a call to its host per job: its
    cell stays "-", as does a log that cannot be read now)."""
    shown = {}
    for record in items:
        if isinstance(record, TrainerError):
            continue
        job = Job(record, store, backends)
        try:
            if job.log_source().local_file() is not None:
                shown[(record.name, record.run)] = metric_text(job.latest_metrics())
        except (OSError, TrainerError):
            continue
    return shown


def one_line(record: JobRecord, backends: Backends) -> str:
    parts = [field.text for field in shown_in(LINE, record_snapshot(record, backends))]
    first = f"{parts[0]}: {parts[1]}"  # the name, and its status
    return " | ".join([first, *(printable(text) for text in parts[2:])])


def stop_line(record: JobRecord, backends: Backends) -> str:
    """What a stop reports: the job's line, and whether it is still stopping."""
    line = one_line(record, backends)
    if record.status.is_final:
        return line
    return f"{line} | stop requested, still stopping: {surface.command('list')} shows when it has stopped"


def status_block(record: JobRecord, backends: Backends, usage: Usage | None = None) -> str:
    lines = [
        (field.label, printable(field.text))
        for field in shown_in(BLOCK, record_snapshot(record, backends, usage=usage))
    ]
    width = max(len(key) for key, _ in lines)
    return "\n".join(f"{key.ljust(width)}  {value}" for key, value in lines)


def status_json(record: JobRecord, backends: Backends, usage: Usage | None = None) -> dict:
    """What `status --json` prints: the record without internals or anything secret, what the job
    uses now where that is known, and what its backend adds of its own."""
    return json_object(record_snapshot(record, backends, usage=usage))


def snapshot_text(snapshot: Snapshot) -> str:
    """A job's view (a monitor's Snapshot) as text, for frontends without widgets."""
    shown = shown_in(TEXT, snapshot)
    header = [
        field.text if field.kind != USAGE else f"{field.label} {field.text}" for field in shown if field.kind != FACT
    ]
    series = snapshot.metrics
    metrics = ", ".join(f"{name} {series.last(name):.4g}" for name in series.names() if series.last(name) is not None)
    facts = [field.text for field in shown if field.kind == FACT]
    return "\n".join(
        [
            " ".join(header),
            *facts,
            *([f"metrics: {metrics}"] if metrics else []),
            *snapshot.notes,
            *snapshot.lines[-10:],
        ]
    )
