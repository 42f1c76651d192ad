"""The line forms' script: an existing file, run where it is (`%train_detached SCRIPT`,
`jupyter-trainer submit SCRIPT`).

The file is read once at submission: its content is what makes the line "the same cell" (it is
in the fingerprint, and the run keeps it as submitted), and the job runs the file in place.
Where the job sees it (a container's mount, a remote host's --sync directory) is its backend's
to say.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat

from ..errors import InvalidOption

MAX_SCRIPT_BYTES = 16 << 20  # a training script is code: larger is a data file given by mistake


def script_path(given: str, workdir: str | None) -> str:
    """SCRIPT as an absolute path: relative to `workdir` (--workdir or its default) when that is a
    directory of this machine, else to the current directory (a remote host's --workdir)."""
    base = os.path.expanduser(workdir) if workdir and os.path.isdir(os.path.expanduser(workdir)) else os.getcwd()
    return os.path.normpath(os.path.join(os.path.abspath(base), os.path.expanduser(given)))


def detached_in_place(declared, given: str, flags: dict, config: dict, args, hosts):
    """The spec of `%train_detached SCRIPT` and `jupyter-trainer submit SCRIPT`: the options of
    the cell form (`declared`: a registry's `Backends.detached`), and the file's text as its script."""
    from .job_spec import detached_spec

    path = script_path(given, flags.get("workdir") or config.get("workdir"))
    try:
        text = read_script(path)
    except ScriptMissing as missing:
        # it may lie on the job's machine only (a remote host's --workdir): its backend reads it
        spec = detached_spec(declared, "#", flags, config, args, hosts)
        on_host = remote_script_path(given, spec)
        if on_host is None:
            raise _not_on_remote_host_either(missing, spec) from None
        return dataclasses.replace(spec, script="", script_path=on_host, script_on_host=True, from_cell=False)
    spec = in_place(detached_spec(declared, text, flags, config, args, hosts), path, from_cell=False)
    sent = spec.options.sent_directory()
    if not sent or inside(path, sent) is None:
        # sent alone, unless a file of that name in the remote --workdir makes it unclear which is meant
        spec = dataclasses.replace(spec, also_on_host=remote_script_path(given, spec))
    return spec


def remote_script_path(given: str, spec) -> str | None:
    """SCRIPT as a path of the remote Docker host the spec runs on, inside its --workdir (the only
    directory of it a job's container is known to see), or None when that cannot be."""
    import posixpath

    if _remote_host(spec) is None or not spec.workdir or "\0" in given:
        return None
    path = posixpath.normpath(posixpath.join(spec.workdir, given))
    return path if path.startswith(spec.workdir.rstrip("/") + "/") else None


def _remote_host(spec) -> str | None:
    """The name of the remote Docker host the spec runs on, None for any other machine."""
    return spec.options.job_machine()


def _not_on_remote_host_either(missing: "ScriptMissing", spec) -> "ScriptMissing":
    """A script of neither machine: for a remote job, where on its host it was not looked for."""
    host = _remote_host(spec)
    if host is None:
        return missing
    if not spec.workdir:
        hint = f"a script on {host} is looked for only in --workdir there: give --workdir DIR, the directory it lies in"
    else:
        hint = f"a script on {host} is looked for only inside --workdir {spec.workdir}: give its path in it"
    return ScriptMissing(missing.message, f"it is not on this machine, and {hint}")


class ScriptMissing(InvalidOption):
    """SCRIPT is not a file of this machine."""


def read_script(path: str) -> str:
    """The script's text, read once; one line when it cannot be a script to run."""
    if os.path.realpath(path).startswith(("/proc/", "/sys/", "/dev/")):  # "regular" files that are not files
        raise not_a_regular_file(path)
    try:
        # never blocks on a FIFO (its open would wait for a writer), and checks what was opened
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise not_a_regular_file(path)
            data = handle.read(MAX_SCRIPT_BYTES + 1)
    except OSError as exc:
        kind = ScriptMissing if isinstance(exc, FileNotFoundError) else InvalidOption
        raise kind(
            f"cannot read the script {path} ({exc.strerror or exc})",
            "check the path (relative to --workdir or the current directory)",
        ) from None
    return script_text(data, path)


def not_a_regular_file(path: str) -> InvalidOption:
    return InvalidOption(f"cannot run {path}: it is not a regular file", "give the path of a Python script")


def script_text(data: bytes, path: str) -> str:
    """The text of a script read as `data` (at most MAX_SCRIPT_BYTES + 1 of them), or one line
    saying why it cannot be run."""
    if len(data) > MAX_SCRIPT_BYTES:
        raise InvalidOption(
            f"cannot run {path}: it is larger than {MAX_SCRIPT_BYTES >> 20} MiB", "give the path of a Python script"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidOption(
            f"cannot run {path}: it is not UTF-8 text",
            "save it as UTF-8 (Python's default; another coding: cookie is not taken here)",
        ) from None
    if not text.strip():
        raise InvalidOption(f"the script {path} is empty", "write the training script in it")
    return text


def in_place(spec, path: str, **also):
    """The spec of a cell made to run the file at `path` instead (its text is the spec's script);
    `also`: other fields of the spec's own that say so (a DetachedSpec's `from_cell`)."""
    return dataclasses.replace(spec, script_path=path, script_sha256=sha256_of(spec.script), **also)


def sha256_of(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()


def inside(path: str, directory: str) -> str | None:
    """`path` relative to `directory` when it lies inside it (links resolved), else None."""
    real, root = os.path.realpath(path), os.path.realpath(directory)
    if real == root or not real.startswith(root.rstrip("/") + "/"):
        return None
    return os.path.relpath(real, root)


def named_inside(path: str, directory: str) -> str | None:
    """`path` relative to `directory` as it is named, links kept (`python3 train.py` runs a link
    under the link's name), when its real file lies inside the directory (see `inside`), else None.
    A link that is itself outside it (reached through a linked folder) is named by its target."""
    real = inside(path, directory)
    if real is None:
        return None
    path, root = os.path.normpath(path), os.path.realpath(directory)
    parent = os.path.realpath(os.path.dirname(path))
    if parent != root and not parent.startswith(root.rstrip("/") + "/"):
        return real
    for base in (os.path.normpath(directory), root):  # the path as written, under either name of the directory
        relative = os.path.relpath(path, base)
        if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
            return relative
    return os.path.relpath(os.path.join(parent, os.path.basename(path)), root)  # its folder by its real name
