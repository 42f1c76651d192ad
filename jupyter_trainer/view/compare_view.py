"""`%train_compare` in a notebook: one chart of several jobs' metric, and their table, kept live.

The view is built and displayed in the kernel's main thread; the kernel's one poller
(widget.poller) then drives it as it drives a job's view: it reads each job's log a
little at a time, checks a running job's status at its backend's pace, and sets the
view's HTML at most a few times a second, until every job has ended and its log is
read. The chart is the job view's SVG chart with one curve per job, each in its own
colour (plot.RUN_PALETTE) with its legend entry; the table says each job's status,
last and best value and how many values it has.
"""

from __future__ import annotations

import dataclasses
import html
import math
import threading
import time
from typing import Callable

from ..core.record import Status
from ..jobs.status_checks import wait_for_answers
from ..metrics import comparison as rules
from .chart_controls import HOST, STATE, ChartControls, new_prefix, state_html
from .charts import RUN_PALETTE, SMOOTH_POINTS, chart_svg
from .compare_runs import ComparedRun, Comparison, compare, what_differs
from .job_html import STATUS_COLOURS, STYLE, describe, error_html
from .poller import PolledView

PUSH_INTERVAL = 0.5  # seconds between two updates of the view
READ_SECONDS = 0.2  # of reading the jobs' logs per poll, in all (what is left is read at the next)
CHART_WIDTH, CHART_HEIGHT = 640, 260
# points drawn in all: 500 jobs' curves of a thousand points each made 4 MB of chart, sent to the
# browser at every update and drawn in about a second (a few pixels of width per point at most)
CHART_POINTS = 8000
MIN_CURVE_POINTS = 32
# the smoothed curves' points in all, at each of two levels and two scales (see chart_controls.py):
# a smoothed curve has no spike to keep, so a few dozen points draw it; of a hundred runs at most,
# the best ones (the others' raw lines stay as they are when smoothing is chosen)
SMOOTHED_POINTS = 1200
MIN_SMOOTHED_POINTS = 12
HIDEABLE_RUNS = 256  # runs the legend can hide (each has a checkbox and two rules, sent once)

COMPARE_STYLE = """<style>
.jupyter-trainer-compare .widget-html-content { line-height: 1.4; }
.jupyter-trainer-compare .jt-compare-title { font-weight: bold; color: var(--jt-fg); }
.jupyter-trainer-compare .jt-compare-note { color: var(--jt-muted); font-size: 12px; margin: 2px 0 6px; }
.jupyter-trainer-compare table.jt-compare-table { border-collapse: collapse; margin-top: 6px; font-size: 12px;
  color: var(--jt-fg); }
.jupyter-trainer-compare .jt-compare-table th, .jupyter-trainer-compare .jt-compare-table td {
  padding: 2px 10px; border-bottom: 1px solid var(--jt-border); text-align: left; color: var(--jt-fg);
  background: transparent; }
.jupyter-trainer-compare .jt-compare-table th { color: var(--jt-muted); font-weight: bold; }
.jupyter-trainer-compare .jt-compare-table td.jt-number { text-align: right; font-variant-numeric: tabular-nums; }
.jupyter-trainer-compare .jt-key { display: inline-block; width: 14px; height: 4px; border-radius: 2px;
  vertical-align: middle; margin-right: 6px; }
.jupyter-trainer-compare .jt-status { color: #fff; border-radius: 4px; padding: 0 6px; }
</style>"""


