"""File-system primitives: private files and directories, atomic writes, locks, and safe reads.

Everything the store writes is readable by its owner only, and replaced
atomically so that no reader sees half a file. A job owns its run's files (its
log, its pid and exit-code files) and may put anything there: a symbolic link
to /dev/zero, a FIFO that blocks a reader forever, a file of gigabytes. Read
here, such a file is never followed through a link, never waited on, and must
be a regular file; small files are read up to a cap.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from pathlib import Path
from typing import Iterator


def make_private_dir(path: Path) -> None:
    """Create `path`, and the parents it lacks, readable by the owner only; a directory that exists
    already is left as it is."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:  # made by another process meanwhile
            if not directory.is_dir():
                raise
            continue
        os.chmod(directory, 0o700)  # mkdir's mode passes through the umask


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created if missing), held for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_private_file(path: Path, data: bytes, durable: bool = True) -> None:
    """Write `data` to `path` atomically, readable by the owner only (and synced to disk if durable)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_in_place(path: Path, data: bytes) -> None:
    """Replace the content of an existing file, itself: its hard links (a run's file as a container
    sees it) see the new content, where an atomic replace would leave them the old file."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def create_private_file(path: Path, data: bytes = b"") -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


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


def read_small(path: Path | str, limit: int, offset: int = 0) -> bytes:
    """At most `limit` bytes of a regular file, from `offset`."""
    fd = open_regular(path)
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def read_range(path: Path | str, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes of a regular file from `offset` (b"" if the file is missing)."""
    try:
        return read_small(path, limit, offset)
    except FileNotFoundError:
        return b""


def written_span(path: Path | str, offset: int) -> tuple[int, int] | None:
    """Where the file's next written bytes from `offset` on start and end, when a hole lies at or
    after `offset` (a sparse file's: bytes never written, which read as NULs): (size, size) when
    nothing but a hole follows. None when there is no hole before the end, or the file system
    cannot tell (its holes are then read as the NULs they are), or the file is not there."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if offset >= size:
            return None
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            return (size, size) if exc.errno == errno.ENXIO else None  # ENXIO: a hole to the end
        end = os.lseek(fd, start, os.SEEK_HOLE)
        return (start, end) if start > offset or end < size else None
    except (OSError, AttributeError):  # a file system, or a platform, without SEEK_DATA
        return None
    finally:
        os.close(fd)


def version(path: Path | str) -> tuple[int, int, int] | None:
    """What changes whenever a file is written or replaced: its inode, size and modification time
    (ns), not following a link; None if it cannot be looked at. One lstat."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def regular_size(path: Path | str) -> int:
    """The size of a regular file (0 if missing); a link or special file is an error. One lstat,
    nothing opened: a view asks this of every log it follows several times a second."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return 0
    if stat.S_ISLNK(info.st_mode):
        raise NotARegularFile(errno.ELOOP, "is a symbolic link", str(path))
    if not stat.S_ISREG(info.st_mode):
        raise NotARegularFile(0, "is not a regular file", str(path))
    return info.st_size
