"""A script run in place that lies on a remote Docker host only, in its --workdir: its text is
read through the engine (the only way this machine has to that host's files) before the job is
fingerprinted, so that the run keeps it as submitted, as it keeps a local one's."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import posixpath
import tarfile

from ...errors import InvalidOption
from ...in_place import MAX_SCRIPT_BYTES, script_text, sha256_of
from ...spec import DetachedSpec
from .containers import LABEL, ensure_image
from .errors import engine_errors
from .hosts import Engine
from .runtime import WORKSPACE

# Go's os.FileMode bits of what is not a regular file (the engine's stat of an archived path)
_NOT_REGULAR = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
_SYMLINK = 1 << 27


def with_script_read(spec: DetachedSpec, client, engine: Engine) -> DetachedSpec:
    """The spec with the text of its script on the host (spec.script_path, a path there)."""
    where = f"{spec.script_path} on {engine.label}"
    if spec.container and not spec.image:
        container = _users_container(spec, client, engine)
        data = _read(container, _path_in(container, spec.script_path, where), where)
    else:
        data = _read_through_scratch_container(spec, client, where)
    text = script_text(data, where)
    return dataclasses.replace(spec, script=text, script_sha256=sha256_of(text))


def path_in_container(spec: DetachedSpec, container) -> str:
    """Where the job's container sees the script (None: the one made for the job, not made yet)."""
    if container is None:
        return posixpath.join(WORKSPACE, posixpath.relpath(spec.script_path, spec.workdir))
    return _path_in(container, spec.script_path, spec.script_path)


def _users_container(spec: DetachedSpec, client, engine: Engine):
    import docker

    try:
        return client.containers.get(spec.container)
    except docker.errors.NotFound:
        raise InvalidOption(
            f"container {spec.container!r} does not exist on {engine.label}, so {spec.script_path} cannot be read there",
            "start it first, or give --image to let jupyter_trainer make one",
        ) from None


def _path_in(container, path: str, where: str) -> str:
    """`path` (the host's) as the container sees it, through the deepest of its mounts that holds it."""
    found = [
        (len(source), posixpath.join(mount["Destination"], posixpath.relpath(path, source)))
        for mount in container.attrs.get("Mounts") or []
        for source in [posixpath.normpath(mount.get("Source") or "/nowhere")]
        if mount.get("Destination") and (path + "/").startswith(source.rstrip("/") + "/") and path != source
    ]
    if not found:
        raise InvalidOption(
            f"container {container.name!r} mounts no directory that holds {where}",
            "give a script inside a directory it mounts, or let jupyter_trainer make the container (--image, --workdir)",
        )
    return max(found)[1]


def _read_through_scratch_container(spec: DetachedSpec, client, where: str) -> bytes:
    """A container made for the job mounts --workdir at /workspace: one created (never started)
    the same way shows the file, and is removed at once."""
    ensure_image(spec.image, client)
    scratch = client.containers.create(
        spec.image, ["true"], labels={LABEL: "1"}, volumes={spec.workdir: {"bind": WORKSPACE, "mode": "ro"}}
    )
    try:
        return _read(scratch, path_in_container(spec, None), where)
    finally:
        with contextlib.suppress(*engine_errors()):
            scratch.remove(force=True)


def _read(container, path: str, where: str) -> bytes:
    import docker

    try:
        stream, stat = container.get_archive(path)
    except docker.errors.NotFound:
        raise InvalidOption(f"cannot read the script {where}: there is no such file", "check the path (relative to --workdir, on that host)") from None
    mode = int(stat.get("mode") or 0)
    if mode & _SYMLINK:
        raise InvalidOption(f"cannot run {where}: it is a link", f"name the file it links to ({stat.get('linkTarget') or 'its target'})")
    if mode & _NOT_REGULAR:
        raise InvalidOption(f"cannot run {where}: it is not a regular file", "give the path of a Python script")
    if int(stat.get("size") or 0) > MAX_SCRIPT_BYTES:
        raise InvalidOption(f"cannot run {where}: it is larger than {MAX_SCRIPT_BYTES >> 20} MiB", "give the path of a Python script")
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
