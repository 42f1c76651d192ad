"""The job widget (the view) and the one poller thread that keeps every widget of a kernel current.

The widget is built and displayed in the kernel's main thread. The poller
thread only reads logs and statuses and sets trait values, at most a few times
a second per widget however fast the job prints, and forgets a widget once its
job has ended and its log is read.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from .job import Job
from .monitor import BAR_STYLES, JobMonitor

PUSH_INTERVAL = 0.25  # seconds between two updates of one widget: at most 4 a second
POLL_INTERVAL = 0.25  # seconds between two reads of the logs


class JobWidget:
    def __init__(self, job: Job, log_lines: int = 200, clock: Callable[[], float] = time.time):
        import ipywidgets as widgets

        self.clock = clock
        self.monitor = JobMonitor(job, log_lines)
        self.status_interval = job.backend_impl().status_interval
        self.monitor.refresh_status()
        self.monitor.start()
        self.header = widgets.HTML()
        self.plot = widgets.HTML()
        self.log = widgets.HTML()
        self.stop_button = widgets.Button(
            description="Stop", icon="stop", tooltip="stop the job (its whole process group)"
        )
        self.stop_button.on_click(self._stop_clicked)
        self.box = widgets.VBox(
            [widgets.HBox([self.header, self.stop_button], layout={"justify_content": "space-between"}), self.plot, self.log],
            layout={"border": "1px solid #d0d7de", "padding": "6px", "width": "100%"},
        )
        self.box.add_class("jupyter-trainer-job")
        self.error = ""
        self.last_push = float("-inf")
        self.last_status_check = float("-inf")
        self._dirty = True
        self._shown_second = None
        self.push()

    @property
    def job(self) -> Job:
        return self.monitor.job

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)

    # -- driven by the poller ------------------------------------------------

    def poll(self, now: float) -> bool:
        """Catch up with the job; push to the frontend when due. False once nothing can change."""
        try:
            if now - self.last_status_check >= self.status_interval:
                self.last_status_check = now
                self._dirty |= self.monitor.refresh_status()
            self._dirty |= self.monitor.read_log()
            self.error = ""
        except Exception as exc:  # the view must survive a passing engine or disk error
            self.error = f"{exc.__class__.__name__}: {exc}"
            self._dirty = True
        finished = self.monitor.finished
        ticking = int(self.clock()) != self._shown_second  # the elapsed time moves on
        due = now - self.last_push >= PUSH_INTERVAL
        if finished or ((self._dirty or ticking) and due):
            self.push()  # the final state is always shown, whatever the rate
            self.last_push = now
        return not finished

    def push(self) -> None:
        """Project the monitor's state onto the widgets' traits."""
        monitor = self.monitor
        now = self.clock()
        self._shown_second = int(now)
        header = monitor.header_html(now)
        if self.error:
            header += f'<div style="color:#b00">{self.error}</div>'
        self.header.value = header
        plot = monitor.plot_html()
        if plot != self.plot.value:
            self.plot.value = plot
        log = monitor.log_html()
        if log != self.log.value:
            self.log.value = log
        status = monitor.record.status
        if status.is_final:
            with self.stop_button.hold_sync():
                self.stop_button.disabled = True
                self.stop_button.description = status.value
                self.stop_button.icon = "check" if status.value == "completed" else "times"
                self.stop_button.button_style = BAR_STYLES.get(status, "")
        self._dirty = False

    def _stop_clicked(self, _button) -> None:
        with self.stop_button.hold_sync():
            self.stop_button.disabled = True
            self.stop_button.description = "Stopping…"
        try:
            self.job.stop()
        except Exception as exc:  # shown in the widget, and the button offered again
            self.error = f"could not stop the job: {exc}"
            with self.stop_button.hold_sync():
                self.stop_button.disabled = False
                self.stop_button.description = "Stop"
            self.push()
        self.last_status_check = float("-inf")  # show the result at the next poll
        self._dirty = True


class Poller:
    """One thread per kernel, serving every widget; it ends when no widget needs it."""

    def __init__(self, interval: float = POLL_INTERVAL, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self.clock = clock
        self.widgets: list[JobWidget] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, *widgets: JobWidget) -> None:
        with self._lock:
            self.widgets.extend(widget for widget in widgets if widget not in self.widgets)
            if self._thread is None and self.widgets:
                self._thread = threading.Thread(target=self._run, name="jupyter_trainer-poller", daemon=True)
                self._thread.start()

    def tick(self) -> None:
        now = self.clock()
        with self._lock:
            widgets = list(self.widgets)
        finished = [widget for widget in widgets if not widget.poll(now)]
        if finished:
            with self._lock:
                self.widgets = [widget for widget in self.widgets if widget not in finished]

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self.widgets:
                    self._thread = None
                    return
            self.tick()
            time.sleep(self.interval)


_poller: Poller | None = None


def poller() -> Poller:
    global _poller
    if _poller is None:
        _poller = Poller()
    return _poller


def widgets_supported(shell) -> bool:
    """A kernel with a frontend that may render widgets (not terminal IPython)."""
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"
