"""The job widget (the view) and the one poller thread that keeps every widget of a kernel current.

The widget is built and displayed in the kernel's main thread. The poller
thread only reads logs and statuses and sets trait values, at most a few times
a second per widget however fast the job prints, and forgets a widget once its
job has ended and its log is read, or once the job was removed from the store.

Whatever fails while a widget is polled or drawn is shown in that widget, as
one line of escaped text, and never stops the thread: the other widgets of the
kernel go on.
"""

from __future__ import annotations

import dataclasses
import html
import json
import secrets
import threading
import time
from pathlib import Path
from typing import Callable

from ..core.record import Status
from ..core.resources import describe as describe_usage
from ..core.store import RECORD_FILE
from ..errors import JobReplaced, Unreachable
from ..jobs.job import Job
from ..jobs.status_checks import OPEN_WAIT, stop_waking, wake_on_answers
from ..logs.watch import LOG_NEWS, LOST, ChangeWaiter
from ..metrics.reader import AXIS_TITLES
from .charts import MAX_CHARTS, chart_groups, charts_html, chosen_groups, sparkline_svg
from .monitor import JobMonitor, Snapshot
from .summary import format_duration

PUSH_INTERVAL = 0.25  # seconds between two updates of one widget: at most 4 a second
# The charts are the largest part of an update: they are sent again only once the bytes they took
# fit this rate (a few small charts as often as the rest, a view full of long curves every 2 s or so;
# the last state at once).
CHARTS_BYTES_PER_SECOND = 64 * 1024
LOG_CHARS = 128 * 1024  # of the log's last lines the view shows (long lines could make megabytes)
SAVED_LOG_CHARS = 32 * 1024  # and the saved view (see SAVED_LINES)
CHOOSER_DEFAULT = "loss-like, then the latest"  # the chart chooser's first option: the view's own choice
SAVE_INTERVAL = 15.0  # seconds between two updates of the view saved in the notebook (and at each change of status)
SAVED_LINES = 40  # log lines the saved view keeps (it is written into the notebook file)
POLL_INTERVAL = 0.25  # seconds between two reads of the logs
# ...while every job is quiet and a change to its files wakes the poller at once: then only the
# elapsed time moves (and a status check or a look at what the job uses may be due)
QUIET_INTERVAL = 1.0
# A watched view's log is read when the watch reports a change of it (and at each status check),
# and this often besides: a log grown with no change reported shows the watch does not work there.
WATCH_CHECK_SECONDS = 5.0
# a bell drawn in the text's colour: an emoji's glyph is missing where no emoji font is installed
BELL = (
    '<svg width="10" height="10" viewBox="0 0 16 16" fill="currentColor" aria-hidden="true" style="vertical-align: -1px">'
    '<path d="M8 16a2 2 0 0 0 2-2H6a2 2 0 0 0 2 2zm5-5V7a5 5 0 0 0-4-4.9V1a1 1 0 0 0-2 0v1.1A5 5 0 0 0 3 7v4l-1.5 1.5V13h13v-.5z"/></svg>'
)
# what a view told of by its log's stream is keyed by: no directory's path starts so
STREAM_KEY = "stream:"
ERROR_CHARS = 300  # an error line is cut to this many characters


# Badge colours, each with white text at WCAG AA contrast (4.5:1 or more) on any theme.
STATUS_COLOURS = {
    Status.PENDING: "#5c636a",
    Status.RUNNING: "#0b5ed7",
    Status.COMPLETED: "#146c43",
    Status.FAILED: "#b02a37",
    Status.STOPPED: "#9a4a00",
    Status.LOST: "#6f42c1",
}
# What the view's final colour is, in ipywidgets' bar_style words.
BAR_STYLES = {Status.COMPLETED: "success", Status.FAILED: "danger", Status.STOPPED: "warning", Status.LOST: "danger"}

