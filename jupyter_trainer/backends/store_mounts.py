"""Keeping the job store out of containers' reach.

A container must never see the store: it holds the key that makes fingerprints
of secrets safe, every job's script and log, and the records we trust to decide
whom to signal. Yet the store commonly lies inside the directory a container
mounts as its workspace (a notebook in `~`, the store in `~/.jupyter_trainer`).
So a container we create covers the store's place in each of its mounts with an
empty read-only file system, and a container we are asked to reuse is refused if
it reaches the store through any mount that is not covered. Only the
container's own directory in the store (its runs' files) may be mounted.

Pure path logic: the Docker backend gives it the mounts it sees.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True)
class Mount:
    source: str  # on the engine's machine
    destination: str  # in the container


def _real(path: str) -> str:
    return os.path.realpath(path)


def is_inside(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or below it, once links are resolved."""
    return _inside(_real(path), _real(directory))


def _inside(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or below it (both real, absolute paths)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def covers_for(mounts: list[Mount], store_home: str) -> list[str]:
    """Where, in the container, each mount would show the store: the places to cover."""
    home = _real(store_home)
    places = []
    for mount in mounts:
        source = _real(mount.source)
        if _inside(home, source):
            places.append(str(PurePosixPath(mount.destination) / os.path.relpath(home, source)))
    return places


def exposure(mounts: list[Mount], covered: set[str], store_home: str, own_dir: str | None) -> str | None:
    """How the container reaches the store (a mount's source), or None when it cannot.

    `covered`: destinations where something else is mounted over what a mount shows (a cover);
    `own_dir`: the container's own directory in the store, the one part of it it may mount."""
    home = _real(store_home)
    for mount in mounts:
        source = _real(mount.source)
        if _inside(source, home):
            if own_dir is not None and source == _real(own_dir):
                continue
            return mount.source
        if _inside(home, source):
            place = str(PurePosixPath(mount.destination) / os.path.relpath(home, source))
            others = covered - {mount.destination}  # a mount does not cover what it shows itself
            if not any(_inside(place, cover) for cover in others):
                return mount.source
    return None
