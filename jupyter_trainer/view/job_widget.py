"""The job widget: one job's live view (header, Stop, charts, log), kept current by the kernel's
poller (see poller.py) and drawn by job_html.py; a copy of it is saved in the notebook."""

from __future__ import annotations

import html
import secrets
import threading
import time
from pathlib import Path
from typing import Callable

from ..core.record import Status
from ..core.store import RECORD_FILE
from ..errors import JobReplaced, Unreachable
from ..jobs.job import Job
from ..jobs.status_checks import OPEN_WAIT
from ..logs.watch import LOG_NEWS
from .chart_controls import HOST, STATE, state_html
from .charts import MAX_CHARTS, job_chart_controls
from .job_html import (
    BAR_STYLES,
    CHOOSER_DEFAULT,
    STYLE,
    chooser_options,
    clocks_html,
    describe,
    error_html,
    header_html,
    log_html,
    plot_html,
    saved_view_html,
)
from .monitor import JobMonitor, Snapshot
from .poller import STREAM_KEY, PolledView

PUSH_INTERVAL = 0.25  # seconds between two updates of one widget: at most 4 a second
# The charts are the largest part of an update: they are sent again only once the bytes they took
# fit this rate (a few small charts as often as the rest, a view full of long curves every 2 s or so;
# the last state at once).
CHARTS_BYTES_PER_SECOND = 64 * 1024
SAVE_INTERVAL = 15.0  # seconds between two updates of the view saved in the notebook (and at each change of status)
# A watched view's log is read when the watch reports a change of it (and at each status check),
# and this often besides: a log grown with no change reported shows the watch does not work there.
WATCH_CHECK_SECONDS = 5.0


class JobWidget(PolledView):
    def __init__(self, job: Job, log_lines: int = 200, clock: Callable[[], float] = time.time):
        import ipywidgets as widgets

        self.clock = clock
        self.monitor = JobMonitor(job, log_lines)
        backend = job.backend_impl()
        self.status_interval = backend.status_interval
        # while the poller is woken by each change of the job's files (see Poller), a backend whose
        # changes of status show there may be asked less often
        self.watched_status_interval = backend.watched_status_interval
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
        self.clocks = widgets.HTML()  # the elapsed time (and quiet time): drawn alone each second
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
                self.style,
                widgets.HBox(
                    # the clocks beside Stop, on the right: the header's left part keeps its place as they move
                    [
                        self.header,
                        widgets.HBox(
                            [self.clocks, self.stop_button], layout={"align_items": "flex-start", "flex": "0 0 auto"}
                        ),
                    ],
                    layout={"justify_content": "space-between"},
                ),
                self.chooser,
                self.plot,
                self.log,
            ],  # fmt: skip
            layout={"padding": "6px", "width": "100%"},
        )
        self.box.add_class("jupyter-trainer-job")
        self.view_id = secrets.token_hex(8)
        # while this view is drawn, the copy saved in the notebook is not shown
        self.style.value = STYLE + f"<style>.jt-saved-{self.view_id} {{ display: none; }}</style>"
        # the charts' choices (chart_controls.py) live in the style's element, never redrawn: they
        # outlive the updates that redraw the charts
        self.chart_prefix = f"jt{self.view_id}"
        self.style.value += state_html(job_chart_controls(self.chart_prefix))
        self.style.add_class(STATE)
        self.box.add_class(HOST)
        self._saved_handle = None  # the display of the saved copy, once the view is shown in a notebook
        self._saved_state = None  # what the saved copy last showed: status and when
        self.error = ""  # the last failure, shown under the header until the step that failed succeeds
        self._error_step: str | None = None  # that step: "status", "log", "stop" or "poll"
        self.removed = False  # the job's record is gone from the store: nothing more to follow
        # the poller's thread and the kernel's (a chart chosen, a stop's end) both read the monitor
        self._lock = threading.RLock()
        self.last_push = float("-inf")
        self.last_status_check = float("-inf")
        # a change of its files told while a check was under way: ask again once it is answered
        self._status_news = False
        self._shown_asking = ""  # what the header says of a status check under way
        self._dirty = True
        self._header_stale = False  # only the header has news (a reading of what the job uses)
        self._shown_second = None
        # the elapsed time (and quiet warning) the header shows, while only the clock can move them
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
            checking = now - self.last_status_check >= (
                self.watched_status_interval if self.watched else self.status_interval
            )
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
        due = now - self.last_push >= PUSH_INTERVAL  # since the last whole update
        if not finished and (ticking or self._header_stale) and not (self._dirty or self._charts_stale):
            # a quiet job: only its clock (once a second) or what it uses moved. Not counted against
            # the pace of whole updates: a line printed just after it is shown at once, rather than
            # keeping the view awake (and the poller ticking) until the pace allows it
            self._push_header()
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
            self._watched_for, self._watched_directory = (
                log_file,
                str(log_file.parent) if log_file is not None else None,
            )
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
        """Only the header again: its clocks alone when nothing else in it can have changed (a quiet
        job's moves once a second, and drawing the whole takes a snapshot and its sparklines), else
        the whole, which still says why the parts not drawn again could not be drawn the last time."""
        now = self.clock()
        if not self._header_stale and self.clocks.value:  # drawn once with the header: its clocks alone now
            self._shown_second = int(now)
            self._show_clocks(self.monitor.elapsed(now), self.monitor.quiet_for(now))
            return
        _, header, errors = self._header(now)
        self._header_stale = False
        self.header.value = header + "".join(
            error_html(error) for error in errors + self._chart_errors + self._log_errors
        )

    def _show_clocks(self, elapsed: float | None, quiet_for: float | None) -> None:
        shown = clocks_html(elapsed, quiet_for)
        if shown != self.clocks.value:
            self.clocks.value = shown

    def _header(self, now: float) -> tuple:
        """The monitor's snapshot (None if it could not be taken), the header drawn from it, and
        what went wrong on the way."""
        self._shown_second = int(now)
        errors = [self.error] if self.error else []
        snapshot = _render(lambda: self.monitor.snapshot(now), "the view", errors)
        if snapshot:
            self._shown_asking = snapshot.asking
        header = _render(lambda: self.render_header(snapshot), "the header", errors) if snapshot else None
        if snapshot:
            self._show_clocks(snapshot.elapsed, snapshot.quiet_for)
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
        self.header.value = header + "".join(
            error_html(error) for error in errors + self._chart_errors + self._log_errors
        )
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
                self.stop_button.icon = "check" if status is Status.COMPLETED else "times"
                self.stop_button.button_style = BAR_STYLES.get(status, "")
        self._dirty = self._header_stale = False
        return sent

    # the renderers this widget uses (one may be replaced to test a failure that stays in its widget)
    # the clocks have their own element
    render_header = staticmethod(lambda snapshot: header_html(snapshot, clocks=False))

    def render_plot(self, snapshot: Snapshot) -> str:
        return plot_html(snapshot, self.chart_prefix)

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


def _render(render: Callable[[], str], what: str, errors: list[str]) -> str | None:
    """`render()`, or None with the reason added to `errors`."""
    try:
        return render()
    except Exception as exc:
        errors.append(f"cannot show {what}: {describe(exc)}")
        return None
