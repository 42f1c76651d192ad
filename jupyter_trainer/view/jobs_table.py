"""`%train_jobs` in a notebook: a live table of every job, refreshed by the kernel's poller.

One row per job (its latest run; every run with --all), newest first: status in colour,
backend and where it runs, elapsed time, the latest value of its main metric, and actions:
Attach (the job's own view, below the table), Log (its last lines) and Stop. A filter shows
the jobs of one status. Ticking the rows of two or more jobs and pressing Compare shows their
comparison (`%train_compare`) below the table. The store is looked at every SCAN_INTERVAL seconds; a job still
running is asked for its status at its backend's own pace, and its metric read from the end
of its log only when the log has grown.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import backends as _backends
from ..core.record import JobRecord, Status
from ..core.store import JobStore
from ..errors import TrainerError
from ..jobs.job import Job, one_poll
from ..jobs.status_checks import StatusCheck, wait_for_answers
from ..jobs.sweeps import sweep_names
from .fields import ROW_COLUMNS, STATUS, record_snapshot, row_fields, row_titles
from .job_html import STYLE, describe, error_html, status_badge
from .job_widget import stop_in_background
from .poller import PolledView
from .sweep_rows import SweepRow, attach_sweep, grouped, stop_sweep_in_background
from .words import metric_text, run_label

SCAN_INTERVAL = 2.0  # seconds between two looks at the store (new jobs, records changed elsewhere)
MAX_ROWS = 100  # the newest shown; the table says how many more there are
FILTERS = ("all", *(status.value for status in Status))

# The width of a column, by its field's key; a column not named here (a field added to the rows)
# shares what is left with the others.
COLUMN_WIDTHS = {"name": "minmax(7em, 2fr)", "backend": "5em", "host": "minmax(3em, 1fr)",
                 "status": "minmax(6.5em, 1.5fr)", "started": "7em", "duration": "5em", "exit_code": "3.5em",
                 "metric": "minmax(6em, 1.5fr)"}  # fmt: skip
# the tick box, the columns, the buttons
GRID = " ".join(["1.6em", *(COLUMN_WIDTHS.get(key, "minmax(4em, 1fr)") for key, _title in ROW_COLUMNS), "13em"])

TABLE_STYLE = """<style>
.jupyter-trainer-jobs .jt-row { display: grid; grid-template-columns: GRID;
  gap: 0 8px; align-items: center; border-bottom: 1px solid var(--jt-border); padding: 2px 4px; }
.jupyter-trainer-jobs .jt-row.jt-head { font-weight: bold; color: var(--jt-muted); }
.jupyter-trainer-jobs .jt-row.jt-head .jt-cell { white-space: normal; line-height: 1.1; }
.jupyter-trainer-jobs .jt-row > .widget-html { margin: 0; width: auto; min-width: 0; justify-self: stretch;
  overflow: hidden; }
.jupyter-trainer-jobs .jt-row .widget-html-content { display: block; overflow: hidden; }
.jupyter-trainer-jobs .jt-cell { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; text-align: left; }
.jupyter-trainer-jobs .jt-row .widget-button { width: auto; padding: 0 8px; height: 24px; margin: 1px 2px; }
.jupyter-trainer-jobs .jt-count { color: var(--jt-muted); padding: 0 4px; }
.jupyter-trainer-jobs .jt-row > .widget-checkbox { width: auto; margin: 0; height: 24px; }
.jupyter-trainer-jobs .jt-row > .widget-checkbox input { margin: 0; }
.jupyter-trainer-jobs .widget-button.jt-compare { width: auto; padding: 0 10px; margin-left: 8px; }
</style>""".replace("GRID", GRID)


def _cell(text: str, title: str = "") -> str:
    hover = f' title="{html.escape(title or text)}"'
    return f'<div class="jt-cell"{hover}>{html.escape(text)}</div>'


def status_cell(field, status: Status, asking: str = "") -> str:
    """The status field as its badge, its reason on hover; `asking`: what a status check under way
    says (the status is then the last known)."""
    badge = status_badge(status, field.text, field.title or field.text)
    return badge + (f' <span class="jt-asking">{html.escape(asking)}</span>' if asking else "")


def row_html(record: JobRecord, backends: _backends.Backends, metric: str = "", asking: str = "") -> tuple[str, ...]:
    """A row's cells: its fields (fields.ROW_COLUMNS), as the text table has them."""
    shown = row_fields(record_snapshot(record, backends, metric=metric))
    return tuple(
        status_cell(field, record.status, asking) if field.kind == STATUS else _cell(field.text) for field in shown
    )


