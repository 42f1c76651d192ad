"""Default job names people can read: where the job came from, plus a short hash of the cell.

`sweep-notebook-3f9a1c` says which notebook (or script) started the job; the hash (of the cell
and its options, the submission's fingerprint) keeps the name stable across re-runs of the same
cell, so running it again finds the same job.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePath

HASH_CHARS = 6
LABEL_CHARS = 40
FALLBACK_LABEL = "job"

_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def default_name(label: str | None, fingerprint: str) -> str:
    """`LABEL-HASH`, a valid job name whatever the label holds ("job-HASH" if nothing of it is left)."""
    return f"{clean_label(label) or FALLBACK_LABEL}-{fingerprint[:HASH_CHARS]}"


def legacy_name(fingerprint: str) -> str:
    """The default name earlier versions gave the same cell: a job started under it is still found."""
    return f"{FALLBACK_LABEL}-{fingerprint[:10]}"


def clean_label(label: str | None) -> str:
    """The label as the start of a job name: other characters become '-', at most LABEL_CHARS."""
    if not label:
        return ""
    cleaned = _NOT_NAME_CHARS.sub("-", label)[:LABEL_CHARS]
    return cleaned.lstrip("-_.").rstrip("-_.")


def notebook_label(user_namespace: dict | None = None, environ: dict | None = None) -> str | None:
    """The file name (without suffix) of the notebook a kernel runs, when the kernel is told it:
    Jupyter Server puts its path in JPY_SESSION_NAME, VS Code in `__vsc_ipynb_file__`."""
    environ = os.environ if environ is None else environ
    candidates = [(user_namespace or {}).get("__vsc_ipynb_file__"), environ.get("JPY_SESSION_NAME")]
    for path in candidates:
        if isinstance(path, str) and path.strip():
            stem = PurePath(path.strip()).stem
            if stem:
                return stem
    return None
