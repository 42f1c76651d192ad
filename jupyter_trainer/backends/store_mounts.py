"""Keeping the job store out of containers' reach.

A container must never see or change the store: it holds the key that makes
fingerprints of secrets safe, every job's script and log, and the supervisor
scripts that --host jobs run on this machine. Yet the store commonly lies inside
the directory a container mounts as its workspace (a notebook in `~`, the store
in `~/.jupyter_trainer`). Covering the store is not enough: a job that can rename
a directory on the way to it, or replace a symbolic link on the way, makes this
machine use a "store" of the job's making. So a container we create

* covers the store with an empty, read-only file system, and
* pins every directory between the mount and the store by mounting it on itself
  (a mount point can be neither renamed nor removed),

and the store's path may not pass through a symbolic link inside a mount (it
cannot be pinned: set JUPYTER_TRAINER_HOME to where it points). A container we
are asked to reuse must show the same protection for every mount that reaches
the store. Only the container's own directory in the store may be mounted.

Pure path logic but for reading links: the Docker backend gives it the mounts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True)
class Mount:
    source: str  # on the engine's machine
    destination: str  # in the container


@dataclass(frozen=True)
class Protection:
    """What a mount that reaches the store needs over it."""

    pins: tuple[Mount, ...]  # directories on the way to the store, each mounted on itself
    cover: str  # where the store shows in the container: covered by an empty read-only file system


class LinkOnTheWay(Exception):
    """The store's path passes through a symbolic link that a container could replace."""

    def __init__(self, link: str, target: str):
        super().__init__(f"{link} -> {target}")
        self.link, self.target = link, target


def _real(path: str) -> str:
    return os.path.realpath(path)


def _inside(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or below it (both real, absolute paths)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def is_inside(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or below it, once links are resolved."""
    return _inside(_real(path), _real(directory))


def protection(mount: Mount, store_home: str) -> Protection | None:
    """What must be mounted over `mount` so that the store it shows can be neither reached nor moved;
    None when the mount does not show the store. Raises LinkOnTheWay."""
    source = _real(mount.source)
    _check_links(store_home, source)
    home = _real(store_home)
    if home == source or not _inside(home, source):
        return None  # the store is the mount itself (refused elsewhere), or elsewhere
    relative = PurePosixPath(os.path.relpath(home, source))
    pins = tuple(
        Mount(str(PurePosixPath(source, *relative.parts[:depth])), str(PurePosixPath(mount.destination, *relative.parts[:depth])))
        for depth in range(1, len(relative.parts))
    )
    return Protection(pins, str(PurePosixPath(mount.destination, relative)))


def _check_links(store_home: str, source: str) -> None:
    """Every symbolic link the store's path goes through, as this machine resolves it, must lie
    outside the mounted directory: one inside could be replaced from the container."""
    path = PurePosixPath(os.path.abspath(store_home))
    for depth in range(2, len(path.parts) + 1):
        prefix = str(PurePosixPath(*path.parts[:depth]))
        if os.path.islink(prefix) and _inside(os.path.join(_real(os.path.dirname(prefix)), os.path.basename(prefix)), source):
            raise LinkOnTheWay(prefix, os.readlink(prefix))


def exposure(mounts: list[Mount], mounted_over: set[str], store_home: str, own_dir: str | None) -> str | None:
    """How the container can reach the store (a mount's source), or None when it cannot.

    `mounted_over`: the destinations of the container's mounts and file systems;
    `own_dir`: the container's own directory in the store, the one part of it it may mount."""
    home = _real(store_home)
    for mount in mounts:
        source = _real(mount.source)
        if "docker.sock" in (os.path.basename(source), os.path.basename(mount.destination)):
            return mount.source  # whoever holds the engine can mount anything, the store included
        if _inside(source, home):
            if own_dir is not None and source == _real(own_dir):
                continue
            return mount.source
        try:
            needed = protection(mount, store_home)
        except LinkOnTheWay:
            return mount.source
        if needed is None:
            continue
        others = mounted_over - {mount.destination}  # a mount neither pins nor covers what it shows itself
        if needed.cover not in others or any(pin.destination not in others for pin in needed.pins):
            return mount.source
    return None
