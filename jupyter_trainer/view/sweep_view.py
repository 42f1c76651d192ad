"""A sweep in a notebook, as one thing: its progress ("4 of 12 done, 2 running, 6 waiting"), one live
chart of every run's metric with the best marked, a table of the runs with their values, status,
last and best value, and one Stop for the whole sweep.

It is the comparison's view (compare_view.CompareWidget: the poller reads each run's log a little at
a time and asks each unfinished run's status at its backend's pace) with the sweep's header, its
values and its Stop. The table shows at most MOST_ROWS runs (the best and the unfinished first),
and the chart at most compare_view.CHART_POINTS points in all: a sweep of hundreds of runs costs
about what a comparison of a few does.
"""

from __future__ import annotations

import html
import threading

from ..core.store import JobStore
from ..jobs.sweeps import SweepRecord, progress_text, stop_sweep, sweep_status
from .compare_runs import ComparedRun, compare
from .compare_view import CompareWidget, comparison_html
from .job_html import STATUS_COLOURS, describe, error_html

MOST_ROWS = 40


class SweepWidget(CompareWidget):
    def __init__(
        self, sweep: SweepRecord, runs: list[ComparedRun], store: JobStore, backends, metric: str | None = None
    ):
        import ipywidgets as widgets

        self.sweep = sweep
        self.store, self.backends = store, backends
        self.params = [
            params for name, params in zip(sweep.runs, sweep.params) if name in {run.job.name for run in runs}
        ]
        self.header = widgets.HTML()
        self.stop_button = widgets.Button(
            description="Stop sweep", icon="stop", button_style="danger", layout={"width": "auto"}
        )
        self.stop_button.on_click(lambda _button: self._stop())
        self._stopping = ""
        super().__init__(runs, metric)
        controls = widgets.HBox(
            [self.header, self.stop_button], layout={"justify_content": "space-between", "align_items": "center"}
        )
        self.box.children = (self.style, controls, self.body)
        self._header()

    def _stop(self) -> None:
        """Stop every run, the waiting ones first, off the kernel's thread (a stop waits for each run to end)."""
        self.stop_button.disabled = True
        self._stopping = "stopping every run…"
        self._header()

        def stop():
            try:
                stop_sweep(self.store, self.sweep, self.backends)
                self._stopping = ""
            except Exception as exc:  # said in the view: the runs stopped so far stay stopped
                self._stopping = f"cannot stop every run: {describe(exc)}"
            self._dirty = True
            self._header()

        threading.Thread(target=stop, name="jupyter-trainer-stop-sweep", daemon=True).start()

    def _header(self) -> None:
        records = [run.record for run in self.runs]
        status = sweep_status(records)
        badge = (
            f'<span class="jt-status" style="background:{STATUS_COLOURS[status]}">{html.escape(status.value)}</span>'
        )
        words = html.escape(f"{progress_text(records)}" + (f" · {self._stopping}" if self._stopping else ""))
        value = (
            f'<span class="jt-compare-title">sweep {html.escape(self.sweep.name)}</span> {badge} <span>{words}</span>'
        )
        if value != self.header.value:
            self.header.value = value
        self.stop_button.disabled = self.stop_button.disabled or status.is_final

    def _push(self) -> None:
        comparison = compare(self.runs, self.metric, self.by_time)
        statuses = [run.record.status for run in self.runs]
        value = comparison_html(comparison, statuses, self._asking, self.params, MOST_ROWS, self.controls)
        value += "".join(error_html(error) for error in self.errors.values())
        if value != self.body.value:
            self.body.value = value
        self._header()
        self._dirty = False
