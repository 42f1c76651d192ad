"""Jobs as text: the one-line summary, the status block and the jobs table.

Shared by the magics (`--no-widget`, terminal IPython) and the CLI. Whatever depends on where a
job runs is asked of its backend, found in the registry the caller was given.
"""

from __future__ import annotations

import time
from typing import Iterable

from .. import surface
from ..backends import Backends
from ..core.record import JobRecord, Status, describe_outcome, format_duration
from ..core.resources import Usage
from ..core.resources import as_json as resources_json
from ..core.resources import describe as describe_usage
from ..core.wording import readable, text_table
from ..errors import TrainerError
from ..logs.reading import clean_line

COLUMNS = ("name", "backend", "host", "status", "started", "duration", "exit code")


def format_time(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def where(record: JobRecord, backends: Backends) -> str:
    """Where the job runs, in its backend's words (its name alone when they cannot be had: one bad
    record never breaks a listing). A backend's words may pass on a runtime's (Slurm's reason a job
    waits), so they are shown readable, as are its facts and its host."""
    try:
        return readable(backends.get(record.backend).describe_where(record))
    except TrainerError:
        return readable(record.backend)  # as the record has it, which a job can write


def facts(record: JobRecord, backends: Backends) -> list[str]:
    """What the job's runtime says of it besides its status, in its backend's words (none when
    they cannot be had)."""
    try:
        return [readable(fact) for fact in backends.get(record.backend).describe_facts(record)]
    except TrainerError:
        return []


def host(record: JobRecord, backends: Backends) -> str | None:
    """The machine the job runs on, by the name the user knows it by, where its backend has one
    (a Docker job's host: "local" for this machine's engine); None otherwise."""
    try:
        shown = backends.get(record.backend).describe_host(record)
        return readable(shown) if shown else shown
    except TrainerError:
        return None


def restarts(record: JobRecord, backends: Backends) -> int:
    """How often the job was started again (its backend's `status_fields` says), else 0."""
    try:
        count = backends.get(record.backend).status_fields(record).get("restarts", 0)
    except TrainerError:
        return 0
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def status_text(record: JobRecord, backends: Backends) -> str:
    """The status as the tables and the view show it: a running job that was started again says
    which start it is in ("running (restart 1)")."""
    count = restarts(record, backends) if record.status is Status.RUNNING else 0
    return f"{record.status.value} (restart {count})" if count else record.status.value


def host_cell(record: JobRecord, backends: Backends) -> str:
    """The host column: the job's host, and whether it cannot be reached now."""
    shown = host(record, backends) or "-"
    if not record.status.is_final and record.unreachable_since is not None:
        return f"{shown} (unreachable since {format_time(record.unreachable_since)})"
    return shown


def run_label(record: JobRecord) -> str:
    """The job's name, and which run when it is not the first."""
    return record.name if record.run == 1 else f"{record.name} (run {record.run})"


def record_row(record: JobRecord, backends: Backends) -> tuple[str, ...]:
    name = run_label(record)
    exit_code = "-" if record.exit_code is None else str(record.exit_code)
    return (
        name,
        readable(record.backend),
        host_cell(record, backends),
        status_text(record, backends),
        format_time(record.started_at or record.created_at),
        format_duration(record.duration),
        exit_code,
    )


def table(rows: Iterable[tuple[str, ...]], header: tuple[str, ...] = COLUMNS) -> str:
    return text_table(rows, header)


def jobs_table(items: Iterable[JobRecord | TrainerError], backends: Backends) -> str:
    rows = []
    problems = []
    for item in items:
        if isinstance(item, TrainerError):
            problems.append(f"! {item}")
        else:
            rows.append(record_row(item, backends))
    if not rows and not problems:
        return "No jobs yet."
    return "\n".join([table(rows)] + problems) if rows else "\n".join(problems)


def printable(text: str) -> str:
    """A reason or a fact as a terminal may show it: a record written by an older version, or
    words a runtime passed on, may hold escapes; one line."""
    return " / ".join(clean_line(line).strip() for line in text.splitlines() if line.strip())


def one_line(record: JobRecord, backends: Backends) -> str:
    parts = [f"{record.name}: {status_text(record, backends)}", record.backend, where(record, backends)]
    if record.duration is not None:
        parts.append(format_duration(record.duration))
    outcome = describe_outcome(record.status, record.exit_code, record.reason, record.headline)
    if outcome:
        parts.append(printable(outcome))
    return " | ".join(parts)


def stop_line(record: JobRecord, backends: Backends) -> str:
    """What a stop reports: the job's line, and whether it is still stopping."""
    line = one_line(record, backends)
    if record.status.is_final:
        return line
    return f"{line} | stop requested, still stopping: {surface.command('list')} shows when it has stopped"


def status_block(record: JobRecord, backends: Backends, usage: Usage | None = None) -> str:
    lines = [
        ("name", run_label(record)),
        ("backend", record.backend),
        ("where", where(record, backends)),
        ("status", status_text(record, backends)),
        ("started", format_time(record.started_at)),
        ("duration", format_duration(record.duration)),
        ("exit code", "-" if record.exit_code is None else str(record.exit_code)),
    ]
    if record.reason:
        lines.append(("reason", printable(record.reason)))
    lines += [("note", printable(fact)) for fact in facts(record, backends)]  # what its backend says besides (left out, billed, ...)
    if usage is not None and usage.scope != "instances":  # a SageMaker job's instances are in "where"
        lines += [(what, f"{value} ({usage.scope})" if what == "cpu" else value) for what, value in describe_usage(usage).items()]
    width = max(len(key) for key, _ in lines)
    return "\n".join(f"{key.ljust(width)}  {value}" for key, value in lines)


def status_json(record: JobRecord, backends: Backends, usage: Usage | None = None) -> dict:
    """What `status --json` prints: the record without internals or anything secret, and what the
    job uses now where that is known."""
    shown_host = host(record, backends)
    return {
        "name": record.name,
        "run": record.run,
        "backend": record.backend,
        "status": record.status.value,
        "exit_code": record.exit_code,
        "reason": readable(record.reason),  # as a record an older version wrote may not have it
        "created_at": record.created_at,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "duration": record.duration,
        "where": where(record, backends),
        **({"host": shown_host} if shown_host else {}),
        **({"unreachable_since": record.unreachable_since} if record.unreachable_since is not None and not record.status.is_final else {}),
        "options": record.options,
        **({"notification": record.notification} if record.notification else {}),
        **({"resources": resources_json(usage)} if usage is not None else {}),
    }


def snapshot_text(snapshot) -> str:
    """A job's view (a monitor's Snapshot) as text, for frontends without widgets."""
    header = [snapshot.name, snapshot.status_text or snapshot.status.value, *([snapshot.asking] if snapshot.asking else []),
              f"{snapshot.backend} · {snapshot.where}", f"elapsed {format_duration(snapshot.elapsed)}"]  # fmt: skip
    if snapshot.outcome:
        header.append(snapshot.outcome)
    if snapshot.progress:
        header.append(f"{snapshot.progress.percent}%" + (f" ETA {snapshot.progress.eta}" if snapshot.progress.eta else ""))
    if snapshot.quiet_for:
        header.append(f"no output for {format_duration(snapshot.quiet_for)}")
    if snapshot.usage is not None:
        header += [f"{what} {value}" for what, value in describe_usage(snapshot.usage).items()]
    series = snapshot.metrics
    metrics = ", ".join(f"{name} {series.last(name):.4g}" for name in series.names() if series.last(name) is not None)
    return "\n".join([" ".join(header), *snapshot.facts, *([f"metrics: {metrics}"] if metrics else []), *snapshot.notes, *snapshot.lines[-10:]])
