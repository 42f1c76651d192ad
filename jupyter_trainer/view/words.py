"""What a job's record says in words, asked of its backend where that depends on where the job
runs: read once per record by a view (see fields.py, which decides what is shown)."""

from __future__ import annotations

import time

from ..backends import Backends
from ..backends.turns import turn_words
from ..core.record import JobRecord, Status
from ..core.wording import readable
from ..errors import TrainerError
from ..logs.reading import clean_line
from ..metrics.names import main_metric


def format_time(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def short_time(timestamp: float | None, now: float | None = None) -> str:
    """A table's time, as `ls -l` gives it: the day and minute within the year, else the date."""
    if timestamp is None:
        return "-"
    when = time.localtime(timestamp)
    this_year = when.tm_year == time.localtime(time.time() if now is None else now).tm_year
    return time.strftime("%m-%d %H:%M" if this_year else "%Y-%m-%d", when)


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
    if record.options.get("sweep_of"):  # a sweep's row (jobs/sweeps.py: sweep_row): its progress
        return f"{record.status.value} · sweep: {readable(record.reason)}"
    count = restarts(record, backends) if record.status is Status.RUNNING else 0
    text = f"{record.status.value} (restart {count})" if count else record.status.value
    turn = turn_words(record)  # what it waits for in its machine's lines, or the GPUs it took there
    return f"{text} · {readable(turn)}" if turn else text


def run_label(record: JobRecord) -> str:
    """The job's name, and which run when it is not the first."""
    return record.name if record.run == 1 else f"{record.name} (run {record.run})"


def printable(text: str) -> str:
    """A reason or a fact as a terminal may show it: a record written by an older version, or
    words a runtime passed on, may hold escapes; one line."""
    return " / ".join(clean_line(line).strip() for line in text.splitlines() if line.strip())


def own_fields(record: JobRecord, backends: Backends) -> dict:
    """What the job's backend adds to `status --json` of its own (a Slurm job's `slurm_job_id`,
    `restarts`): nothing when it cannot be had."""
    try:
        return dict(backends.get(record.backend).status_fields(record))
    except TrainerError:
        return {}


def metric_text(values: dict[str, float]) -> str:
    name = main_metric(values)
    return "" if name is None else f"{name} {values[name]:.4g}"


def run_params(record: JobRecord) -> dict[str, str]:
    """A sweep's run's values, as its options keep them ([[KEY, VALUE], ...]); {} for any other job."""
    kept = record.options.get("params")
    if not isinstance(kept, list):
        return {}
    return {
        pair[0]: pair[1]
        for pair in kept
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair)
    }
