"""Keeping the job store out of containers' reach.

A container must never see or change the store: it holds the key that makes
fingerprints of secrets safe, every job's script and log, and the supervisor
scripts that --host jobs run on this machine. Yet the store commonly lies inside
the directory a container mounts as its workspace (a notebook in `~`, the store
in `~/.jupyter_trainer`). Covering the store is not enough: a job that can rename
a directory on the way to it, or replace a symbolic link on the way, makes this
machine use a "store" of the job's making.

So the store's path is resolved here as the kernel resolves it, entry by entry,
links and `..` included, and every directory entry passed through is looked for
in what the container mounts: not by comparing path strings, which bind mounts
and links defeat, but by the identity (device, inode) of the directories the
container sees. An entry the container sees must be

* the store itself: covered by an empty, read-only file system;
* a directory on the way: pinned, by mounting it on itself (a mount point can be
  neither renamed nor removed);
* a symbolic link: refused, as it cannot be pinned.

A container that can reach the engine's socket could mount anything: refused.
Only the container's own directory in the store may be mounted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath

MAX_LINKS = 40  # as the kernel's ELOOP
ENGINE_SOCKETS = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/var/run/podman/podman.sock",
)


@dataclass(frozen=True)
class Mount:
    source: str  # on the engine's machine
    destination: str  # in the container


@dataclass(frozen=True)
class Protection:
    """What must be mounted over a container's mounts so that the store can be neither reached nor moved."""

    pins: tuple[Mount, ...] = ()  # directories on the way to the store, each mounted on itself
    covers: tuple[str, ...] = ()  # where the store shows in the container: an empty read-only file system


class Unprotectable(Exception):
    """The container could change the store's path in a way no mount can prevent."""


@dataclass(frozen=True)
class _Entry:
    parent: str  # the real path of the directory holding the entry
    name: str
    is_link: bool


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def walk(path: str) -> tuple[str, list[_Entry]]:
    """Resolve `path` as the kernel does: component by component, following each link (and a `..`
    after one from where the link led). Return the real path and every entry passed through."""
    entries: list[_Entry] = []
    links = 0

    def resolve(current: str, components: list[str]) -> str:
        nonlocal links
        for component in components:
            if component in ("", "."):
                continue
            if component == "..":
                current = os.path.dirname(current) or "/"
                continue
            candidate = os.path.join(current, component)
            is_link = os.path.islink(candidate)
            entries.append(_Entry(current, component, is_link))
            if not is_link:
                current = candidate
                continue
            links += 1
            if links > MAX_LINKS:
                raise Unprotectable(f"too many links on the way to {path}")
            target = os.readlink(candidate)
            current = resolve("/" if target.startswith("/") else current, target.split("/"))
        return current

    start = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    return resolve("/", start.split("/")), entries


def _roots(mounts: list[Mount]) -> list[tuple[tuple[int, int], str, str]]:
    """Each directory tree a container sees: its mounts' sources, and the mounts of this machine
    below them (Docker binds recursively). As (identity, real path, path in the container)."""
    roots = []
    mount_points = _mount_points()
    for mount in mounts:
        source = os.path.realpath(mount.source)
        identity = _identity(source)
        if identity is None:
            continue
        roots.append((identity, source, mount.destination))
        for point in mount_points:
            if point.startswith(source.rstrip("/") + "/"):
                below = _identity(point)
                if below is not None:
                    roots.append((below, point, str(PurePosixPath(mount.destination, os.path.relpath(point, source)))))
    return roots


def _mount_points() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            points.append(fields[4].encode().decode("unicode_escape"))  # \040 for a space, and such
    return points


def _places(directory: str, roots) -> list[str]:
    """Where the container sees `directory` (a real path): found by walking up from it to a
    directory that is one of the container's roots, by identity."""
    places = []
    ancestor, below = directory, []
    while True:
        identity = _identity(ancestor)
        for root_identity, _, destination in roots:
            if identity is not None and identity == root_identity:
                places.append(str(PurePosixPath(destination, *reversed(below))))
        parent = os.path.dirname(ancestor)
        if parent == ancestor:
            return places
        below.append(os.path.basename(ancestor))
        ancestor = parent


def protection(mounts: list[Mount], store_home: str) -> Protection:
    """What must be mounted over `mounts` so that the store cannot be reached, moved or replaced
    from the container. Raises Unprotectable."""
    roots = _roots(mounts)
    real_home, entries = walk(store_home)
    for socket in ENGINE_SOCKETS:
        if os.path.exists(socket) and _places(os.path.dirname(os.path.realpath(socket)), roots):
            raise Unprotectable(f"it can reach the engine's socket {socket}")
    pins, covers = [], []
    for index, entry in enumerate(entries):
        for place in _places(entry.parent, roots):
            where = str(PurePosixPath(place, entry.name))
            if entry.is_link:
                raise Unprotectable(
                    f"the job store's path goes through {os.path.join(entry.parent, entry.name)}, "
                    "a link a job could replace"
                )
            if os.path.join(entry.parent, entry.name) == real_home and index == len(entries) - 1:
                covers.append(where)
            else:
                pins.append(Mount(os.path.join(entry.parent, entry.name), where))
    return Protection(tuple(dict.fromkeys(pins)), tuple(dict.fromkeys(covers)))


def is_inside(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or below it, by identity (links and bind mounts seen through)."""
    target = _identity(directory)
    current = os.path.realpath(path)
    while True:
        if target is not None and _identity(current) == target:
            return True
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent


def exposure(mounts: list[Mount], mounted_over: set[str], store_home: str, own_dir: str | None) -> str | None:
    """Why the container can reach the store, or None when it cannot.

    `mounted_over`: the destinations of the container's mounts and file systems;
    `own_dir`: the container's own directory in the store, the one part of it it may mount."""
    for mount in mounts:
        if is_inside(mount.source, store_home) and not (own_dir is not None and is_inside(mount.source, own_dir)):
            return f"it mounts {mount.source}, inside the store"
    try:
        needed = protection(mounts, store_home)
    except Unprotectable as problem:
        return str(problem)
    for pin in needed.pins:
        if pin.destination not in mounted_over:
            return f"{pin.destination} is not pinned"
    for cover in needed.covers:
        if cover not in mounted_over:
            return f"the store shows at {cover}"
    return None
