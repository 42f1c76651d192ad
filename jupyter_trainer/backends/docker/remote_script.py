"""A script run in place that lies on a remote Docker host only, in its --workdir: its text is
read through the engine (the only way this machine has to that host's files) before the job is
fingerprinted, so that the run keeps it as submitted, as it keeps a local one's. No link on its
way is followed: the engine would follow it inside the container's files, not the host's."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import posixpath
import secrets
import tarfile
import time

from ...core.store import JobStore
from ...errors import InvalidOption
from ...spec.in_place import MAX_SCRIPT_BYTES, script_text, sha256_of
from ...spec.job_spec import DetachedSpec
from .containers import LABEL, LABEL_JOBS_DIR, LABEL_SCRATCH, LABEL_STORE, ensure_image, remove_stale_scratch
from .errors import engine_errors, no_workdir, script_unreadable
from .hosts import Engine
from .runtime import WORKSPACE

# Go's os.FileMode bits of what is not a regular file (the engine's stat of an archived path)
_NOT_REGULAR = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
_SYMLINK = 1 << 27
_DIRECTORY = 1 << 31
_CHECK_PATH = "check the path (relative to --workdir, on that host)"


def with_script_read(spec: DetachedSpec, client, engine: Engine, store: JobStore) -> DetachedSpec:
    """The spec with the text of its script on the host (spec.script_path, a path there)."""
    import docker

    where = f"{spec.script_path} on {engine.label}"
    try:
        with _seeing(spec, spec.script_path, client, engine, store, where) as (container, root, path, host_root):
            _check_directories(container, root, path, where, f"{host_root} on {engine.label}")
            data = _read(container, path, where)
    except docker.errors.APIError as exc:  # a path the engine could not follow
        raise script_unreadable(where, exc) from exc
    text = script_text(data, where)
    return dataclasses.replace(spec, script=text, script_sha256=sha256_of(text))


def lies_on_host(spec: DetachedSpec, host_path: str, client, engine: Engine, store: JobStore) -> bool:
    """Whether anything is at `host_path` of the host, where the job's container would see it."""
    import docker

    try:
        with _seeing(spec, host_path, client, engine, store, host_path) as (container, _, path, _):
            return _stat(container, path) is not None
    except (InvalidOption, docker.errors.APIError):  # nothing the job would see there
        return False


def path_in_container(spec: DetachedSpec, container) -> str:
    """Where the job's container sees the script (None: the one made for the job, not made yet)."""
    if container is None:
        return posixpath.join(WORKSPACE, posixpath.relpath(spec.script_path, spec.workdir))
    return _path_in(container, spec.script_path, spec.script_path)[1]


@contextlib.contextmanager
def _seeing(spec: DetachedSpec, host_path: str, client, engine: Engine, store: JobStore, where: str):
    """A container that sees `host_path` of the host, the directory it sees it through (a mount's
    destination), where it sees it, and that directory's path on the host."""
    if spec.options.container and not spec.options.image:
        container = _users_container(spec, client, engine)
        yield (container, *_path_in(container, host_path, where))
        return
    with _scratch_container(spec, client, engine, store) as scratch:
        yield scratch, WORKSPACE, posixpath.join(WORKSPACE, posixpath.relpath(host_path, spec.workdir)), spec.workdir


def _users_container(spec: DetachedSpec, client, engine: Engine):
    import docker

    try:
        return client.containers.get(spec.options.container)
    except docker.errors.NotFound:
        raise InvalidOption(
            f"container {spec.options.container!r} does not exist on {engine.label}, so {spec.script_path} "
            "cannot be read there",
            "start it first, or give --image to let jupyter_trainer make one",
        ) from None


def _path_in(container, path: str, where: str) -> tuple[str, str, str]:
    """The deepest of the container's mounts that holds `path` (the host's): its destination,
    `path` as the container sees it, and its source."""
    found = [
        (
            len(source),
            mount["Destination"],
            posixpath.join(mount["Destination"], posixpath.relpath(path, source)),
            source,
        )
        for mount in container.attrs.get("Mounts") or []
        for source in [posixpath.normpath(mount.get("Source") or "/nowhere")]
        if mount.get("Destination") and (path + "/").startswith(source.rstrip("/") + "/") and path != source
    ]
    if not found:
        raise InvalidOption(
            f"container {container.name!r} mounts no directory that holds {where}",
            "give a script inside a directory it mounts, or let jupyter_trainer make the container "
            "(--image, --workdir)",
        )
    _, destination, inner, source = max(found)
    return destination, inner, source


