"""What counts as a credential, so that no secret leaves the laptop with --sync: the files and
directories where common tools keep their tokens and keys, by name, and the home directory's own.

Pure logic: names and a few stats, nothing else.
"""

from __future__ import annotations

import os

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
    "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk", ".env",
)  # fmt: skip
# private keys (and key stores) by their usual endings, wherever they lie
CREDENTIAL_ENDINGS = (".pem", ".key", ".p12", ".pfx", ".keystore", ".jks")


_BY_LAST_SEGMENT: dict[str, list[list[str]]] = {}
for _suffix in (*CREDENTIAL_DIRS, *CREDENTIAL_FILES):
    _BY_LAST_SEGMENT.setdefault(_suffix.rsplit("/", 1)[-1].lower(), []).append(_suffix.lower().split("/"))


def is_credential(relative: str) -> bool:
    """Whether a path is a well-known credential file or directory: by its last segments, without
    regard to case (`.Netrc` on a case-insensitive disk is `.netrc`). `relative` is taken from the
    home directory where the synced directory lies in it (so `~/.config`'s `gh` is `.config/gh`).
    What lies in such a directory is never looked at: the walk does not enter it."""
    segments = relative.lower().split("/")
    if segments[-1].endswith(CREDENTIAL_ENDINGS):
        return True
    return any(segments[-len(wanted) :] == wanted for wanted in _BY_LAST_SEGMENT.get(segments[-1], ()))


def home_prefix(local_dir: str) -> str:
    """Where the synced directory lies in the home directory ("" outside it), ending with `/`."""
    home, real = os.path.realpath(os.path.expanduser("~")), os.path.realpath(local_dir)
    if not real.startswith(home.rstrip("/") + "/"):
        return ""
    return real[len(home.rstrip("/")) + 1 :] + "/"


def credential_holding(local_dir: str) -> str | None:
    """The credential directory the synced directory is, or lies in (`~/.aws`, `~/.ssh/keys`,
    `~/.local/share/jupyter/runtime`), as a path from home; None when it is none."""
    inside = home_prefix(local_dir).rstrip("/")
    if not inside:
        return None
    segments = inside.split("/")
    return next(
        ("/".join(segments[:end]) for end in range(1, len(segments) + 1) if is_credential("/".join(segments[:end]))),
        None,
    )


def credential_inodes() -> set[tuple[int, int]]:
    """The (device, inode) of the credential files in the home directory, so that a hard link to
    one (a `credentials` beside the code) is known for what it is."""
    home = os.path.expanduser("~")
    found = set()
    for suffix in (*CREDENTIAL_FILES, *CREDENTIAL_DIRS):
        path = os.path.join(home, suffix)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                for entry in list(os.scandir(path))[:1000]:
                    info = entry.stat(follow_symlinks=False)
                    found.add((info.st_dev, info.st_ino))
            elif os.path.isfile(path):
                info = os.stat(path, follow_symlinks=False)
                found.add((info.st_dev, info.st_ino))
        except OSError:
            continue
    return found