# The view's colours come from the frontend's theme: JupyterLab's and Notebook 7's CSS variables, then
# VS Code's, then light defaults. A text and the background it sits on come from the same family, so
# the two always belong to one theme. Sent once per view, not with every update.
STYLE = """<style>
.jupyter-trainer-job {
  --jt-fg: var(--jp-ui-font-color1, var(--vscode-foreground, #1f2328));
  --jt-muted: var(--jp-ui-font-color2, var(--vscode-descriptionForeground, #57606a));
  --jt-border: var(--jp-border-color1, var(--vscode-panel-border, #d0d7de));
  --jt-log-bg: var(--jp-cell-editor-background, var(--vscode-editor-background, #f6f8fa));
  --jt-log-fg: var(--jp-content-font-color1, var(--vscode-editor-foreground, #1f2328));
  --jt-error: var(--jp-error-color1, var(--vscode-errorForeground, #b00020));
  --jt-warn-bg: var(--jp-warn-color3, #fff3cd);
  --jt-warn-fg: var(--jp-ui-font-color0, #3d2c00);
  color: var(--jt-fg);
  border: 1px solid var(--jt-border);
}
.jupyter-trainer-job .jt-header { display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: center; color: var(--jt-fg); }
.jupyter-trainer-job .jt-name { font-size: 1.1em; font-weight: bold; }
.jupyter-trainer-job .jt-status { color: #fff; border-radius: 4px; padding: 1px 8px; }
.jupyter-trainer-job .jt-muted, .jupyter-trainer-job .jt-reading, .jupyter-trainer-job .jt-asking { color: var(--jt-muted); }
.jupyter-trainer-job .jt-usage { color: var(--jt-muted); white-space: nowrap; }
.jupyter-trainer-job .jt-spark { vertical-align: middle; }
.jupyter-trainer-job .jt-reading { font-size: 11px; }
.jupyter-trainer-job .jt-quiet { color: var(--jt-warn-fg); background: var(--jt-warn-bg); border-radius: 4px; padding: 0 6px; }
.jupyter-trainer-job .jt-error { color: var(--jt-error); }
.jupyter-trainer-job .jt-exception { font-family: var(--jp-code-font-family, monospace); }
.jupyter-trainer-job .jt-facts { color: var(--jt-muted); font-size: 12px; }
.jupyter-trainer-job .jt-log-pane { display: flex; flex-direction: column-reverse; max-height: 320px; overflow-y: auto;
  background: var(--jt-log-bg); border: 1px solid var(--jt-border); }
.jupyter-trainer-job .jt-log { flex: none; overflow: visible; margin: 0; padding: 6px; font-size: 12px; line-height: 1.35;
  white-space: pre-wrap; color: var(--jt-log-fg); background: transparent; font-family: var(--jp-code-font-family, monospace); }
.jupyter-trainer-job .jt-charts { display: flex; flex-wrap: wrap; gap: 8px; }
.jupyter-trainer-job .jt-more { color: var(--jt-muted); font-size: 12px; margin: 2px 0; }
.jupyter-trainer-job .jt-chart text { fill: var(--jt-fg); font-family: var(--jp-ui-font-family, sans-serif); font-size: 10px; }
.jupyter-trainer-job .jt-chart .jt-legend { font-size: 12px; }
.jupyter-trainer-job .jt-chart .jt-name { font-weight: bold; }
.jupyter-trainer-job .jt-chart .jt-tick, .jupyter-trainer-job .jt-chart .jt-axis-title { fill: var(--jt-muted); }
.jupyter-trainer-job .jt-chart .jt-frame { fill: none; stroke: var(--jt-border); }
.jupyter-trainer-job .jt-chart .jt-line { fill: none; stroke-width: 1.6; }
.jupyter-trainer-job .jt-chart .jt-hover { fill: transparent; }
.jupyter-trainer-job .jt-chart .jt-hover:hover { fill: var(--jt-border); fill-opacity: 0.35; }
.jupyter-trainer-job .jt-disconnected { display: none; }
.jupyter-trainer-job.jupyter-widgets-disconnected .jt-disconnected { display: block; color: var(--jt-warn-fg);
  background: var(--jt-warn-bg); padding: 2px 6px; border-radius: 4px; }
.jupyter-trainer-job.jupyter-widgets-disconnected .jt-stop { opacity: 0.4; pointer-events: none; }
.jupyter-trainer-job.jupyter-widgets-disconnected .jt-status { filter: grayscale(1); opacity: 0.6; }
.jupyter-trainer-job.jupyter-widgets-disconnected::before,
.jupyter-trainer-job .jupyter-widgets-disconnected::before { content: none; }  /* the notice says it once */
.jupyter-trainer-job .jt-saved-note { color: var(--jt-warn-fg); background: var(--jt-warn-bg); padding: 2px 6px;
  border-radius: 4px; margin: 4px 0; }
.jupyter-trainer-job.jt-saved .jt-disconnected, .jupyter-trainer-job.jt-saved .jt-bell { display: none; }
.jupyter-trainer-job .jt-bell { font-size: 11px; padding: 0 6px; border: 1px solid var(--jt-border); border-radius: 4px;
  background: transparent; color: var(--jt-muted); cursor: pointer; }
body:not([data-jt-notify="default"]) .jupyter-trainer-job .jt-bell { display: none; }
</style>"""


# -- a snapshot as HTML: everything a job controls is escaped -------------------------------


def header_html(snapshot: Snapshot) -> str:
    colour = STATUS_COLOURS[snapshot.status]
    parts = [
        f'<span class="jt-name">{html.escape(snapshot.name)}</span>',
        f'<span class="jt-status" style="background:{colour}">{html.escape(snapshot.status_text or snapshot.status.value)}</span>',
    ]
    if snapshot.asking:  # the status shown is the last known
        parts.append(f'<span class="jt-asking">{html.escape(snapshot.asking)}</span>')
    parts += [
        f"<span>{html.escape(f'{snapshot.backend} · {snapshot.where}')}</span>",
        elapsed_html(snapshot.elapsed),
    ]
    parts += usage_html(snapshot)
    if snapshot.progress:
        eta = f" · ETA {snapshot.progress.eta}" if snapshot.progress.eta else ""
        parts.append(f'<span class="jt-progress">{snapshot.progress.percent}%{html.escape(eta)}</span>')
    if snapshot.quiet_for:
        parts.append(quiet_html(snapshot.quiet_for))
    if snapshot.outcome:
        kind = "jt-exit" if snapshot.exit_code is not None else "jt-reason"
        parts.append(f'<span class="{kind}">{html.escape(snapshot.outcome)}</span>')
    if not snapshot.status.is_final:  # the browser can say when it ends (see notification_script)
        parts.append(f'<button class="jt-bell" title="a browser notification when the job ends (while this page is open)">{BELL} notify me</button>')
    facts = "".join(f"<span>{html.escape(fact)}</span>" for fact in snapshot.facts)
    return (
        '<div class="jt-header">' + "".join(parts) + "</div>"
        + (f'<div class="jt-header jt-facts">{facts}</div>' if facts else "")
        + f'<div class="jt-disconnected">{html.escape(disconnected_text(snapshot.name))}</div>'
    )


def elapsed_html(seconds: float | None) -> str:
    return f"<span>elapsed {format_duration(seconds)}</span>"


def quiet_html(seconds: float) -> str:
    return f'<span class="jt-quiet">no output for {format_duration(seconds)}</span>'