def comparison_html(
    comparison: Comparison,
    statuses: list[Status],
    asking: list[str] | None = None,
    params: list[dict] | None = None,
    most_rows: int | None = None,
    controls: ChartControls | None = None,
) -> str:
    """The chart, the notes and the table of a comparison (`asking`: what each job's status check
    under way says, if any; `params`: each run's values, shown as columns of their own, and the
    best run marked, as a sweep's view shows them; `most_rows`: the table's rows at most, the best
    and the unfinished first; `controls`: the chart's smoothing, scale and legend, see
    chart_controls.py). Everything a job controls is escaped."""
    colours = [RUN_PALETTE[index % len(RUN_PALETTE)] for index in range(len(comparison.rows))]
    best = best_row(comparison) if params is not None else None
    if best is not None:
        comparison = dataclasses.replace(
            comparison,
            curves=tuple(
                (f"{label} (best)" if index == best else label, points)
                for index, (label, points) in enumerate(comparison.curves)
            ),
        )
    metric = comparison.metric
    if metric is None:
        title = "no metric in these jobs' logs yet"
    else:
        title = f"{metric} of {len(comparison.rows)} job{'s' * (len(comparison.rows) != 1)}"
    parts = [f'<div class="jt-compare-title">{html.escape(title)}</div>']
    if comparison.note:
        parts.append(f'<div class="jt-compare-note">{html.escape(comparison.note)}</div>')
    if metric is not None:
        # with controls each curve is drawn at both scales (see chart_controls.py): half as many points each
        scales = 2 if controls else 1
        most = max(MIN_CURVE_POINTS // scales, CHART_POINTS // max(1, len(comparison.curves) * scales))
        curves = [(label, thinned(points, most), colour) for (label, points), colour in zip(comparison.curves, colours)]
        smoothed = ranked_rows(comparison)[: SMOOTHED_POINTS // MIN_SMOOTHED_POINTS]
        smooth = min(SMOOTH_POINTS, max(MIN_SMOOTHED_POINTS, SMOOTHED_POINTS // max(1, len(smoothed))))
        parts.append(
            chart_svg(
                metric,
                comparison.axis,
                curves,
                CHART_WIDTH,
                CHART_HEIGHT,
                wrap_legend=True,
                controls=controls,
                smooth_points=smooth,
                smoothed_runs=set(smoothed),
            )
        )
    parts.append(table_html(comparison, statuses, colours, asking, params, best, most_rows))
    notes = rules.notes(comparison.rows)  # the comparison's own note is under its title
    if len(comparison.rows) > len(RUN_PALETTE):
        notes.append(
            f"more jobs than colours: every {len(RUN_PALETTE)}th job has the same colour "
            "(the table's order is the legend's)"
        )
    parts += [f'<div class="jt-compare-note">{html.escape(note)}</div>' for note in notes]
    return "".join(parts)


def thinned(points: list[tuple[float, float]], most: int) -> list[tuple[float, float]]:
    """At most about `most` of the points, in order: each bucket's lowest and highest value (a
    spike or a dip stays) and the last point (the legend's latest value)."""
    if len(points) <= most:
        return points
    size = math.ceil(len(points) / max(1, most // 2))
    kept = []
    for start in range(0, len(points), size):
        bucket = points[start : start + size]
        low, high = min(bucket, key=lambda point: point[1]), max(bucket, key=lambda point: point[1])
        kept += sorted({low, high}, key=bucket.index)
    if kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept


def best_row(comparison: Comparison) -> int | None:
    """Which row has the best value of the metric, where its name says which way is best."""
    way = rules.direction(comparison.metric) if comparison.metric else None
    found = [
        (row.best, index)
        for index, row in enumerate(comparison.rows)
        if row.best is not None and math.isfinite(row.best)
    ]
    if way is None or not found:
        return None
    return (min(found) if way == "lowest" else max(found, key=lambda pair: (pair[0], -pair[1])))[1]


def ranked_rows(comparison: Comparison) -> list[int]:
    """The rows from the best value of the metric to the worst (where its name says which way is
    best; else in their order), those with no value last: the runs smoothed first."""
    way = rules.direction(comparison.metric) if comparison.metric else None
    order = list(range(len(comparison.rows)))
    if way is None:
        return order

    def key(index: int) -> tuple[bool, float]:
        best = comparison.rows[index].best
        known = best is not None and math.isfinite(best)
        return (not known, (best if way == "lowest" else -best) if known else 0.0)

    return sorted(order, key=key)


def table_html(
    comparison: Comparison,
    statuses: list[Status],
    colours: list[str],
    asking: list[str] | None = None,
    params: list[dict] | None = None,
    best: int | None = None,
    most_rows: int | None = None,
) -> str:
    """The table as the text one has it (metrics/comparison.py: columns, cells), each run's status
    a badge and its colour the chart's; a sweep's runs with their values."""
    keys = list(dict.fromkeys(key for each in params or () for key in each))
    titles = rules.columns(comparison.metric)
    head = "".join(f"<th>{html.escape(title)}</th>" for title in (titles[0], *keys, *titles[1:]))
    body = []
    order = list(range(len(comparison.rows)))
    if most_rows is not None and len(order) > most_rows:  # the best, the unfinished, then the rest
        order.sort(key=lambda index: (index != best, statuses[index].is_final))
        order = sorted(order[:most_rows])
    shown = [
        (comparison.rows[index], statuses[index], colours[index], (asking or [""] * len(statuses))[index], index)
        for index in order
    ]
    for row, status, colour, words, index in shown:
        name, shown_status, *numbers = rules.cells(row)
        values = "".join(
            f"<td>{html.escape(str((params or [{}] * (index + 1))[index].get(key, '-')))}</td>" for key in keys
        )
        if index == best:
            name += " \u2605 best"
        metric, numbers = numbers[0], numbers[1:]
        badge = (
            f'<span class="jt-status" style="background:{STATUS_COLOURS[status]}">{html.escape(shown_status)}</span>'
        )
        if words:  # the status shown is the last known
            badge += f' <span class="jt-asking">{html.escape(words)}</span>'
        body.append(
            "<tr>"
            f'<td><span class="jt-key" style="background:{colour}"></span>{html.escape(name)}</td>{values}'
            f"<td>{badge}</td><td>{html.escape(metric)}</td>"
            + "".join(f'<td class="jt-number">{html.escape(number)}</td>' for number in numbers)
            + "</tr>"
        )
    more = len(comparison.rows) - len(shown)
    tail = (
        f'<div class="jt-compare-note">and {more} more (jupyter-trainer status NAME shows them all)</div>'
        if more
        else ""
    )
    return f'<table class="jt-compare-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>{tail}'


class CompareWidget(PolledView):
    """The live comparison; the poller calls `poll` as it does a job view's (its jobs' files are
    not watched for it: it is polled at the poller's interval until every job has ended)."""

    def __init__(
        self,
        runs: list[ComparedRun],
        metric: str | None = None,
        by_time: bool = False,
        clock: Callable[[], float] = time.time,
    ):
        import ipywidgets as widgets

        self.runs = runs
        self.metric = metric
        self.by_time = by_time
        self.clock = clock
        self.errors: dict[int, str] = {}  # a run's last failure, by its place
        self._checked = [float("-inf")] * len(runs)  # when each run's status was last asked (or answered)
        self._asking = [""] * len(runs)  # what the view says of each run's status check under way
        self._next_read = 0  # the run whose log is read first at the next poll
        self._lock = threading.RLock()  # the poller's thread and the kernel's (the first push) both draw
        self.last_push = float("-inf")
        self._dirty = True
        # the chart's choices live in the style's element, which is never redrawn: the chart's
        # labels toggle them, and a choice outlives the updates that redraw the chart
        self.controls = ChartControls(new_prefix(), 0, min(len(runs), HIDEABLE_RUNS))
        self.style = widgets.HTML(STYLE + COMPARE_STYLE + state_html([self.controls]), layout={"display": "none"})
        self.style.add_class(STATE)
        self.body = widgets.HTML()
        self.box = widgets.VBox([self.style, self.body], layout={"padding": "6px", "width": "100%"})
        self.box.add_class("jupyter-trainer-job")  # the views' colours and theme variables
        self.box.add_class("jupyter-trainer-compare")
        self.box.add_class(HOST)
        # the statuses as the backends say them now, if they answer within a moment
        for index, run in enumerate(runs):
            self._step(index, "cannot check its status", lambda run=run: run.ask_status() and False)
        wait_for_answers(run.status_check for run in runs)
        for index, run in enumerate(runs):
            self._step(index, "cannot check its status", run.take_status)
        self._read(self.clock())  # what a bounded read gives now; the poller reads the rest
        self.push()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)

    @property
    def finished(self) -> bool:
        return all(run.finished for run in self.runs)

    def poll(self, now: float) -> bool:
        """Catch up with the jobs; push when due. False once nothing can change (or the view was closed)."""
        if self.box.comm is None:
            return False
        with self._lock:
            for index, run in enumerate(self.runs):
                # a slow backend's answer comes at a later poll: the next check is due an interval after it
                self._step(
                    index, "cannot check its status", lambda index=index, run=run: self._take_status(index, run, now)
                )
                if (
                    not run.record.status.is_final
                    and now - self._checked[index] >= run.job.backend_impl().status_interval
                ):
                    self._checked[index] = now
                    self._step(index, "cannot check its status", lambda run=run: run.ask_status() and False)
                    self._step(
                        index,
                        "cannot check its status",
                        lambda index=index, run=run: self._take_status(index, run, now),
                    )
                words = run.status_check.words()
                self._dirty |= words != self._asking[index]
                self._asking[index] = words
            self._read(self.clock())
            finished = self.finished
            if finished or (self._dirty and now - self.last_push >= PUSH_INTERVAL):
                self.last_push = now
                self._push()
            return not finished

    def _take_status(self, index: int, run: ComparedRun, now: float) -> bool:
        changed = run.take_status()
        if changed is not None:
            self._checked[index] = now
        return bool(changed)

    def _read(self, now: float) -> None:
        """Read the runs' logs for READ_SECONDS at most in all, from the run after the last one read
        before: opening a comparison of hundreds of jobs with long logs read every log whole first
        (minutes, the kernel's cell held), and each poll then held the kernel's one poller as long."""
        deadline = time.perf_counter() + READ_SECONDS
        count = len(self.runs)
        for turn in range(count):
            index = (self._next_read + turn) % count
            run = self.runs[index]
            self._step(index, "cannot read its log", lambda: run.read(now))
            if time.perf_counter() >= deadline:
                self._next_read = (index + 1) % count
                return

    def _step(self, index: int, what: str, step: Callable[[], bool]) -> None:
        try:
            self._dirty |= bool(step())
        except Exception as exc:  # one job's passing engine or disk error: said in the view, the others go on
            text = f"{self.runs[index].label}: {what}: {describe(exc)}"
            self._dirty |= self.errors.get(index) != text
            self.errors[index] = text
        else:
            if self.errors.pop(index, None) is not None:
                self._dirty = True

    def push(self) -> None:
        with self._lock:
            self._push()

    def _push(self) -> None:
        comparison = compare(self.runs, self.metric, self.by_time)
        differs = what_differs([run.record for run in self.runs])  # what tells the runs apart, as columns
        value = comparison_html(
            comparison,
            [run.record.status for run in self.runs],
            self._asking,
            differs if differs and differs[0] else None,
            controls=self.controls,
        )
        value += "".join(error_html(error) for error in self.errors.values())
        if value != self.body.value:
            self.body.value = value
        self._dirty = False

    def show_failure(self, exc: BaseException) -> None:
        """A failure the poller caught in this view's own code: shown, and the view goes on."""
        self.errors[-1] = f"cannot refresh the comparison: {describe(exc)}"
        try:
            self.body.value = self.body.value.split('<div class="jt-error">', 1)[0] + "".join(
                error_html(e) for e in self.errors.values()
            )
        except Exception:
            pass  # the poller goes on with the other views