@dataclass
class Row:
    """A job's row: what it shows, and its widgets once it has been shown (a job the filter or
    MAX_ROWS hides costs no widget)."""

    job: Job
    cells: list | None = None  # HTML widgets, one a column (fields.ROW_COLUMNS)
    pick: object = None  # the checkbox that selects it for Compare
    buttons: list | None = None  # attach, log, stop
    box: object = None
    checked_at: float = float("-inf")
    log_size: int = -1
    metric: str = ""
    shown: tuple = field(default_factory=tuple)
    arranged_as: Status | None = None  # its status when the rows were last filtered
    check: StatusCheck = field(init=False)  # its status checks (a slow backend's answer comes at a later poll)
    asking: str = ""  # what its status cell says of a check under way

    def __post_init__(self):
        self.check = StatusCheck(self.job)

    @property
    def record(self) -> JobRecord:
        return self.job.record


class JobsTable(PolledView):
    """The live table; the poller calls `poll` as it does a job view's."""

    def __init__(
        self,
        store: JobStore | None = None,
        all_runs: bool = False,
        log_lines: int = 200,
        clock: Callable[[], float] = time.time,
        backends: _backends.Backends | None = None,
    ):
        import ipywidgets as widgets

        self.widgets = widgets
        self.store = store or JobStore()
        self.backends = backends or _backends.DEFAULT  # the jobs are shown as this registry's backends see them
        self.all_runs = all_runs
        self.log_lines = log_lines
        self.clock = clock
        self.rows: dict[tuple[str, int], Row] = {}
        self.sweep_rows: dict[str, SweepRow] = {}  # each sweep's runs, shown as one row (but with --all)
        self.problems: list[str] = []
        self.error = ""
        self.last_scan = float("-inf")
        self.attached = None  # the job view its Attach button opened last
        self.compared = None  # the comparison its Compare button opened last
        self.picked: list[tuple[str, int]] = []  # the rows ticked for Compare, in the order they were
        self.style = widgets.HTML(STYLE + TABLE_STYLE, layout={"display": "none"})
        self.filter = widgets.ToggleButtons(options=FILTERS, value="all", tooltips=[f"show {f} jobs" for f in FILTERS])
        self.filter.style.button_width = "auto"
        self.filter.observe(lambda _change: self._arrange(), names="value")
        self.counts = widgets.HTML()
        self.compare_button = widgets.Button(
            description="Compare", disabled=True, tooltip="tick two or more jobs' rows to compare them"
        )
        self.compare_button.add_class("jt-compare")
        self.compare_button.on_click(lambda _b: self._compare())
        self.head = widgets.HBox(
            [widgets.HTML(_cell(""))]
            + [widgets.HTML(_cell(title)) for title in row_titles()]
            + [widgets.HTML(_cell("actions"))]
        )
        self.head.add_class("jt-row")
        self.head.add_class("jt-head")
        self.body = widgets.VBox()
        self.notes = widgets.HTML()
        self.detail = widgets.Output()
        self.box = widgets.VBox(
            [
                self.style,
                widgets.HBox([self.filter, self.compare_button, self.counts]),
                self.head,
                self.body,
                self.notes,
                self.detail,
            ],
            layout={"padding": "6px", "width": "100%"},
        )
        self.box.add_class("jupyter-trainer-job")  # the view's colours and theme variables
        self.box.add_class("jupyter-trainer-jobs")
        self.scan(self.clock())
        wait_for_answers(row.check for row in self.rows.values())  # a moment, for the statuses as they are now
        self._take_answers(self.clock())

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)

    # -- keeping up with the store ----------------------------------------------------

    def poll(self, now: float) -> bool:
        """Driven by the poller: look at the store when due. False once the table was closed."""
        if self.box.comm is None:  # closed (the output cleared, the widget closed): nothing to keep
            return False
        if self.clock() - self.last_scan >= SCAN_INTERVAL:
            self.scan(self.clock())
        else:
            self._take_answers(self.clock())
        return True

    def scan(self, now: float) -> None:
        self.last_scan = now
        try:
            items = list(self.store.records(self.all_runs))
        except (OSError, TrainerError) as exc:
            self._show_error(f"cannot read the job store: {describe(exc)}")
            return
        self.problems = []
        seen, rearrange = set(), False
        with one_poll(items, self.backends):  # one look for all the rows (Slurm: one squeue)
            for item in items:
                if isinstance(item, TrainerError):
                    self.problems.append(str(item))
                    continue
                key = (item.name, item.run)
                seen.add(key)
                row = self.rows.get(key)
                if row is None:
                    row = self.rows[key] = Row(Job(item, self.store, self.backends))
                    rearrange = True
                else:
                    row.job.record = item  # the store is the truth, whoever wrote it last
                self._refresh(row, now)
                rearrange |= row.record.status != row.arranged_as and self.filter.value != "all"
        gone = [key for key in self.rows if key not in seen]  # removed (rm, prune) elsewhere
        for key in gone:
            del self.rows[key]
        if gone:
            self._picked_changed()
        self.error = ""
        if rearrange or gone:
            self._arrange()
        else:
            self._show_counts()
        self._draw_sweeps()

    def _refresh(self, row: Row, now: float, ask: bool = True) -> None:
        """Bring a row up to date: a running job's status at its backend's pace (`ask`: a check may
        be asked; a slow backend's answer is taken at a later poll, and the next check is due an
        interval after it); what a shown row says (its metric read again only when the log grew)."""
        job = row.job
        try:
            answered = row.check.take()  # a slow backend's answer, come since
            if answered is not None:
                row.checked_at = now
            if ask and not job.record.status.is_final and now - row.checked_at >= job.backend_impl().status_interval:
                row.checked_at = now
                row.check.ask()
                answered = row.check.take()  # a check made at once answers now
            if answered is not None and row.box is not None:
                self._read_metric(row)
        except (OSError, TrainerError) as exc:
            self.problems.append(f"{job.name}: {describe(exc)}")
        if row.box is not None:
            self._draw(row)

    def _take_answers(self, now: float) -> None:
        """Between two scans: the answers of the status checks that came, and what the rows of the
        checks still under way say of them."""
        rearrange = changed = False
        for row in self.rows.values():
            if row.check.answered or (row.box is not None and row.check.words() != row.asking):
                before = row.record.status
                self._refresh(row, now, ask=False)
                changed |= row.record.status != before
                rearrange |= row.record.status != row.arranged_as and self.filter.value != "all"
        if rearrange:
            self._arrange()
        elif changed:
            self._show_counts()
        if changed:
            self._draw_sweeps()

    def _read_metric(self, row: Row) -> None:
        size = row.job.log_source().size()
        if size != row.log_size:
            row.log_size = size
            row.metric = metric_text(row.job.latest_metrics())

    # -- drawing -------------------------------------------------------------------------

    def _give_widgets(self, row: Row | SweepRow) -> None:
        """A row about to be shown for the first time: its widgets, and what it says."""
        if isinstance(row, SweepRow):
            self._give_sweep_widgets(row)
            return
        widgets, job = self.widgets, row.job
        cells = [widgets.HTML() for _ in ROW_COLUMNS]
        attach = widgets.Button(description="Attach", tooltip=f"show {job.name}'s view below")
        log = widgets.Button(
            description="Log", tooltip=f"show the last {self.log_lines} lines of {job.name}'s log below"
        )
        stop = widgets.Button(description="Stop", tooltip=f"stop {job.name} (its whole process group)")
        attach.add_class("jt-attach")
        log.add_class("jt-log-button")
        stop.add_class("jt-stop")
        pick = widgets.Checkbox(value=False, indent=False, tooltip=f"select {job.name} to compare")
        pick.add_class("jt-pick")
        key = (job.record.name, job.record.run)
        pick.observe(lambda change: self._pick(key, change["new"]), names="value")
        box = widgets.HBox([pick, *cells, widgets.HBox([attach, log, stop])])
        box.add_class("jt-row")
        row.cells, row.buttons, row.box, row.pick = cells, [attach, log, stop], box, pick
        attach.on_click(lambda _b: self._attach(row))
        log.on_click(lambda _b: self._show_log(row))
        stop.on_click(lambda _b: self._stop(row))
        try:
            self._read_metric(row)
        except (OSError, TrainerError) as exc:
            self.problems.append(f"{job.name}: {describe(exc)}")
        self._draw(row)

    def _give_sweep_widgets(self, row: SweepRow) -> None:
        widgets = self.widgets
        row.cells = [widgets.HTML() for _ in ROW_COLUMNS]
        attach = widgets.Button(description="Attach", tooltip=f"show sweep {row.name}'s view below")
        log = widgets.Button(
            description="Log", disabled=True, tooltip="a sweep has no log of its own: Attach shows its runs"
        )
        stop = widgets.Button(description="Stop", tooltip=f"stop every run of sweep {row.name}, the waiting ones first")
        attach.on_click(lambda _b: attach_sweep(self, row))
        stop.on_click(lambda _b: stop_sweep_in_background(self, row))
        row.pick = widgets.Checkbox(
            value=False, indent=False, disabled=True, tooltip="compare a sweep's runs with Attach"
        )
        row.buttons = [attach, log, stop]
        row.box = widgets.HBox([row.pick, *row.cells, widgets.HBox(row.buttons)])
        row.box.add_class("jt-row")
        self._draw(row)

    def _draw(self, row: Row | SweepRow) -> None:
        record = row.record
        row.asking = row.check.words() if isinstance(row, Row) else ""
        values = row_html(record, self.backends, row.metric, row.asking)
        if values != row.shown:
            for cell, value, before in zip(row.cells, values, row.shown or (None,) * len(values)):
                if value != before:
                    cell.value = value
            row.shown = values
        stop = row.buttons[2]
        if record.status.is_final and (not stop.disabled or stop.description != "Stop"):
            stop.disabled, stop.description = True, "Stop"

    def _arrange(self) -> None:
        """The rows the filter lets through, newest first."""
        chosen = None if self.filter.value == "all" else Status(self.filter.value)
        rows = sorted(
            [*self._gather_sweeps(), *self.sweep_rows.values()],
            key=lambda row: (row.record.created_at, row.record.run),
            reverse=True,
        )
        for row in rows:
            row.arranged_as = row.record.status
        shown = [row for row in rows if chosen is None or row.record.status is chosen]
        for row in shown[:MAX_ROWS]:
            if row.box is None:
                self._give_widgets(row)
        self.body.children = [row.box for row in shown[:MAX_ROWS]]
        more = len(shown) - MAX_ROWS
        self._show_counts(f"{more} older jobs not shown" if more > 0 else "")

    def _gather_sweeps(self) -> list:
        """The rows of jobs in no sweep; each sweep's runs gathered in one row (self.sweep_rows), kept
        from one arrangement to the next (its widgets with it). With --all, every run has its row."""
        if self.all_runs:
            self.sweep_rows = {}
            return list(self.rows.values())
        alone, together = grouped(self.rows, set(sweep_names(self.store)))
        for name, fresh in together.items():
            kept = self.sweep_rows.get(name)
            if kept is not None:
                kept.members = fresh.members
                together[name] = kept
        self.sweep_rows = together
        return alone

    def _draw_sweeps(self) -> None:
        for row in self.sweep_rows.values():
            if row.box is not None:
                self._draw(row)

    def _show_counts(self, extra: str = "") -> None:
        counts = {}
        for row in self.rows.values():
            counts[row.record.status.value] = counts.get(row.record.status.value, 0) + 1
        text = " · ".join(f"{count} {status}" for status, count in counts.items()) or "no jobs yet"
        value = f'<span class="jt-count">{html.escape(text)}</span>'
        if value != self.counts.value:
            self.counts.value = value
        notes = [extra] if extra else []
        notes += [f"! {problem}" for problem in self.problems]
        notes_html = "".join(f"<div>{html.escape(note)}</div>" for note in notes) + (
            error_html(self.error) if self.error else ""
        )
        if notes_html != self.notes.value:
            self.notes.value = notes_html

    def _show_error(self, text: str) -> None:
        if text != self.error:
            self.error = text
            self._show_counts()

    def show_failure(self, exc: BaseException) -> None:
        """A failure the poller caught in this table's own code: shown, and the table goes on."""
        self._show_error(f"cannot refresh the table: {describe(exc)}")

    # -- actions ---------------------------------------------------------------------------

    def _attach(self, row: Row) -> None:
        from .job_widget import JobWidget
        from .poller import poller

        self.detail.clear_output()
        try:
            # the row's own run (with --all an earlier run has a row of its own), read afresh
            record = self.store.load(row.record.name, row.record.run)
        except TrainerError as exc:
            self.problems.append(f"cannot attach to {row.record.name} run {row.record.run}: {describe(exc)}")
            self._show_counts()
            return
        with self.detail:
            view = JobWidget(Job(record, self.store, self.backends), log_lines=self.log_lines)
            view.show()
        self.attached = view
        if not view.monitor.finished:
            poller().watch(view)

    def _pick(self, key: tuple[str, int], picked: bool) -> None:
        if picked and key not in self.picked:
            self.picked.append(key)
        elif not picked and key in self.picked:
            self.picked.remove(key)
        self._picked_changed()

    def _picked_changed(self) -> None:
        self.picked = [key for key in self.picked if key in self.rows]
        count = len(self.picked)
        with self.compare_button.hold_sync():
            self.compare_button.disabled = count < 2
            self.compare_button.description = f"Compare {count}" if count >= 2 else "Compare"

    def _compare(self) -> None:
        """The ticked jobs' comparison below the table. A click reaches the kernel only while it is
        idle: this returns at once (the poller reads the logs)."""
        from .compare_runs import ComparedRun
        from .compare_view import CompareWidget
        from .poller import poller

        self.detail.clear_output()
        runs = []
        for name, run in self.picked:
            try:
                record = self.store.load(name, run)  # that row's own run, read afresh
            except TrainerError as exc:
                self.problems.append(f"cannot compare {name} run {run}: {describe(exc)}")
                continue
            runs.append(ComparedRun(Job(record, self.store, self.backends)))
        if not runs:
            self._show_counts()
            return
        view = CompareWidget(runs)
        with self.detail:
            from IPython.display import display

            display(view)
        self.compared = view
        if not view.finished:
            poller().watch(view)

    def _show_log(self, row: Row) -> None:
        self.detail.clear_output()
        try:
            lines = list(row.job.log_lines(tail=self.log_lines))
            text = "\n".join(lines) if lines else "(the log is empty)"
        except (OSError, TrainerError) as exc:
            text = f"cannot read {row.job.name}'s log: {describe(exc)}"
        with self.detail:
            print(f"--- {run_label(row.record)}: the last {self.log_lines} lines ---\n{text}")

    def _stop(self, row: Row) -> None:
        stop = row.buttons[2]
        stop.disabled, stop.description = True, "Stopping…"

        def done(error: Exception | None) -> None:
            if error is not None:
                stop.disabled, stop.description = False, "Stop"
                self.problems.append(f"could not stop {row.job.name}: {describe(error)}")
                self._show_counts()
                return
            row.checked_at = float("-inf")
            self.last_scan = float("-inf")  # at the next tick

        stop_in_background(Job(row.record, self.store, self.backends), done)