# What usage_html drew last for each reading (by its id, with the reading and its series to tell a
# reused id): a view draws its header with every update, and a reading comes every few seconds.
_drawn_usage: dict[int, tuple[object, dict, list[str]]] = {}
DRAWN_USAGE_KEPT = 256


def usage_html(snapshot: Snapshot) -> list[str]:
    """CPU, memory and each GPU: the latest reading and a sparkline of the recent ones."""
    usage = snapshot.usage
    if usage is None:
        return []
    drawn = _drawn_usage.get(id(usage))
    if drawn is not None and drawn[0] is usage and drawn[1] is snapshot.usage_series:
        return list(drawn[2])
    parts = _usage_parts(usage, snapshot.usage_series)
    if len(_drawn_usage) >= DRAWN_USAGE_KEPT:
        _drawn_usage.clear()
    _drawn_usage[id(usage)] = (usage, snapshot.usage_series, parts)
    return list(parts)


def _usage_parts(usage, series: dict) -> list[str]:
    tops = {"cpu": 100.0, "memory": None}  # memory's line spans its own range: against the limit it is flat
    parts = []
    for what, words in describe_usage(usage).items():
        line = sparkline_svg(series.get(what, []), tops.get(what, 100.0))
        title = f"{what} of the {usage.scope}" + (" (100% = one core)" if what == "cpu" else "")
        parts.append(f'<span class="jt-usage" title="{html.escape(title)}">{html.escape(what.upper() if what == "cpu" else what)} {html.escape(words)} {line}</span>')
    return parts


def disconnected_text(name: str) -> str:
    return (
        f"Disconnected: the kernel that showed this view has stopped, so it no longer changes; the job "
        f"itself goes on. To follow it again, run %load_ext jupyter_trainer and %train_attach {name}."
    )


def log_html(snapshot: Snapshot, limit: int = LOG_CHARS) -> str:
    """The log's last lines, as many as fit in `limit` characters."""
    text = html.escape("\n".join(_last_lines(snapshot.lines, limit))) or '<span class="jt-muted">(no output yet)</span>'
    # column-reverse keeps the box scrolled to its newest line as lines arrive
    return f'<div class="jt-log-pane"><pre class="jt-log">{text}</pre></div>'


def _last_lines(lines: tuple[str, ...], limit: int) -> list[str]:
    """The last lines that fit in `limit` characters (at least the end of the last one)."""
    kept: list[str] = []
    for line in reversed(lines):
        limit -= len(line) + 1
        if limit < 0:
            if not kept:
                kept.append("…" + line[limit - 1 :])
            break
        kept.append(line)
    return kept[::-1]


def plot_html(snapshot: Snapshot) -> str:
    """The notes, a few charts (see chosen_groups) and how many metrics are not drawn: bounded
    whatever the log holds."""
    notes = "".join(f'<div class="jt-reading">{html.escape(note)}</div>' for note in snapshot.notes)
    groups = chosen_groups(snapshot.metrics)
    drawn = sum(len(names) for _, _, names in groups)
    return notes + charts_html(snapshot.metrics, groups) + more_metrics_html(snapshot, drawn)


def more_metrics_html(snapshot: Snapshot, drawn: int) -> str:
    """A line that says how many metrics are not drawn and where to see them all, if any are not."""
    count, exact = snapshot.metrics.name_count()
    more = count - drawn
    if more <= 0:
        return ""
    number = f"{more:,}" if exact else f"about {_rounded(more):,}"
    text = (
        f"{number} more metric{'s' * (more != 1)} not drawn: jupyter-trainer metrics {snapshot.name} "
        f"(or job.metrics() in Python) gives every value of each"
    )
    return f'<div class="jt-more">{html.escape(text)}</div>'


def _rounded(count: int) -> int:
    """An estimate to the digits it has: three."""
    digits = max(0, len(str(count)) - 3)
    return round(count, -digits) if digits else count


def chooser_options(snapshot: Snapshot) -> list[tuple[str, tuple[str, str] | None]]:
    """What the chart chooser offers: the charts of the metrics the view keeps, by name."""
    groups = chart_groups(snapshot.metrics)
    titles = [title for title, _, _ in groups]
    options = []
    for title, axis, names in groups:
        label = ", ".join(names)
        if titles.count(title) > 1:  # the same metrics by another x
            label += f" (by {AXIS_TITLES.get(axis, axis)})"
        options.append((label, (title, axis)))
    return [(CHOOSER_DEFAULT, None), *sorted(options)]



def saved_view_html(snapshot: Snapshot, view_id: str, saved_at: float) -> str:
    """The view as a notebook keeps it: shown when no kernel shows the live one (the notebook
    opened another day, the kernel gone), with how to bring it back. While the live view is on
    the page, its stylesheet hides this copy; when the live one cannot be drawn ("model not
    found"), this copy's stylesheet hides that message instead."""
    shown = dataclasses.replace(snapshot, lines=snapshot.lines[-SAVED_LINES:], quiet_for=None, progress=None, asking="")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(saved_at))
    ended = snapshot.status.is_final
    how = (
        f"Saved {when}, when the job had ended. Run this cell again (it attaches to the job and never starts it "
        f"twice) or %train_attach {snapshot.name} to see it live; jupyter-trainer metrics {snapshot.name} gives its curves."
        if ended
        else f"Saved {when}: no kernel shows this job live now, and it may have gone on since. Run this cell again "
        f"(it attaches to the job and never starts it twice) or %train_attach {snapshot.name} to follow it live."
    )
    hide_dead_widget = (
        f".jp-OutputArea-child:has(+ .jp-OutputArea-child .jt-saved-{view_id}):not(:has(.jupyter-trainer-job)) {{ display: none; }}"
    )
    return (
        STYLE + f"<style>{hide_dead_widget}</style>"
        f'<div class="jupyter-trainer-job jt-saved jt-saved-{view_id}" style="padding:6px">'
        + header_html(shown) + f'<div class="jt-saved-note">{html.escape(how)}</div>'
        + plot_html(shown) + log_html(shown, SAVED_LOG_CHARS) + "</div>"
        + notification_script(snapshot)
    )


