"""Reading files that a job can write to.

A job owns its run's files (its log, its pid and exit-code files) and may put
anything there: a symbolic link to /dev/zero, a FIFO that blocks a reader
forever, a file of gigabytes. Opened here, a file is never followed through a
link, never waited on, and must be a regular file; small files are read up to
a cap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class NotARegularFile(OSError):
    """The path names a link, a FIFO, a device or a directory where a plain file belongs."""


def open_regular(path: Path | str) -> int:
    """A read-only descriptor on `path`, which must be a regular file (the caller closes it)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symbolic link
            raise NotARegularFile(exc.errno, "is a symbolic link", str(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(0, "is not a regular file", str(path))
    return fd


def read_small(path: Path | str, limit: int) -> bytes:
    """At most `limit` bytes from the start of a regular file."""
    fd = open_regular(path)
    try:
        return os.pread(fd, limit, 0)
    finally:
        os.close(fd)


def read_range(path: Path | str, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes of a regular file from `offset` (b"" if the file is missing)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def regular_size(path: Path | str) -> int:
    """The size of a regular file (0 if missing); a link or special file is an error."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return 0
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)
