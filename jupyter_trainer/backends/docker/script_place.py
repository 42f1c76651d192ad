"""Where a script run in place (the line forms) is, seen from the job's container: inside the
working directory a container we create mounts at /workspace, inside a directory an existing
container mounts, or on a remote host inside the --sync directory copied to its workdir. Its real
file (links resolved) must lie there; the job runs it under the name it was given (a link keeps
its own, as `python3 train.py` has it), with the real file's directory as `sys.path[0]`. A remote
host that has no copy of it is sent the script alone (as a cell is), run as if it lay in its
workdir; the submission says that its folder was not sent. One whose path names a file in the
remote --workdir too is refused: which of the two is meant cannot be told. A script that lies on the remote host
only, in its --workdir, is where that directory is mounted (remote_script)."""

from __future__ import annotations

import posixpath

from ...errors import InvalidOption
from ...spec.in_place import inside, named_inside
from ...spec.job_spec import DetachedSpec
from ..base import ScriptPlace
from .containers import working_dir
from .hosts import Engine
from .remote_script import path_in_container
from .runtime import WORKSPACE


def check_reachable(spec: DetachedSpec, engine: Engine) -> None:
    """Before anything is made: the script lies where a container made for the job will see it
    (one named with --container is looked at when it is found)."""
    if spec.script_path and not engine.remote and not spec.options.container:
        script_in_container(spec, engine, None)


def sent_alone(spec: DetachedSpec, engine: Engine) -> bool:
    """Whether the job's host has no copy of the script run in place, which is sent alone."""
    if not spec.script_path or not engine.remote or spec.script_on_host:
        return False
    return not spec.options.sync or inside(spec.script_path, spec.options.sync) is None


def sent_alone_fact(spec: DetachedSpec, engine: Engine) -> str:
    name = posixpath.basename(spec.script_path)
    over = f"--workdir {spec.workdir} there" if spec.workdir else "the job's working directory there"
    return (
        f"only {name} was sent to {engine.label}, not its folder (it is in no --sync directory): "
        f"pass --sync DIR to send the modules and files beside it (they are copied over those of {over})"
    )


def in_both_places(spec: DetachedSpec, engine: Engine) -> InvalidOption:
    """A script of this machine, sent alone, whose path names a file in the remote --workdir too
    (a clone there): which one is meant cannot be told, and the wrong one trains unnoticed."""
    there = spec.also_on_host
    pick_there = (
        f"give its path there ({there}) to run the one on {engine.label}"
        if there != spec.script_path
        else f"move this machine's copy away to run the one on {engine.label}"
    )
    return InvalidOption(
        f"{posixpath.basename(there)} is both a file of this machine ({spec.script_path}) and one in "
        f"--workdir {spec.workdir} on {engine.label}, so which one to run is unclear",
        f"{pick_there}, or pass --sync DIR to send this machine's folder (copied over the files of --workdir there)",
    )


def script_in_container(spec: DetachedSpec, engine: Engine, container) -> ScriptPlace | None:
    """Where the job's container sees the script (`container`: None for one not made yet), None
    when it is sent alone, or one line saying why the container cannot see it."""
    if not spec.script_path:
        return None
    if spec.script_on_host:  # a path of the remote host, in its --workdir
        return ScriptPlace(path_in_container(spec, container))
    if engine.remote:
        if sent_alone(spec, engine):
            return None
        # --sync copies into the container's working directory (ours, when not made yet)
        synced_to = WORKSPACE if container is None else working_dir(container)
        return _seen_at(synced_to, spec.script_path, spec.options.sync)
    if container is None:  # the one made for the job mounts --workdir at /workspace
        if inside(spec.script_path, spec.workdir) is None:
            raise InvalidOption(
                f"{spec.script_path} is not inside --workdir {spec.workdir}, the only directory the container sees",
                "give a script inside it, or a --workdir that holds the script",
            )
        return _seen_at(WORKSPACE, spec.script_path, spec.workdir)
    # the deepest of its mounts that holds the script (ours mount --workdir at /workspace)
    found = [
        (len(mount["Source"]), mount["Destination"], mount["Source"])
        for mount in container.attrs.get("Mounts") or []
        if mount.get("Source") and mount.get("Destination") and inside(spec.script_path, mount["Source"]) is not None
    ]
    if found:
        _, destination, source = max(found)
        return _seen_at(destination, spec.script_path, source)
    raise InvalidOption(
        f"container {container.name!r} mounts no directory that holds {spec.script_path}",
        "give a script inside a directory it mounts, or let jupyter_trainer make the container (--image, --workdir)",
    )


def _seen_at(destination: str, path: str, directory: str) -> ScriptPlace:
    """The script at `path`, inside `directory`, as a job sees it where that directory is at
    `destination`: by its name, and its real file's directory (a link to a path of this machine
    cannot be followed there)."""
    real = posixpath.join(destination, inside(path, directory))
    return ScriptPlace(posixpath.join(destination, named_inside(path, directory)), posixpath.dirname(real))