# Run by the frontend each time the saved copy is drawn (a trusted output's script): it makes the
# views' bells ask the browser for permission, and when a job this page saw running has ended,
# shows one browser notification (once per job run and browser; a notebook reopened later, whose
# jobs ended meanwhile, shows none).
NOTIFICATION_SCRIPT = """<script>(function (job) {
  if (!("Notification" in window)) { return; }
  document.body.dataset.jtNotify = Notification.permission;
  if (!window.__jupyterTrainerBell) {
    window.__jupyterTrainerBell = true;
    document.addEventListener("click", function (event) {
      if (event.target && event.target.closest && event.target.closest(".jt-bell")) {
        Notification.requestPermission().then(function (answer) { document.body.dataset.jtNotify = answer; });
      }
    });
  }
  var running = window.__jupyterTrainerRunning || (window.__jupyterTrainerRunning = {});
  var id = job.name + ":" + job.run;
  if (!job.ended_at) { running[id] = true; return; }
  if (!running[id]) { return; }  /* it ended before this page saw it run: nothing new to tell */
  delete running[id];
  if (Notification.permission !== "granted") { return; }
  var key = "jupyter-trainer-notified:" + id + ":" + job.ended_at;
  try { if (localStorage.getItem(key)) { return; } localStorage.setItem(key, "1"); } catch (error) { return; }
  new Notification(job.title, { body: job.body, tag: key });
})(%s);</script>"""


def notification_script(snapshot: Snapshot) -> str:
    job = {
        "name": snapshot.name,
        "run": snapshot.run,
        "ended_at": snapshot.ended_at if snapshot.status.is_final else None,
        "title": f"{snapshot.name} {snapshot.status.value}",
        "body": snapshot.outcome or f"after {format_duration(snapshot.elapsed)}",
    }
    # inside a script element only "</" could end it early: written as its JSON escape
    return NOTIFICATION_SCRIPT % json.dumps(job).replace("<", "\\u003c")


def describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}"


def error_html(text: str) -> str:
    """One line of error under the header. The text may quote what a job wrote (its record, its
    run files, a runtime's message about it), so it is escaped: shown, never interpreted."""
    line = " ".join(text.split())
    if len(line) > ERROR_CHARS:
        line = line[: ERROR_CHARS - 1] + "…"
    return f'<div class="jt-error">{html.escape(line)}</div>'


class PolledView:
    """What the Poller asks of each view it serves, besides `poll(now)` and `show_failure(exc)`. A
    view that no change of a file can wake (a comparison of several jobs) keeps these defaults:
    it is polled at the poller's interval, and keeps the poller from sleeping while it is live."""

    in_watch = False  # set by the poller: whether its log's changes wake the poller
    watched_directory: str | None = None  # the key its files' changes are told under
    log_path: str | None = None  # a log file on this machine to watch
    log_stream = None  # else a stream that tells of its log's news (see StreamedLog.listen)
    quiet = False  # whether it may be left until a change is told, or the next beat
    watched = False

    def files_changed(self, names: set[str]) -> None:
        """Files of its directory changed (told by the poller)."""


