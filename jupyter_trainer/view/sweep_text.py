"""A sweep as text and as JSON: its progress, and a table of its runs with their values, status, and
the last and best value of the metric (read from each run's whole log, as `compare` reads it)."""

from __future__ import annotations

from ..core.record import JobRecord
from ..core.store import JobStore
from ..core.wording import readable
from ..errors import TrainerError
from ..jobs.sweeps import SweepRecord, load_sweep, progress_text, sweep_jobs, sweep_notification, sweep_status
from ..metrics.comparison import LOWEST, columns, direction, format_value
from .compare_runs import ComparedRun, compare


def sweep_rows(sweep: SweepRecord, store: JobStore, backends, metric: str | None = None) -> tuple[list, str | None]:
    """(one dict per run: name, params, status, last, best, and the record where there is one; the metric)."""
    jobs = sweep_jobs(store, sweep, backends)
    found = [job.refresh() for job in jobs if not isinstance(job, TrainerError)]
    runs = [ComparedRun(job, metric, curves=False).read_all() for job in found]
    comparison = compare(runs, metric) if runs else None
    by_name = {row.name: row for row in comparison.rows} if comparison else {}
    rows = []
    for name, params, job in zip(sweep.runs, sweep.params, jobs):
        if isinstance(job, TrainerError):
            rows.append(
                {"name": name, "params": params, "status": "removed", "last": None, "best": None, "record": None}
            )
            continue
        row = by_name.get(job.record.name if job.record.run == 1 else f"{job.record.name} (run {job.record.run})")
        rows.append({
            "name": name, "params": params, "status": job.record.status.value,
            "last": row.as_json()["last"] if row else None, "best": row.as_json()["best"] if row else None,
            "record": job.record,
        })  # fmt: skip
    return rows, comparison.metric if comparison else None


def sweep_json(name: str, store: JobStore, backends, metric: str | None = None) -> dict:
    """`status NAME --json` for a sweep: its status, progress and `sweep` (a run each)."""
    sweep = _sweep(name, store)
    rows, metric = sweep_rows(sweep, store, backends, metric)
    records = [row["record"] if row["record"] is not None else TrainerError("removed") for row in rows]
    return {
        "name": sweep.name, "kind": "sweep", "status": sweep_status(records).value, "progress": progress_text(records),
        "backend": sweep.backend, "max_running": sweep.max_running, "metric": metric,
        "sweep": [{key: row[key] for key in ("name", "params", "status", "last", "best")} for row in rows],
        **({"notification": told} if (told := sweep_notification(store, sweep.name)) is not None else {}),
    }  # fmt: skip


def sweep_text(name: str, store: JobStore, backends, metric: str | None = None) -> str:
    """The sweep as a terminal shows it: a line of progress, then its runs' table."""
    sweep = _sweep(name, store)
    rows, metric = sweep_rows(sweep, store, backends, metric)
    records: list[JobRecord | TrainerError] = [
        row["record"] if row["record"] is not None else TrainerError("removed") for row in rows
    ]
    keys = list(dict.fromkeys(key for params in sweep.params for key in params))
    titles = ["name", *keys, "status", "last", columns(metric)[4] if metric else "best"]
    best = best_run(rows, metric)
    table = [titles] + [
        [row["name"], *(readable(row["params"].get(key, "-")) for key in keys), row["status"],
         format_value(row["last"]), format_value(row["best"])]
        for row in rows
    ]  # fmt: skip
    widths = [max(len(line[column]) for line in table) for column in range(len(titles))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]
    head = f"sweep {sweep.name}: {progress_text(records)} ({sweep_status(records).value})" + (
        f"; metric {metric}" if metric else ""
    )
    tail = [f"best: {rows[best]['name']}"] if best is not None else []
    return "\n".join([head, *lines, *tail])


def best_run(rows: list[dict], metric: str | None) -> int | None:
    """Which run has the best value of the metric, where its name says which way is best."""
    way = direction(metric) if metric else None
    found = [(row["best"], index) for index, row in enumerate(rows) if isinstance(row["best"], (int, float))]
    if way is None or not found:
        return None
    return (min(found) if way == LOWEST else max(found, key=lambda pair: (pair[0], -pair[1])))[1]


def _sweep(name: str, store: JobStore) -> SweepRecord:
    sweep = load_sweep(store, name)
    if sweep is None:
        raise TrainerError(f"no sweep named {name!r}")
    return sweep
