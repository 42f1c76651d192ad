"""The one poller thread that keeps every view of a kernel current.

The views are built and displayed in the kernel's main thread. The poller thread only reads logs
and statuses and sets trait values, at most a few times a second per view however fast the job
prints, and forgets a view once its job has ended and its log is read, or once the job was removed
from the store. Whatever fails while a view is polled or drawn is shown in that view, as one line
of escaped text, and never stops the thread: the other views of the kernel go on.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ..jobs.status_checks import stop_waking, wake_on_answers
from ..logs.source import TellingLog
from ..logs.watch import LOG_NEWS, LOST, ChangeWaiter

POLL_INTERVAL = 0.25  # seconds between two reads of the logs
# ...while every job is quiet and a change to its files wakes the poller at once: then only the
# elapsed time moves (and a status check or a look at what the job uses may be due)
QUIET_INTERVAL = 1.0
# what a view told of by its log's stream is keyed by: no directory's path starts so
STREAM_KEY = "stream:"


class PolledView:
    """What the Poller asks of each view it serves, besides `poll(now)` and `show_failure(exc)`. A
    view that no change of a file can wake (a comparison of several jobs) keeps these defaults:
    it is polled at the poller's interval, and keeps the poller from sleeping while it is live."""

    in_watch = False  # set by the poller: whether its log's changes wake the poller
    watched_directory: str | None = None  # the key its files' changes are told under
    log_path: str | None = None  # a log file on this machine to watch
    log_stream: TellingLog | None = None  # else a stream that tells of its log's news (see logs/source.py)
    quiet = False  # whether it may be left until a change is told, or the next beat
    watched = False

    def files_changed(self, names: set[str]) -> None:
        """Files of its directory changed (told by the poller)."""




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
