"""Ctrl-C held back while a launched job is being recorded.

A job whose launch has returned runs: were the record not saved with where it runs (an interrupt
between the two), it would run on with nothing to follow or stop it. While `held()` is in force, a
SIGINT (Ctrl-C, a notebook's "interrupt kernel") is noted and raised as KeyboardInterrupt once the
block is done. Only the main thread receives signals: elsewhere it holds nothing back.
"""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def held():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, _frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt
