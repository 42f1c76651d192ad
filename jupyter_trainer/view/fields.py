"""What a view shows of a job, as one list of fields.

`fields(snapshot)` is the one place that decides what is shown of a job and in which words; every
renderer draws the fields meant for its place: the live view's header and its saved copy (HTML),
the text view, `status` (a line each), `status --json`, the one-line summary, and a row of either
jobs table (text and notebook: the same columns). A new field is one more entry here. A field's
text is plain; what an HTML renderer makes of it is said by its `kind`, and it is escaped there.

A table's row, `status` and the one-line summary take a snapshot of the record alone
(`record_snapshot`): no log is read for them, and what only a live view knows (the log's lines,
progress, quiet time) is absent.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.record import JobRecord, describe_outcome, format_duration
from ..core.resources import Usage
from ..core.resources import as_json as resources_json
from ..core.resources import describe as describe_usage
from ..core.wording import readable
from ..metrics.series import MetricSeries
from .monitor import Snapshot
from .words import facts, format_time, host, own_fields, printable, run_params, short_time, status_text, where

# Where a field is shown.
HEADER = "header"  # the live view's header, and the copy saved in the notebook
TEXT = "text"  # the first line of the text view (a frontend without widgets)
LINE = "line"  # the one-line summary (a submission, a stop, `%train_attach --no-widget`)
BLOCK = "block"  # `status`: a line each
JSON = "json"  # `status --json`
ROW = "row"  # a row of the jobs tables, in ROW_COLUMNS' order

# The jobs tables' columns, text and notebook alike (the notebook adds its buttons): a field's key
# and the column's title.
ROW_COLUMNS = (
    ("name", "name"), ("backend", "backend"), ("host", "host"), ("status", "status"), ("started", "started"),
    ("duration", "duration"), ("exit_code", "exit code"), ("metric", "metric"),
)  # fmt: skip

# The kinds an HTML renderer draws in a way of their own; a field of no kind is a plain span.
NAME, STATUS, ASKING, CLOCK, QUIET, USAGE, PROGRESS, OUTCOME, FACT = (
    "name", "status", "asking", "clock", "quiet", "usage", "progress", "outcome", "fact"
)  # fmt: skip
CLOCKS = frozenset({CLOCK, QUIET})  # what moves with the clock alone, drawn in an element of its own


@dataclass(frozen=True)
class Field:
    key: str  # its name in `status --json` and a table's column
    label: str  # a `status` line's title
    text: str  # as a person reads it
    places: frozenset[str]
    value: object = None  # as `status --json` has it
    kind: str = ""  # how an HTML renderer draws it (see the kinds above)
    title: str = ""  # what hovering over it says


def _field(
    key: str, label: str, text: str, *places: str, value: object = None, kind: str = "", title: str = ""
) -> Field:
    return Field(key, label, text, frozenset(places), value, kind, title)


def fields(snapshot: Snapshot) -> list[Field]:
    """Everything shown of the job, in the order it is shown (a table's by ROW_COLUMNS)."""
    record = snapshot.record
    reason = readable(record.reason) if record is not None else ""
    shown = [
        _field(
            "name", "name", run_label(snapshot), HEADER, TEXT, LINE, BLOCK, ROW, JSON, kind=NAME, value=snapshot.name
        ),
        _field("run", "run", str(snapshot.run), JSON, value=snapshot.run),
        _field(
            "status",
            "status",
            snapshot.status_text or snapshot.status.value,
            HEADER,
            TEXT,
            LINE,
            BLOCK,
            ROW,
            JSON,
            value=snapshot.status.value,
            kind=STATUS,
            title=reason,
        ),  # fmt: skip
    ]
    if snapshot.asking:  # the status shown is the last known
        shown.append(_field("asking", "asking", snapshot.asking, HEADER, TEXT, ROW, kind=ASKING))
    shown += [
        _field("placement", "where", f"{snapshot.backend} · {snapshot.where}", HEADER, TEXT),
        _field("backend", "backend", readable(snapshot.backend), LINE, BLOCK, ROW, JSON, value=snapshot.backend),
        _field("where", "where", snapshot.where, LINE, BLOCK, JSON, value=snapshot.where),
    ]
    if record is not None:
        shown += _record_fields(snapshot, record)
    elapsed, quiet = clock_fields(snapshot.elapsed, snapshot.quiet_for)
    shown.append(elapsed)
    shown += _usage_fields(snapshot.usage)
    if snapshot.progress:
        eta = f" · ETA {snapshot.progress.eta}" if snapshot.progress.eta else ""
        shown.append(_field("progress", "progress", f"{snapshot.progress.percent}%{eta}", HEADER, TEXT, kind=PROGRESS))
    if quiet is not None:
        shown.append(quiet)
    if snapshot.outcome:
        shown.append(_field("outcome", "outcome", snapshot.outcome, HEADER, TEXT, LINE, kind=OUTCOME))
    if record is not None:
        if record.reason:
            shown.append(_field("reason", "reason", printable(record.reason), BLOCK))
        shown += _json_only(snapshot, record, reason)
    shown.append(_field("metric", "metric", snapshot.metric_text or "-", ROW))
    shown += [_field("fact", "note", fact, HEADER, TEXT, BLOCK, kind=FACT) for fact in snapshot.facts]
    shown += [
        _field(key, key, "", JSON, value=value) for key, value in snapshot.own.items()
    ]  # the backend's own (slurm_job_id, ...)
    return shown


def clock_fields(elapsed: float | None, quiet_for: float | None) -> tuple[Field, Field | None]:
    """What moves with the clock alone: the time since the job started, and how long it has been
    quiet once it says so. A live view draws these again each second without a snapshot."""
    shown = _field("elapsed", "elapsed", f"elapsed {format_duration(elapsed)}", HEADER, TEXT, kind=CLOCK)
    quiet = (
        _field("quiet", "quiet", f"no output for {format_duration(quiet_for)}", HEADER, TEXT, kind=QUIET)
        if quiet_for
        else None
    )
    return shown, quiet


def _record_fields(snapshot: Snapshot, record: JobRecord) -> list[Field]:
    host_text = snapshot.host or "-"
    if not record.status.is_final and record.unreachable_since is not None:
        host_text += f" (unreachable since {format_time(record.unreachable_since)})"
    shown = [
        _field("host", "host", host_text, ROW),
        _field("started", "started", short_time(record.started_at or record.created_at), ROW),
        _field("started", "started", format_time(record.started_at), BLOCK),
        _field("duration", "duration", format_duration(record.duration), ROW, BLOCK),
    ]
    if record.duration is not None:
        shown.append(_field("duration", "duration", format_duration(record.duration), LINE))
    shown.append(
        _field(
            "exit_code",
            "exit code",
            "-" if record.exit_code is None else str(record.exit_code),
            ROW,
            BLOCK,
            JSON,
            value=record.exit_code,
        )
    )
    return shown


def _usage_fields(usage: Usage | None) -> list[Field]:
    """CPU, memory and each GPU: in the header with their sparklines (drawn by the renderer from
    the snapshot's series), and in `status`, where the CPU's share says of what."""
    if usage is None:
        return []
    shown = []
    for what, words in describe_usage(usage).items():
        shown.append(_field(f"usage:{what}", what, words, HEADER, TEXT, kind=USAGE))
        if usage.scope != "instances":  # a SageMaker job's instances are in "where"
            shown.append(_field(f"usage:{what}", what, f"{words} ({usage.scope})" if what == "cpu" else words, BLOCK))
    return shown


def _json_only(snapshot: Snapshot, record: JobRecord, reason: str) -> list[Field]:
    """What `status --json` has besides: the reason as recorded, times as numbers, the job's options,
    what it uses, where they are known."""
    shown = [
        _field("reason", "reason", reason, JSON, value=reason)
    ]  # as a record an older version wrote may not have it
    shown += [
        _field(key, key, "", JSON, value=getattr(record, key))
        for key in ("created_at", "started_at", "ended_at", "duration")
    ]
    if snapshot.host:
        shown.append(_field("host", "host", snapshot.host, JSON, value=snapshot.host))
    if record.unreachable_since is not None and not record.status.is_final:
        shown.append(_field("unreachable_since", "unreachable since", "", JSON, value=record.unreachable_since))
    shown.append(_field("options", "options", "", JSON, value=record.options))
    shown.append(_field("params", "params", "", JSON, value=run_params(record)))
    git = record.provenance.get("git")
    if isinstance(git, dict):  # the repository its working directory lies in (absent outside one)
        shown.append(_field("git", "git", "", JSON, value=git))
    if record.notification:
        shown.append(_field("notification", "notification", "", JSON, value=record.notification))
    if snapshot.usage is not None:
        shown.append(_field("resources", "resources", "", JSON, value=resources_json(snapshot.usage)))
    return shown


def run_label(snapshot: Snapshot) -> str:
    """The job's name, and which run when it is not the first."""
    return snapshot.name if snapshot.run == 1 else f"{snapshot.name} (run {snapshot.run})"


def shown_in(place: str, snapshot: Snapshot) -> list[Field]:
    return [field for field in fields(snapshot) if place in field.places]


def row_fields(snapshot: Snapshot) -> list[Field]:
    """A table row's cells, in ROW_COLUMNS' order; the status cell's `asking` comes after it."""
    by_key: dict[str, Field] = {}
    for field in shown_in(ROW, snapshot):
        by_key.setdefault(field.key, field)
    return [by_key[key] for key, _title in ROW_COLUMNS if key in by_key]


def row_titles() -> tuple[str, ...]:
    return tuple(title for _key, title in ROW_COLUMNS)


def json_object(snapshot: Snapshot) -> dict:
    """`status --json`: each JSON field by its key (the backend's own last: they say it best)."""
    return {field.key: field.value for field in shown_in(JSON, snapshot)}


_NO_SERIES = MetricSeries(max_points=1, max_names=1)  # a record's snapshot reads no metric


def record_snapshot(
    record: JobRecord, backends, usage: Usage | None = None, metric: str = "", asking: str = ""
) -> Snapshot:
    """A snapshot of the record alone (a table's row, `status`, the one-line summary)."""
    return Snapshot(
        name=record.name,
        run=record.run,
        backend=record.backend,
        where=where(record, backends),
        status=record.status,
        status_text=status_text(record, backends),
        asking=asking,
        exit_code=record.exit_code,
        outcome=describe_outcome(record.status, record.exit_code, record.reason, record.headline),
        elapsed=record.duration,
        lines=(),
        metrics=_NO_SERIES,
        notes=(),
        facts=tuple(facts(record, backends)),
        ended_at=record.ended_at,
        usage=usage,
        record=record,
        host=host(record, backends),
        metric_text=metric,
        own=own_fields(record, backends),
    )
