"""A sweep as one row of the notebook's jobs table (`%train_jobs`), as `list` shows it: its status and
progress ("running · sweep: 4 of 12 done, 2 running, 6 waiting"), from its first start; Attach shows
the sweep's view, Stop stops every run. Its runs keep their own rows (their status checks go on),
shown only with --all."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..core.record import JobRecord
from ..jobs.sweeps import sweep_row


@dataclass
class SweepRow:
    name: str
    members: list = field(default_factory=list)  # the rows of its runs (jobs_table.Row)
    cells: list | None = None
    pick: object = None
    buttons: list | None = None
    box: object = None
    shown: tuple = field(default_factory=tuple)
    arranged_as: object = None
    asking: str = ""
    metric: str = ""

    @property
    def record(self) -> JobRecord:
        return sweep_row(self.name, [member.record for member in self.members])


def grouped(rows: dict, sweeps: set[str]) -> tuple[list, dict[str, SweepRow]]:
    """(the rows of jobs in no sweep, a SweepRow by sweep name gathering the others' rows)."""
    alone, together = [], {}
    for row in rows.values():
        sweep = row.record.options.get("sweep")
        if isinstance(sweep, str) and sweep in sweeps:
            together.setdefault(sweep, SweepRow(sweep)).members.append(row)
        else:
            alone.append(row)
    return alone, together


def stop_sweep_in_background(table, row: SweepRow) -> None:
    """Every run stopped, the waiting ones first, on a thread of its own (a stop waits for each run)."""
    from ..jobs.sweeps import load_sweep, stop_sweep
    from .job_html import describe

    stop = row.buttons[2]
    stop.disabled, stop.description = True, "Stopping…"

    def run():
        try:
            sweep = load_sweep(table.store, row.name)
            if sweep is not None:
                stop_sweep(table.store, sweep, table.backends)
        except Exception as exc:  # said under the table: the runs stopped so far stay stopped
            stop.disabled, stop.description = False, "Stop"
            table.problems.append(f"could not stop sweep {row.name}: {describe(exc)}")
        table.last_scan = float("-inf")  # at the next tick

    threading.Thread(target=run, name=f"jupyter_trainer-stop-sweep-{row.name}", daemon=True).start()


def attach_sweep(table, row: SweepRow) -> None:
    """The sweep's view below the table."""
    from IPython.display import display

    from ..jobs.sweeps import load_sweep
    from .compare_runs import load_runs
    from .poller import poller
    from .sweep_view import SweepWidget

    table.detail.clear_output()
    sweep = load_sweep(table.store, row.name)
    if sweep is None:
        return
    present = [name for name in sweep.runs if table.store.latest_run(name) is not None]
    view = SweepWidget(
        sweep, load_runs(present, None, table.store, table.backends, refresh=False), table.store, table.backends
    )
    with table.detail:
        display(view)
    table.attached = view
    if not view.finished:
        poller().watch(view)
