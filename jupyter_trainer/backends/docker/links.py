"""A run's files shared with a container through hard links in the container's own directory.

The container mounts that directory read-write, so whatever runs in it may put
a symbolic link where a run's directory was. Everything here therefore works
through directory descriptors opened without following links: a planted link
is at worst removed, never followed to a file outside the directory.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterable

_NO_FOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def link_run(shared_dir: Path, name: str, run: int, run_dir: Path, files: Iterable[str]) -> bool:
    """Hard-link the run's `files` into shared_dir/name/run; False where that cannot be done."""
    files = tuple(files)
    unlink_run(shared_dir, name, run, files)  # left by a submission killed halfway, whose run number is reused
    try:
        with (
            _directory(shared_dir) as root,
            _subdirectory(root, name, make=True) as job,
            _subdirectory(job, str(run), make=True) as run_fd,
        ):
            for file in files:
                os.link(run_dir / file, file, dst_dir_fd=run_fd)
    except OSError:  # a file system without hard links, say
        unlink_run(shared_dir, name, run, files)
        return False
    return True


def unlink_run(shared_dir: Path, name: str, run: int, files: Iterable[str]) -> None:
    """Remove the run's links, and its directories once empty; the run's own files stay in the store."""
    with contextlib.suppress(OSError):
        with _directory(shared_dir) as root:
            with _subdirectory(root, name) as job:
                with _subdirectory(job, str(run)) as run_fd:
                    for file in files:
                        with contextlib.suppress(OSError):
                            os.unlink(file, dir_fd=run_fd)
                with contextlib.suppress(OSError):
                    os.rmdir(str(run), dir_fd=job)
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=root)


@contextlib.contextmanager
def _directory(path: Path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _subdirectory(parent: int, name: str, make: bool = False):
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
    fd = os.open(name, _NO_FOLLOW, dir_fd=parent)
    try:
        if make:
            os.fchmod(fd, 0o700)  # mkdir's mode passes through the umask
        yield fd
    finally:
        os.close(fd)