class JobWidget(PolledView):
    def __init__(self, job: Job, log_lines: int = 200, clock: Callable[[], float] = time.time):
        import ipywidgets as widgets

        self.clock = clock
        self.monitor = JobMonitor(job, log_lines)
        backend = job.backend_impl()
        self.status_interval = backend.status_interval
        # while the poller is woken by each change of the job's files (see Poller), a backend whose
        # changes of status show there may be asked less often
        self.watched_status_interval = getattr(backend, "watched_status_interval", backend.status_interval)
        self.in_watch = False  # whether the poller watches the job's directory (it says so)
        # Whether that watch sees the log grow. Not where another kernel writes it (a container's
        # engine in a VM, writing through a shared folder): a log seen grown with no change
        # reported says so, and the view is polled again as if unwatched, until a report comes.
        self._watch_works = True
        self._log_reported = False  # a change of the log was reported since the last poll
        self.last_log_read = float("-inf")
        self._watched_for: Path | None = None  # the log file whose directory is watched_directory
        self._watched_directory: str | None = None
        # the status as the backend says it now, if it answers within a moment (a slow one's
        # answer is shown when it comes; meanwhile the view says it is asking)
        self.monitor.ask_status()
        self.monitor.start()
        self.monitor.status_check.wait(OPEN_WAIT)
        self.monitor.take_status()
        self.style = widgets.HTML(layout={"display": "none"})
        self.header = widgets.HTML()
        # which chart is drawn first; shown only when the view keeps more charts than it draws
        self.chooser = widgets.Dropdown(
            options=[(CHOOSER_DEFAULT, None)], value=None, description="chart first:",
            tooltip="the chart drawn first; jupyter-trainer metrics NAME gives every metric",
            layout={"display": "none", "width": "max-content"}, style={"description_width": "initial"},
        )  # fmt: skip
        self.chooser.observe(self._chart_chosen, names="value")
        self._setting_chooser = False  # the chooser's value is being set here, not by its user
        self._offered = [(CHOOSER_DEFAULT, None)]  # the chooser's options
        self.plot = widgets.HTML()
        self.log = widgets.HTML()
        self.stop_button = widgets.Button(
            description="Stop", icon="stop", tooltip="stop the job (its whole process group)"
        )
        self.stop_button.on_click(self._stop_clicked)
        self.stop_button.add_class("jt-stop")
        self.box = widgets.VBox(
            [
                self.style, widgets.HBox([self.header, self.stop_button], layout={"justify_content": "space-between"}),
                self.chooser, self.plot, self.log,
            ],  # fmt: skip
            layout={"padding": "6px", "width": "100%"},
        )
        self.box.add_class("jupyter-trainer-job")
        self.view_id = secrets.token_hex(8)
        # while this view is drawn, the copy saved in the notebook is not shown
        self.style.value = STYLE + f"<style>.jt-saved-{self.view_id} {{ display: none; }}</style>"
        self._saved_handle = None  # the display of the saved copy, once the view is shown in a notebook
        self._saved_state = None  # what the saved copy last showed: status and when
        self.error = ""  # the last failure, shown under the header until the step that failed succeeds
        self._error_step: str | None = None  # that step: "status", "log", "stop" or "poll"
        self.removed = False  # the job's record is gone from the store: nothing more to follow
        # the poller's thread and the kernel's (a chart chosen, a stop's end) both read the monitor
        self._lock = threading.RLock()
        self.last_push = float("-inf")
        self.last_status_check = float("-inf")
        self._status_news = False  # a change of its files told while a check was under way: ask again once it is answered
        self._shown_asking = ""  # what the header says of a status check under way
        self._dirty = True
        self._header_stale = False  # only the header has news (a reading of what the job uses)
        self._shown_second = None
        # the elapsed time (and quiet warning) the header shows, while only the clock can move them
        self._drawn_clocks: tuple[str, str | None] | None = None
        self.charts_due = float("-inf")  # when the charts may be sent again
        self._charts_stale = False  # an update left the charts as they were: the next one draws them
        self._chart_errors: list[str] = []  # why the charts could not be drawn, the last time they were
        self._log_errors: list[str] = []  # why the log pane could not be drawn, the last time it was
        self.push()

    @property
    def job(self) -> Job:
        return self.monitor.job

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)

    def show(self) -> None:
        """Display the view, and after it the copy of it the notebook keeps (see saved_view_html)."""
        from IPython.display import HTML, display

        display(self)
        self._saved_handle = display(HTML(self._saved_html()), display_id=True)
        self._saved_state = (self.monitor.record.status, self.clock())

    def _saved_html(self) -> str:
        now = self.clock()
        return saved_view_html(self.monitor.snapshot(now), self.view_id, now)

    def _keep_saved(self) -> None:
        """Update the saved copy now and then, at each change of status, and at the end."""
        if self._saved_handle is None:
            return
        from IPython.display import HTML

        status, saved_at = self._saved_state
        now = self.clock()
        # a wall clock set back since is as good as the interval passed: else an hour's jump back
        # would leave the notebook's copy an hour behind
        since = now - saved_at
        if status != self.monitor.record.status or not 0 <= since < SAVE_INTERVAL or self.monitor.finished:
            self._saved_state = (self.monitor.record.status, now)
            try:
                self._saved_handle.update(HTML(self._saved_html()))
            except Exception as exc:  # only the copy: the live view goes on, and says why
                self._set_error("save", f"cannot keep the view's copy in the notebook: {describe(exc)}")

    # -- driven by the poller ------------------------------------------------

    def poll(self, now: float) -> bool:
        """Catch up with the job; push to the frontend when due. False once nothing can change."""
        with self._lock:
            return self._poll(now)

    def _poll(self, now: float) -> bool:
        if self.removed:
            return False
        offset, caught_up = self.monitor.cursor.offset, self.monitor.caught_up
        step = "status"
        checking, answered = False, None
        try:
            answered = self._take_status(now)  # a slow backend's answer, come since the last poll
            checking = now - self.last_status_check >= (self.watched_status_interval if self.watched else self.status_interval)
            if checking:
                self.last_status_check = now
                if self.monitor.ask_status():
                    self._status_news = False
                taken = self._take_status(now)  # a check made at once answers now
                answered = taken if taken is not None else answered
            self._header_stale |= self.monitor.status_check.words() != self._shown_asking
            step = "log"
            if self._log_due(now, checking or answered is not None):
                self.last_log_read = now
                self._dirty |= self.monitor.read_log(now=self.clock())
                self._judge_the_watch(grew=caught_up and self.monitor.cursor.offset != offset)
            step = "usage"
            self._header_stale |= self.monitor.look_at_usage(now)
        except Unreachable:
            # the job's host cannot be reached: its status check says so and since when ("cannot
            # reach gpu1 since T", kept until the host answers); an error line would say it twice
            pass
        except Exception as exc:  # the view must survive a passing engine or disk error
            if isinstance(exc, JobReplaced) or self._record_gone():
                self._show_removed(replaced=isinstance(exc, JobReplaced))
                return False
            self._set_error(step, describe(exc))
        else:
            # a failed status check stays shown until the next check succeeds, not only until the
            # next log read a moment later (it would flash for a quarter of a second)
            if self._error_step != "status" or answered is not None:
                self._set_error(None, "")
        finished = self.monitor.finished
        ticking = int(self.clock()) != self._shown_second  # the elapsed time moves on
        due = now - self.last_push >= PUSH_INTERVAL
        if not finished and (ticking or self._header_stale) and due and not (self._dirty or self._charts_stale):
            self._push_header()  # a quiet job: only its clock (or what it uses) moved
            self.last_push = now
            self._keep_saved()
        elif finished or ((self._dirty or ticking or self._charts_stale) and due):
            charts = finished or now >= self.charts_due
            sent = self._push(charts)  # the final state is always shown, whatever the rate
            self.last_push = now
            if sent:
                self.charts_due = now + sent / CHARTS_BYTES_PER_SECOND
            self._keep_saved()
        return not finished

    def _take_status(self, now: float) -> bool | None:
        """The answer of the last status check, if it came: whether the record changed. The next
        check is due an interval after it (a slow backend's comes at a later poll), or at once
        if a change of the job's files was told while it was under way."""
        answered = self.monitor.take_status()
        if answered is not None:
            self._dirty |= answered
            self.last_status_check = float("-inf") if self._status_news else now
        return answered

    @property
    def watched_directory(self) -> str | None:
        """The directory on this machine where the job's log and run files change; for a log that
        a stream brings (a remote container's), the key its news are told under; None when only
        polling sees news (a log read through a runtime at each poll)."""
        log_file = self.monitor.log_file
        if log_file is None and self.monitor.log_stream is not None:  # told of by its stream (see Poller._listen)
            return f"{STREAM_KEY}{self.view_id}"
        if log_file is not self._watched_for:  # asked several times a tick, for every view: kept
            self._watched_for, self._watched_directory = log_file, str(log_file.parent) if log_file is not None else None
        return self._watched_directory

    @property
    def log_path(self) -> str | None:
        log_file = self.monitor.log_file
        return str(log_file) if log_file is not None else None

    @property
    def log_stream(self):
        return self.monitor.log_stream

    @property
    def watched(self) -> bool:
        """Whether a change of the job's log wakes the poller (see _watch_works)."""
        return self.in_watch and self._watch_works

    def _log_due(self, now: float, checking: bool) -> bool:
        """Whether the log is read in this poll: always, unless the watch tells of its changes and
        none was told (a quiet job then costs no look at its log between two checks)."""
        if not self.watched or not self.monitor.caught_up or self._log_reported or checking:
            return True
        return now - self.last_log_read >= WATCH_CHECK_SECONDS

    def _judge_the_watch(self, grew: bool) -> None:
        """`grew`: the log grew since the last poll (not the history being read). Any change told
        shows the watch works, even with nothing new to read: a line printed just before a read
        that was not asked for by a change (a status check) is told at the next tick."""
        if self._log_reported:
            self._watch_works = True
        elif grew:
            self._watch_works = False
        self._log_reported = False

    @property
    def quiet(self) -> bool:
        """Whether the poller may leave this view until the quiet interval ends or its files change:
        nothing read waits to be shown, no history waits to be read, and no status check's answer
        waits to be taken (one that comes from a place's thread wakes the poller, see Poller._run)."""
        settled = not (self._dirty or self._charts_stale or self._header_stale or self.monitor.status_check.answered)
        return self.watched_directory is not None and self.monitor.caught_up and settled

    def files_changed(self, names: set[str]) -> None:
        """Files of the job's directory changed (told by the poller): if that may be a change of
        status (see JobMonitor.status_news), the status check is due now."""
        if self.monitor.status_news(names):
            self.last_status_check = float("-inf")
            self._status_news = True
        log_file = self.monitor.log_file
        self._log_reported |= (log_file is not None and log_file.name in names) or LOG_NEWS in names

    def push(self) -> None:
        """Project the monitor's state onto the widgets' traits. A part that cannot be drawn keeps
        what it showed and says why under the header; the other parts are still updated."""
        with self._lock:
            self._push()

    def _push_header(self) -> None:
        """Only the header again (its elapsed time), when nothing else can have changed: it still
        says why the parts not drawn again could not be drawn the last time."""
        now = self.clock()
        moved = self._clock_moved(now)
        if moved is not None:
            self._shown_second = int(now)
            self.header.value = moved
            return
        _, header, errors = self._header(now)
        self._header_stale = False
        self.header.value = header + "".join(error_html(error) for error in errors + self._chart_errors + self._log_errors)

    def _clock_moved(self, now: float) -> str | None:
        """The header as drawn last with only its clocks moved on (the elapsed time, and how long
        the job has been quiet once it says so), while nothing else in it can have changed (None:
        draw it anew). A quiet job's header moves once a second, and drawing it takes a snapshot
        and its sparklines."""
        drawn = self._drawn_clocks
        if drawn is None or self._header_stale:
            return None
        quiet = self.monitor.quiet_for(now)
        if (quiet is None) != (drawn[1] is None):  # the quiet warning comes or goes
            return None
        clocks = (elapsed_html(self.monitor.elapsed(now)), quiet_html(quiet) if quiet is not None else None)
        value = self.header.value
        for before, after in zip(drawn, clocks):
            if before is None:
                continue
            if value.count(before) != 1:  # a header drawn by a renderer of another shape
                return None
            value = value.replace(before, after)
        self._drawn_clocks = clocks
        return value

    def _header(self, now: float) -> tuple:
        """The monitor's snapshot (None if it could not be taken), the header drawn from it, and
        what went wrong on the way."""
        self._shown_second = int(now)
        errors = [self.error] if self.error else []
        snapshot = _render(lambda: self.monitor.snapshot(now), "the view", errors)
        if snapshot:
            self._shown_asking = snapshot.asking
        header = _render(lambda: self.render_header(snapshot), "the header", errors) if snapshot else None
        clocks_only = header is not None and not snapshot.status.is_final
        quiet = quiet_html(snapshot.quiet_for) if snapshot and snapshot.quiet_for else None
        self._drawn_clocks = (elapsed_html(snapshot.elapsed), quiet) if clocks_only else None
        return snapshot, header if header is not None else f"<b>{html.escape(self.job.name)}</b>", errors

    def _push(self, charts: bool = True) -> int:
        """`charts`: draw the charts too (else they stay as they were until the next update).
        Returns the characters of charts sent."""
        monitor = self.monitor
        snapshot, header, errors = self._header(self.clock())
        plot = None
        if snapshot and charts:
            self._chart_errors = []
            plot = _render(lambda: self.render_plot(snapshot), "the chart", self._chart_errors)
            _render(lambda: self._offer_charts(snapshot), "the chart chooser", self._chart_errors)
        self._charts_stale = bool(snapshot) and not charts
        self._log_errors = []
        log = _render(lambda: self.render_log(snapshot), "the log", self._log_errors) if snapshot else None
        self.header.value = header + "".join(error_html(error) for error in errors + self._chart_errors + self._log_errors)
        sent = 0
        if plot is not None and plot != self.plot.value:
            self.plot.value = plot
            sent = len(plot)
        if log is not None and log != self.log.value:
            self.log.value = log
        status = monitor.record.status
        if self.removed:
            with self.stop_button.hold_sync():
                self.stop_button.disabled = True
                self.stop_button.description = "removed"
                self.stop_button.icon = "trash"
                self.stop_button.button_style = ""
        elif status.is_final:
            with self.stop_button.hold_sync():
                self.stop_button.disabled = True
                self.stop_button.description = status.value
                self.stop_button.icon = "check" if status.value == "completed" else "times"
                self.stop_button.button_style = BAR_STYLES.get(status, "")
        self._dirty = self._header_stale = False
        return sent

    # the renderers this widget uses (one may be replaced to test a failure that stays in its widget)
    render_header = staticmethod(header_html)
    render_plot = staticmethod(plot_html)
    render_log = staticmethod(log_html)

    def _offer_charts(self, snapshot: Snapshot) -> None:
        """Offer the charts of the kept metrics in the chooser, once there are more than are drawn."""
        options = chooser_options(snapshot)
        if options != self._offered:
            self._offered = options
            chosen = snapshot.metrics.chosen
            self._setting_chooser = True  # setting the options selects the first: not the user's choice
            try:
                with self.chooser.hold_sync():
                    self.chooser.options = options
                    self.chooser.value = chosen if chosen in [value for _, value in options] else None
            finally:
                self._setting_chooser = False
        display = None if len(options) - 1 > MAX_CHARTS else "none"
        if self.chooser.layout.display != display:
            self.chooser.layout.display = display

    def _chart_chosen(self, change) -> None:
        """The user chose a chart (in the kernel's thread): draw it first, now."""
        with self._lock:  # the poller's thread holds it while it sets the options itself
            if self._setting_chooser:
                return
            self.monitor.metrics.choose(change["new"])
            self._dirty = True
            self._push()

    def show_failure(self, exc: BaseException) -> None:
        """Show a failure the poller caught in this widget's own code."""
        self._set_error("poll", describe(exc))
        self.push()

    def _set_error(self, step: str | None, text: str) -> None:
        if text != self.error:
            self._dirty = True
        self.error, self._error_step = text, step

    def _record_gone(self) -> bool:
        """Whether the job was removed from the store (its record, its run or its whole directory)."""
        try:
            return not (self.job.run_dir / RECORD_FILE).exists()
        except (OSError, ValueError):  # the store cannot be looked at: that says nothing of the job
            return False

    def _show_removed(self, replaced: bool = False) -> None:
        """Say once that the job is gone; the poller then drops this widget."""
        self.removed = True
        where = self.job.run_dir
        gone = "a new job of its name has taken its place" if replaced else f"its record in {where} is gone"
        self._set_error("removed", f"job {self.job.name} was removed: {gone}, so this view no longer follows it")
        self.push()

    def _stop_clicked(self, _button) -> None:
        with self.stop_button.hold_sync():
            self.stop_button.disabled = True
            self.stop_button.description = "Stopping…"
        stop_in_background(self.job, self._stop_done)

    def _stop_done(self, error: Exception | None) -> None:
        if error is not None:  # shown in the widget, and the button offered again
            if self._record_gone():
                self._show_removed()
                return
            self._set_error("stop", f"could not stop the job: {error}")
            with self.stop_button.hold_sync():
                self.stop_button.disabled = False
                self.stop_button.description = "Stop"
            self.push()
        self.last_status_check = float("-inf")  # show the result at the next poll
        self._status_news = True
        self._dirty = True


