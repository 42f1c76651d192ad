"""--sync: a local directory copied into a job's workdir on a remote Docker host, through the engine."""

from __future__ import annotations

import os
import tarfile
import tempfile
from pathlib import Path

from ..errors import InvalidOption, TrainerError


# never copied to a remote host by --sync, wherever they lie in the synced directory: credentials
PRIVATE_DIRS = ("~/.ssh", "~/.aws", "~/.docker", "~/.gnupg", "~/.kube", "~/.config/gcloud")


def sync_directory(container, local_dir: str, inner_dir: str, store_home: Path) -> None:
    """Copy a local directory's contents into the container's `inner_dir` through the engine (the
    archive API: nothing needed on the host but its engine). Links are copied as links; the archive
    is spooled to a temporary file, so a large directory is never held in memory. The job store
    (every job's scripts and logs, and its key) and the user's credentials are left out."""
    left_out = {os.path.realpath(store_home), *(os.path.realpath(os.path.expanduser(path)) for path in PRIVATE_DIRS)}

    def portable(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if os.path.realpath(os.path.join(local_dir, member.name)) in left_out:
            return None  # and, for a directory, all it holds
        member.uname = member.gname = ""  # this machine's owner names mean nothing there
        return member

    with tempfile.TemporaryFile() as archive:
        try:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                tar.add(local_dir, arcname=".", filter=portable)
        except OSError as exc:
            raise InvalidOption(f"--sync cannot read {exc.filename or local_dir} ({exc.strerror or exc})") from None
        archive.seek(0)
        if not container.put_archive(inner_dir, archive):
            raise TrainerError(f"Docker did not take the files of --sync {local_dir} into {inner_dir}")
