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
# what a status check answered is told under (see Poller._run): every view may have its answer
ANSWERED = "answered:"


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
        self,
        interval: float = POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        quiet_interval: float = QUIET_INTERVAL,
    ):
        self.interval = interval
        self.quiet_interval = max(interval, quiet_interval)
        self.clock = clock
        self.widgets: list[PolledView] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._waiter: ChangeWaiter | None = None  # while its thread runs
        self._listening: dict[PolledView, tuple] = {}  # views told of by their log's stream: (stream, callback, waiter)
        # kept by the poller's thread between two waits: what it watches, as _watch last asked it
        self._watched_views: list[PolledView] = []
        self._watched_for: dict[PolledView, tuple] = {}  # each view's log path, key and stream
        self._watch_seen: tuple | None = None  # the waiter, and how many watches it had dropped
        self._all_watched = False
        self._by_key: dict[str | None, list[PolledView]] = {}  # the views by the key their changes are told under
        self._streamed: list[PolledView] = []  # the views told of by their log's stream
        self._awake: set[PolledView] = set()  # the views found not quiet, or not watched, after their last poll

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
                self._thread = threading.Thread(
                    target=self._run, args=(self._waiter,), name="jupyter_trainer-poller", daemon=True
                )
                self._thread.start()
            elif self._waiter is not None:
                self._waiter.wake()  # the new views are polled now, not after a quiet wait

    def forget_all(self) -> None:
        """Polls no view any more: its thread wakes, finds none, and ends (a kernel's views closed)."""
        with self._lock:
            self.widgets = []
            waiter = self._waiter
        if waiter is not None:
            waiter.wake()

    def tick(self, changed: dict[str, set[str]] | None = None, everyone: bool = True) -> list[PolledView]:
        """Poll the views once: every one, or (`everyone` False: a tick between two beats) those
        whose files changed and those that are not quiet or not watched. `changed`: the files
        that changed since the last tick, by directory. The views polled."""
        return self._tick(changed, everyone, None)

    def _tick(self, changed: dict[str, set[str]] | None, everyone: bool, awake: set | None) -> list[PolledView]:
        """tick; `awake`: the views found not quiet (or not watched) after their last poll, which
        a tick between two beats polls with the views told of a change, leaving the others
        unasked (None: each view is asked whether it is quiet)."""
        now = self.clock()
        with self._lock:
            widgets = list(self.widgets)
        if not everyone and awake is not None and ANSWERED not in (changed or {}):
            told = {view for key in changed or () for view in self._by_key.get(key, ())}
            new = [widget for widget in widgets if widget not in self._watched_for]  # come since the last wait
            widgets = [widget for widget in widgets if widget in told or widget in awake] + new
        polled, finished = [], []
        for widget in widgets:
            try:
                names = changed.get(widget.watched_directory) if changed else None
                if names:
                    widget.files_changed(names)
                elif not everyone and widget.quiet and widget.watched:  # a change of its files would have woken it
                    continue
                polled.append(widget)
                if not widget.poll(now):
                    finished.append(widget)
            except Exception as exc:  # a bug in one widget is shown in it; the others are still served
                _report(widget, exc)
        if finished:
            with self._lock:
                self.widgets = [widget for widget in self.widgets if widget not in finished]
        return polled

    def _run(self, waiter: ChangeWaiter) -> None:
        changed: dict[str, set[str]] = {}
        awake: set | None = None
        beat = float("-inf")  # when every view is polled next: the quiet ones move their clocks together
        told_answered = lambda: waiter.tell(ANSWERED, "")  # noqa: E731
        wake_on_answers(told_answered)  # a slow status check answered: its view takes the answer at once
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
                    polled = self._tick(changed, everyone, awake)
                    changed = self._wait(waiter, polled_at, beat, polled)
                    awake = self._awake
                except Exception:  # nothing of a widget's (tick catches those): try again at the next tick
                    changed, awake = {}, None
                    time.sleep(self.interval)
        finally:
            stop_waking(told_answered)
            self._stop_listening(waiter)
            waiter.close()

    def _wait(
        self, waiter: ChangeWaiter, polled_at: float, beat: float, polled: list[PolledView] | None = None
    ) -> dict[str, set[str]]:
        """Sleep until the next tick, the GIL released: `interval` after the last one while a
        view has news to show or a job that cannot wake the poller; else until a file of a job
        changes, but never sooner than `interval` after the last tick (a job that prints all the
        time is polled at that rate), nor later than the next `beat`. What changed meanwhile.
        `polled`: the views the last tick polled, whose files may have changed since, and which
        may have gone quiet or woken up (None: every view); the others are not asked again."""
        with self._lock:
            widgets = list(self.widgets)
        polled = widgets if polled is None else polled
        self._watch(waiter, widgets, polled)
        for widget in polled:
            if widget.quiet and widget.watched:
                self._awake.discard(widget)
            else:
                self._awake.add(widget)
        changed = waiter.wait(self.interval if self._awake else beat - self.clock())
        rest = self.interval - (self.clock() - polled_at)
        if rest > 0:
            time.sleep(rest)
            for directory, names in waiter.wait(0).items():  # what changed meanwhile, without waiting
                changed.setdefault(directory, set()).update(names)
        return changed

    def _watch(self, waiter: ChangeWaiter, widgets: list[PolledView], polled: list[PolledView]) -> None:
        """Watch each view's log and the directory where its status files change (both), or
        listen to its log's stream, and tell each view whether its news wake the poller. The
        watches are asked again only when the views change, or the files of one polled since,
        or the kernel dropped a watch, or one could not be had."""
        seen = (waiter, waiter.dropped)
        moved = any(
            self._watched_for.get(widget) != (widget.log_path, widget.watched_directory, widget.log_stream)
            for widget in polled
        )
        if moved or widgets != self._watched_views or seen != self._watch_seen or not self._all_watched:
            wanted = {widget: (widget.log_path, widget.watched_directory, widget.log_stream) for widget in widgets}
            logs = {widget: path for widget, (path, _, _) in wanted.items() if path is not None}
            paths = {wanted[widget][1] for widget in logs} | set(logs.values())
            watched = waiter.watch(paths)
            self._all_watched = watched >= paths
            self._by_key = {}
            for widget, (path, key, stream) in wanted.items():
                self._by_key.setdefault(key, []).append(widget)
                if stream is None:  # told while its stream is up (see below); read through the engine, polled
                    widget.in_watch = path in watched and key in watched
            self._streamed = [widget for widget, (_, _, stream) in wanted.items() if stream is not None]
            self._watched_for, self._watched_views, self._watch_seen = wanted, widgets, (waiter, waiter.dropped)
            self._awake &= set(widgets)
        if self._streamed or self._listening:
            streams = self._listen(waiter, self._streamed)
            for widget in self._streamed:
                widget.in_watch = widget in streams and streams[widget].telling

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
