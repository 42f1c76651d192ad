"""--sync: a local directory copied into a job's workdir on a remote Docker host, through the engine.

No secret leaves the laptop with it: a home directory (or one that holds it) is refused when the
option is read (`checks.parse_sync`), and wherever they lie in the synced directory the job store
and well-known credential files are left out, and named in the job's facts. The directory's own
`.trainerignore` (the `.dockerignore` convention) leaves out whatever else the user lists: data,
checkpoints, a virtualenv.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import ignore_patterns
from .._fs import read_small
from ..errors import InvalidOption, TrainerError
from ..logs import clean_line

IGNORE_FILE = ".trainerignore"
MAX_IGNORE_FILE_BYTES = 1 << 20
SHOWN_LEFT_OUT = 8  # credential paths named in the job's facts; the rest are counted

# Credentials of common tools, left out wherever they lie in the synced directory: matched by a
# path's last segments, so `.ssh` is left out at any depth and `.config/gh` below any directory.
CREDENTIAL_DIRS = (
    ".ssh", ".aws", ".docker", ".gnupg", ".kube", ".azure", ".password-store", ".kaggle", ".oci",
    ".config/gcloud", ".config/gh", ".config/hub", ".terraform.d", ".huggingface",
    ".cache/huggingface/token", ".local/share/jupyter/runtime", "Library/Jupyter/runtime",
)  # fmt: skip
CREDENTIAL_FILES = (
    ".netrc", "_netrc", ".git-credentials", ".config/git/credentials", ".pypirc", ".npmrc", ".pgpass",
    ".my.cnf", ".s3cfg", ".boto", ".vault-token", ".databrickscfg", ".docker/config.json",
    "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk",
)  # fmt: skip


_BY_LAST_SEGMENT: dict[str, list[list[str]]] = {}
for _suffix in (*CREDENTIAL_DIRS, *CREDENTIAL_FILES):
    _BY_LAST_SEGMENT.setdefault(_suffix.rsplit("/", 1)[-1], []).append(_suffix.split("/"))


def is_credential(relative: str) -> bool:
    """Whether a path (relative to the synced directory) is a well-known credential file or
    directory. (What lies in such a directory is never looked at: the walk does not enter it.)"""
    segments = relative.split("/")
    return any(segments[-len(wanted) :] == wanted for wanted in _BY_LAST_SEGMENT.get(segments[-1], ()))


@dataclass
class SyncPlan:
    """What --sync leaves out of a directory, decided path by path as the directory is walked."""

    local_dir: str
    left_out_dirs: set = field(default_factory=set)  # absolute paths never copied (the job store)
    rules: ignore_patterns.IgnoreRules = field(default_factory=lambda: ignore_patterns.IgnoreRules([]))
    credentials: list = field(default_factory=list)  # what was left out as a credential, relative

    @classmethod
    def of(cls, local_dir: str, store_home: Path) -> "SyncPlan":
        plan = cls(local_dir, {os.path.realpath(store_home)})
        ignore_file = os.path.join(local_dir, IGNORE_FILE)
        if os.path.lexists(ignore_file):
            try:
                # a regular file only (not a FIFO, not a link to somewhere else), bounded
                text = read_small(Path(ignore_file), MAX_IGNORE_FILE_BYTES).decode("utf-8", "replace")
            except OSError as exc:
                raise InvalidOption(f"--sync cannot read {ignore_file} ({exc.strerror or exc})", f"make {IGNORE_FILE} a readable text file, or remove it") from None
            plan.rules = ignore_patterns.IgnoreRules(ignore_patterns.parse(text))
        return plan

    def leaves_out(self, relative: str, absolute: str, is_dir: bool) -> str | None:
        """Why the path is left out ("credential", "store", "ignored"), or None to copy it."""
        if is_credential(relative):
            self.credentials.append(relative)
            return "credential"
        if is_dir and os.path.realpath(absolute) in self.left_out_dirs:
            return "store"
        return "ignored" if self.rules.ignored(relative) else None

    def facts(self) -> list[str]:
        """The credential paths that were left out, for the job's facts (names, never contents)."""
        # a file's name is the user's, anything but `/` and NUL: shown without escapes or line breaks
        shown = ", ".join(clean_line(path.replace("\n", "?"))[:200] for path in sorted(self.credentials)[:SHOWN_LEFT_OUT])
        more = len(self.credentials) - SHOWN_LEFT_OUT
        return [f"--sync left out credentials: {shown}" + (f" and {more} more" if more > 0 else "")] if self.credentials else []


def walk(plan: SyncPlan):
    """(absolute, relative) of every path to copy, parents before what they hold. A directory that
    is left out is not entered, unless a `!` line could take back something in it."""
    stack = [(plan.local_dir, "")]
    while stack:
        directory, relative_dir = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as exc:
            raise InvalidOption(f"--sync cannot read {directory} ({exc.strerror or exc})", "make it readable, or list it in " + IGNORE_FILE) from None
        subdirectories = []
        for entry in entries:
            relative = f"{relative_dir}{entry.name}"
            is_dir = entry.is_dir(follow_symlinks=False)
            why = plan.leaves_out(relative, entry.path, is_dir)
            if why:
                if why == "ignored" and is_dir and plan.rules.has_exceptions:
                    subdirectories.append((entry.path, relative + "/"))  # for what a `!` line takes back
                continue
            yield entry.path, relative
            if is_dir:
                subdirectories.append((entry.path, relative + "/"))
        stack.extend(reversed(subdirectories))


def sync_directory(container, local_dir: str, inner_dir: str, store_home: Path) -> list[str]:
    """Copy a local directory's contents into the container's `inner_dir` through the engine (the
    archive API: nothing needed on the host but its engine). Links are copied as links; the archive
    is spooled to a temporary file, so a large directory is never held in memory. Returns the
    credential paths that were left out, as the job's facts name them."""
    plan = SyncPlan.of(local_dir, store_home)

    def portable(member: tarfile.TarInfo) -> tarfile.TarInfo:
        member.uname = member.gname = ""  # this machine's owner names mean nothing there
        return member

    with tempfile.TemporaryFile() as archive:
        try:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                tar.add(local_dir, arcname=".", recursive=False, filter=portable)
                for absolute, relative in walk(plan):
                    tar.add(absolute, arcname=relative, recursive=False, filter=portable)
        except OSError as exc:
            raise InvalidOption(f"--sync cannot read {exc.filename or local_dir} ({exc.strerror or exc})") from None
        archive.seek(0)
        if not container.put_archive(inner_dir, archive):
            raise TrainerError(f"Docker did not take the files of --sync {local_dir} into {inner_dir}")
    return plan.facts()