@contextlib.contextmanager
def _scratch_container(spec: DetachedSpec, client, engine: Engine, store: JobStore):
    """A container made for the job mounts --workdir at /workspace: one created (never started)
    the same way shows its files, and is removed at once. A read cut off (a lost link, a killed
    process) leaves it behind, never started, so never auto-removed: its labels say it is this
    store's scratch container, which the next read (once it is old) or a prune removes. A prune
    waits for the containers lock, held here, so it never removes one being read through."""
    import docker
    from docker.types import Mount

    ensure_image(spec.options.image, client)
    with store.containers_lock(shared=True):
        remove_stale_scratch(client, store)
        labels = {
            LABEL: "1",
            LABEL_SCRATCH: str(int(time.time())),
            LABEL_JOBS_DIR: str(store.jobs_dir),
            LABEL_STORE: store.store_id(),
        }
        try:
            # a bind mount of a directory that is not there is refused (-v would create it, empty)
            scratch = client.containers.create(
                spec.options.image, ["true"], name=f"jt-read-{secrets.token_hex(6)}", labels=labels,
                mounts=[Mount(WORKSPACE, spec.workdir, type="bind", read_only=True)],
            )  # fmt: skip
        except docker.errors.APIError as exc:
            raise no_workdir(spec.workdir, engine, exc) or exc
        try:
            yield scratch
        finally:
            with contextlib.suppress(*engine_errors()):
                scratch.remove(force=True)


def _check_directories(container, root: str, path: str, where: str, root_words: str) -> None:
    """The directories on the way from `root` to the script, as they are: the engine follows a link
    inside the container's own files (the image's /etc, not the host's), so none is followed."""
    top = _stat(container, root)
    if top is None or not int(top.get("mode") or 0) & _DIRECTORY:
        raise InvalidOption(
            f"cannot read the script {where}: {root_words} is not a directory",
            "give as --workdir the directory the script lies in",
        )
    parts = posixpath.relpath(path, root).split("/")
    for depth in range(1, len(parts)):
        on_the_way = "/".join(parts[:depth])
        found = _stat(container, posixpath.join(root, on_the_way))
        mode = int((found or {}).get("mode") or 0)
        if found is None:
            raise InvalidOption(f"cannot read the script {where}: there is no such file", _CHECK_PATH)
        if mode & _SYMLINK:
            raise InvalidOption(
                f"cannot run {where}: {on_the_way} in its path is a link, and links are not followed on the "
                "remote host",
                "give the path of the file itself, with no link in it",
            )
        if not mode & _DIRECTORY:
            raise InvalidOption(f"cannot read the script {where}: {on_the_way} is not a directory", _CHECK_PATH)


def _stat(container, path: str) -> dict | None:
    """The engine's stat of `path` in the container, links not followed; None when nothing is there.
    docker-py has no call for it: it is the HEAD of the archive endpoint get_archive uses."""
    import docker
    import requests

    api = container.client.api
    response = api.head(api._url("/containers/{0}/archive", container.id), params={"path": path})
    if response.status_code == 404:
        return None
    try:
        response.raise_for_status()
    except requests.exceptions.HTTPError as exc:
        docker.errors.create_api_error_from_http_exception(exc)  # raises docker-py's APIError
    return json.loads(base64.b64decode(response.headers.get("X-Docker-Container-Path-Stat") or "e30="))


def _read(container, path: str, where: str) -> bytes:
    import docker

    try:
        stream, stat = container.get_archive(path)
    except docker.errors.NotFound:
        raise InvalidOption(f"cannot read the script {where}: there is no such file", _CHECK_PATH) from None
    mode = int(stat.get("mode") or 0)
    if mode & _SYMLINK:  # its target, as the engine names it, is a path of the container's, not the host's
        raise InvalidOption(
            f"cannot run {where}: it is a link, and links are not followed on the remote host",
            "give the path of the file itself",
        )
    if mode & _NOT_REGULAR:
        raise InvalidOption(f"cannot run {where}: it is not a regular file", "give the path of a Python script")
    if int(stat.get("size") or 0) > MAX_SCRIPT_BYTES:
        raise InvalidOption(
            f"cannot run {where}: it is larger than {MAX_SCRIPT_BYTES >> 20} MiB", "give the path of a Python script"
        )
    archive = bytearray()
    for chunk in stream:  # a tar of the one file: its header, the file and padding
        archive += chunk
        if len(archive) > MAX_SCRIPT_BYTES + (64 << 10):
            break
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(archive))) as tar:
            member = tar.next()
            if member is not None and member.isreg():
                return tar.extractfile(member).read(MAX_SCRIPT_BYTES + 1)
    except tarfile.TarError:
        pass
    raise InvalidOption(f"cannot run {where}: it is not a regular file", "give the path of a Python script")
