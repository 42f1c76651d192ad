"""Waiting for files to change, with the GIL released: what lets the poller sleep while its jobs
are quiet and wake as soon as one of them writes.

On Linux a `ChangeWaiter` watches directories through inotify (through ctypes: the standard
library has no binding) and waits in `select()` until a watched file changes, it is woken, or the
timeout passes. Where inotify cannot be had (another system, no instance left), it only waits
for the timeout or a wake, and the poller polls as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import struct
import sys
import threading

# what a watched directory reports: a file written or replaced in it, or the directory gone
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE = 0x2, 0x4, 0x8, 0x80, 0x100
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE_SELF | _IN_MOVE_SELF
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, getattr(os, "O_CLOEXEC", 0o2000000)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_READ_SIZE = 64 * 1024
# The name told for a watched directory whose changes were lost (the queue was full): not a file's
# name (no file name holds a NUL), and so, to a view, a change that may be of its status.
LOST = "\0lost"
# The name told (see ChangeWaiter.tell) for a log that is not a file here, whose stream brought news.
LOG_NEWS = "\0log"


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch  # noqa: B018 (all three there)
    except (OSError, AttributeError):
        return None
    return libc


class ChangeWaiter:
    def __init__(self):
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._libc = _libc()
        self._inotify = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC) if self._libc else -1
        self._watches: dict[str, int] = {}  # path -> watch descriptor
        self._paths: dict[int, str] = {}  # and back
        self._told: dict[str, set[str]] = {}  # changes told by other threads (see tell), until a wait takes them
        self._told_lock = threading.Lock()
        self.dropped = 0  # watches the kernel ended (a path gone), counted: those paths may be watched again

    @property
    def watching(self) -> bool:
        """Whether a change to a watched directory ends a wait (else only a wake or the timeout does)."""
        return self._inotify >= 0

    def watch(self, paths: set[str]) -> set[str]:
        """Watch exactly these directories and files from now on; those that can be watched. A
        file is watched itself as well as through its directory: where another kernel writes it
        (a container engine's VM, through a shared folder) only its own watch may report it."""
        if not self.watching:
            return set()
        for path in set(self._watches) - paths:
            self._libc.inotify_rm_watch(self._inotify, self._watches.pop(path))  # its IN_IGNORED is skipped
        for path in paths - set(self._watches):
            descriptor = self._libc.inotify_add_watch(self._inotify, os.fsencode(path), _MASK)
            if descriptor >= 0:  # gone, not there yet, or no watch left: it is polled
                self._watches[path] = descriptor
                self._paths[descriptor] = path
        return set(self._watches)

    def tell(self, directory: str, name: str) -> None:
        """A change seen elsewhere (a remote log's stream brought bytes): the wait under way, or the
        next, ends and returns it with the watched ones. Safe from any thread; told again before a
        wait took it, it costs nothing more."""
        with self._told_lock:
            names = self._told.setdefault(directory, set())
            if name in names:
                return
            names.add(name)
        self.wake()

    def wake(self) -> None:
        """End the wait under way (or the next one) at once; safe from any thread."""
        with contextlib.suppress(BlockingIOError, OSError):  # a byte already waiting wakes it as well
            os.write(self._wake_write, b"!")

    def wait(self, timeout: float) -> dict[str, set[str]]:
        """Wait until a watched path changes, a wake, or `timeout` seconds; what changed:
        {directory: names of the files in it} (a watched directory itself by its own directory and
        name; every watched path, with LOST for each directory, once the kernel dropped changes)."""
        ready = [self._wake_read] + ([self._inotify] if self.watching else [])
        try:
            readable, _, _ = select.select(ready, [], [], max(0.0, timeout))
        except InterruptedError:
            return {}
        if self._wake_read in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_read, 4096)
        changed = self._changes() if self._inotify in readable else {}
        with self._told_lock:
            told, self._told = self._told, {}
        for directory, names in told.items():
            changed.setdefault(directory, set()).update(names)
        return changed

    def _changes(self) -> dict[str, set[str]]:
        changed: dict[str, set[str]] = {}
        while True:
            try:
                data = os.read(self._inotify, _READ_SIZE)
            except BlockingIOError:
                return changed
            if not data:
                return changed
            offset = 0
            while offset + _EVENT.size <= len(data):
                descriptor, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:  # the kernel dropped what came next: anything may have changed
                    self._everything_changed(changed)
                    continue
                path = self._paths.get(descriptor)
                if path is None:
                    continue
                if mask & _IN_IGNORED:  # the path is gone: watched again if it comes back
                    self._paths.pop(descriptor, None)
                    if self._watches.get(path) == descriptor:
                        del self._watches[path]
                        self.dropped += 1
                if not name and mask & (_IN_MOVE_SELF | _IN_DELETE_SELF):
                    # a path renamed away (a run directory being removed) or deleted: its watch would
                    # go on telling of it under the old path; whatever is at the path now is watched
                    # anew, and for a directory anything in it may have changed (LOST)
                    self._forget(descriptor, path)
                    changed.setdefault(path, set()).add(LOST)
                if name:  # a file of a watched directory
                    changed.setdefault(path, set()).add(os.fsdecode(name))
                else:  # a watched path itself
                    _told_as_file(changed, path)

    def _forget(self, descriptor: int, path: str) -> None:
        if self._watches.get(path) == descriptor:
            del self._watches[path]
            self.dropped += 1
            self._libc.inotify_rm_watch(self._inotify, descriptor)  # its IN_IGNORED is skipped
        self._paths.pop(descriptor, None)

    def _everything_changed(self, changed: dict[str, set[str]]) -> None:
        """Every watched path told as changed: a file by its directory and name, a directory by LOST."""
        for path in self._watches:
            _told_as_file(changed, path)
            changed.setdefault(path, set()).add(LOST)

    def close(self) -> None:
        for fd in (self._wake_read, self._wake_write, self._inotify):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._inotify = -1


def _told_as_file(changed: dict[str, set[str]], path: str) -> None:
    """A watched path itself changed: told as a file is, by its directory and name."""
    directory, _, base = path.rpartition("/")
    changed.setdefault(directory or "/", set()).add(base)
