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

from ...core.files import read_small
from ...errors import InvalidOption, TrainerError
from ...logs.reading import clean_line
from ...spec import ignore_patterns
from ...spec.credentials import credential_inodes, home_prefix, is_credential

IGNORE_FILE = ".trainerignore"
MAX_IGNORE_FILE_BYTES = 1 << 20
SHOWN_LEFT_OUT = 8  # credential paths named in the job's facts; the rest are counted

TAR_MEMBERS_KEPT = 1000  # tarfile keeps every member it wrote: a million files must not fill memory


@dataclass
class SyncPlan:
    """What --sync leaves out of a directory, decided path by path as the directory is walked."""

    local_dir: str
    left_out_dirs: set = field(default_factory=set)  # absolute paths never copied (the job store)
    prefix: str = ""  # where local_dir lies in the home directory (see home_prefix)
    secret_inodes: set = field(default_factory=set)  # the home's credential files (see credential_inodes)
    secret_inode_numbers: set = field(init=False, default_factory=set)  # their inodes alone: one look a file
    rules: ignore_patterns.IgnoreRules = field(default_factory=lambda: ignore_patterns.IgnoreRules([]))
    credentials: list = field(default_factory=list)  # what was left out as a credential, relative

    @classmethod
    def of(cls, local_dir: str, store_home: Path) -> "SyncPlan":
        plan = cls(local_dir, {os.path.realpath(store_home)}, home_prefix(local_dir), credential_inodes())
        ignore_file = os.path.join(local_dir, IGNORE_FILE)
        if os.path.lexists(ignore_file):
            try:
                # a regular file only (not a FIFO, not a link to somewhere else), bounded
                raw = read_small(Path(ignore_file), MAX_IGNORE_FILE_BYTES + 1)
            except OSError as exc:
                raise InvalidOption(
                    f"--sync cannot read {ignore_file} ({exc.strerror or exc})",
                    f"make {IGNORE_FILE} a readable text file, or remove it",
                ) from None
            if len(raw) > MAX_IGNORE_FILE_BYTES:  # never cut silently: what is past the cut would be sent
                raise InvalidOption(
                    f"--sync cannot use {ignore_file}: it is larger than {MAX_IGNORE_FILE_BYTES >> 20} MiB",
                    "keep it to patterns, one a line",
                )
            try:
                plan.rules = ignore_patterns.IgnoreRules(ignore_patterns.parse(raw.decode("utf-8", "replace")))
            except ValueError as exc:  # too long to be a list written by hand: never cut silently
                raise InvalidOption(
                    f"--sync cannot use {ignore_file}: {exc}", "keep it to patterns, one a line"
                ) from None
        return plan

    def leaves_out(self, relative: str, entry: os.DirEntry, is_dir: bool) -> str | None:
        """Why the path is left out ("credential", "store", "ignored"), or None to copy it."""
        absolute = entry.path
        if is_credential(self.prefix + relative) or (not is_dir and self._is_a_link_to_a_secret(entry)):
            self.credentials.append(relative)
            return "credential"
        if is_dir and os.path.realpath(absolute) in self.left_out_dirs:
            return "store"
        return "ignored" if self.rules.ignored(relative) else None

    def __post_init__(self):
        self.secret_inode_numbers = {inode for _, inode in self.secret_inodes}

    def _is_a_link_to_a_secret(self, entry: os.DirEntry) -> bool:
        if entry.inode() not in self.secret_inode_numbers:
            return False  # inode() costs no system call: most files end here
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) in self.secret_inodes

    def facts(self) -> list[str]:
        """The credential paths that were left out, for the job's facts (names, never contents)."""
        # a file's name is the user's, anything but `/` and NUL: shown without escapes or line breaks
        shown = ", ".join(
            clean_line(path.replace("\n", "?"))[:200] for path in sorted(self.credentials)[:SHOWN_LEFT_OUT]
        )
        more = len(self.credentials) - SHOWN_LEFT_OUT
        return (
            [f"--sync left out credentials: {shown}" + (f" and {more} more" if more > 0 else "")]
            if self.credentials
            else []
        )


def walk(plan: SyncPlan):
    """(absolute, relative) of every path to copy, parents before what they hold. A directory that
    is left out is not entered, unless a `!` line could take back something in it."""
    stack = [(plan.local_dir, "")]
    while stack:
        directory, relative_dir = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as exc:
            raise InvalidOption(
                f"--sync cannot read {directory} ({exc.strerror or exc})",
                "make it readable, or list it in " + IGNORE_FILE,
            ) from None
        subdirectories = []
        for entry in entries:
            relative = f"{relative_dir}{entry.name}"
            is_dir = entry.is_dir(follow_symlinks=False)
            why = plan.leaves_out(relative, entry, is_dir)
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
                    if len(tar.members) > TAR_MEMBERS_KEPT:
                        del tar.members[:]  # kept only for reading the archive back, which we never do
        except OSError as exc:
            raise InvalidOption(f"--sync cannot read {exc.filename or local_dir} ({exc.strerror or exc})") from None
        archive.seek(0)
        if not container.put_archive(inner_dir, archive):
            raise TrainerError(f"Docker did not take the files of --sync {local_dir} into {inner_dir}")
    return plan.facts()