def stop_in_background(job: Job, done: Callable[[Exception | None], None]) -> None:
    """Stop `job` on a thread of its own, then call `done` with what went wrong (None if nothing):
    a stop waits for the job to end (TERM, then KILL after the grace period), and a button's
    click must leave the kernel free meanwhile."""

    def stop() -> None:
        try:
            job.stop(wait=0)
        except Exception as exc:
            done(exc)
            return
        done(None)

    threading.Thread(target=stop, name=f"jupyter_trainer-stop-{job.name}", daemon=True).start()


class Poller:
    """One thread per kernel, serving every widget; it ends when no widget needs it.

    It polls every `interval` while a job prints (or its log cannot be watched); while every job
    is quiet it sleeps up to `quiet_interval`, woken at once when a file of one of them changes
    (see _changes), so that a quiet job costs a look at its log's size now and then, and a line
    it prints is shown without waiting for the next tick."""

    def __init__(
        self, interval: float = POLL_INTERVAL, clock: Callable[[], float] = time.monotonic, quiet_interval: float = QUIET_INTERVAL
    ):
        self.interval = interval
        self.quiet_interval = max(interval, quiet_interval)
        self.clock = clock
        self.widgets: list[PolledView] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._waiter: ChangeWaiter | None = None  # while its thread runs
        self._listening: dict[PolledView, tuple] = {}  # views told of by their log's stream: (stream, callback, waiter)

    @property
    def running(self) -> bool:
        """Whether its thread is polling (it ends once no widget is left to poll)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def watch(self, *widgets: PolledView) -> None:
        with self._lock:
            self.widgets.extend(widget for widget in widgets if widget not in self.widgets)
            # a thread that died somehow would leave every widget frozen: start another
            alive = self._thread is not None and self._thread.is_alive()
            if not alive and self.widgets:
                self._waiter = ChangeWaiter()
                self._thread = threading.Thread(target=self._run, args=(self._waiter,), name="jupyter_trainer-poller", daemon=True)
                self._thread.start()
            elif self._waiter is not None:
                self._waiter.wake()  # the new views are polled now, not after a quiet wait

    def tick(self, changed: dict[str, set[str]] | None = None, everyone: bool = True) -> None:
        """Poll the views once: every one, or (`everyone` False: a tick between two beats) those
        whose files changed and those that are not quiet or not watched. `changed`: the files
        that changed since the last tick, by directory."""
        now = self.clock()
        with self._lock:
            widgets = list(self.widgets)
        finished = []
        for widget in widgets:
            try:
                names = changed.get(widget.watched_directory) if changed else None
                if names:
                    widget.files_changed(names)
                elif not everyone and widget.quiet and widget.watched:  # a change of its files would have woken it
                    continue
                if not widget.poll(now):
                    finished.append(widget)
            except Exception as exc:  # a bug in one widget is shown in it; the others are still served
                _report(widget, exc)
        if finished:
            with self._lock:
                self.widgets = [widget for widget in self.widgets if widget not in finished]

    def _run(self, waiter: ChangeWaiter) -> None:
        changed: dict[str, set[str]] = {}
        beat = float("-inf")  # when every view is polled next: the quiet ones move their clocks together
        wake_on_answers(waiter.wake)  # a slow status check answered: its view takes the answer at once
        try:
            while True:
                with self._lock:
                    if not self.widgets:
                        if self._thread is threading.current_thread():
                            self._thread, self._waiter = None, None
                        return
                polled_at = self.clock()
                everyone = polled_at >= beat
                if everyone:
                    beat = polled_at + self.quiet_interval
                try:
                    self.tick(changed, everyone)
                    changed = self._wait(waiter, polled_at, beat)
                except Exception:  # nothing of a widget's (tick catches those): try again at the next tick
                    changed = {}
                    time.sleep(self.interval)
        finally:
            stop_waking(waiter.wake)
            self._stop_listening(waiter)
            waiter.close()

    def _wait(self, waiter: ChangeWaiter, polled_at: float, beat: float) -> dict[str, set[str]]:
        """Sleep until the next tick, the GIL released: `interval` after the last one while a
        view has news to show or a job that cannot wake the poller; else until a file of a job
        changes, but never sooner than `interval` after the last tick (a job that prints all the
        time is polled at that rate), nor later than the next `beat`. What changed meanwhile."""
        with self._lock:
            widgets = list(self.widgets)
        logs = {widget: widget.log_path for widget in widgets if widget.log_path is not None}
        watched = waiter.watch({widget.watched_directory for widget in logs} | set(logs.values()))
        streams = self._listen(waiter, widgets)
        for widget in widgets:  # its log and the directory where its status files change, both
            if widget in streams:  # told while its stream is up; read through the engine, polled
                widget.in_watch = streams[widget].telling
            else:
                widget.in_watch = logs.get(widget) in watched and widget.watched_directory in watched
        quiet = all(widget.quiet and widget.watched for widget in widgets)
        changed = waiter.wait(beat - self.clock() if quiet else self.interval)
        rest = self.interval - (self.clock() - polled_at)
        if rest > 0:
            time.sleep(rest)
            for directory, names in waiter.wait(0).items():  # what changed meanwhile, without waiting
                changed.setdefault(directory, set()).update(names)
        return changed

    def _listen(self, waiter: ChangeWaiter, widgets: list[PolledView]) -> dict:
        """Be told by each view's log stream (a remote container's) of its news, under the view's
        key, from now on; no longer by those of views gone. {view: its stream}."""
        streams = {widget: widget.log_stream for widget in widgets if widget.log_stream is not None}
        with self._lock:  # a thread that ends (see _stop_listening) may still be letting go of its own
            self._let_go(lambda widget, stream, told: streams.get(widget) is not stream or told is not waiter)
            for widget, stream in streams.items():
                if widget not in self._listening:
                    key = widget.watched_directory
                    callback = lambda ended, key=key: waiter.tell(key, LOST if ended else LOG_NEWS)  # noqa: E731
                    stream.listen(callback)
                    self._listening[widget] = (stream, callback, waiter)
        return streams

    def _stop_listening(self, waiter: ChangeWaiter) -> None:
        """The streams no longer tell `waiter` (its thread ends) of their news."""
        with self._lock:
            self._let_go(lambda widget, stream, told: told is waiter)

    def _let_go(self, gone: Callable) -> None:
        """Unlisten the entries for which gone(view, stream, waiter) is true (under the lock)."""
        for widget, (stream, callback, told) in list(self._listening.items()):
            if gone(widget, stream, told):
                stream.unlisten(callback)
                del self._listening[widget]


def _render(render: Callable[[], str], what: str, errors: list[str]) -> str | None:
    """`render()`, or None with the reason added to `errors`."""
    try:
        return render()
    except Exception as exc:
        errors.append(f"cannot show {what}: {describe(exc)}")
        return None


def _report(widget, exc: Exception) -> None:
    try:
        widget.show_failure(exc)
    except Exception:
        pass  # the widget cannot even show it: the poller still goes on with the others


_poller: Poller | None = None


def poller() -> Poller:
    global _poller
    if _poller is None:
        _poller = Poller()
    return _poller


def widgets_supported(shell) -> bool:
    """A kernel with a frontend that may render widgets (not terminal IPython)."""
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"
