"""What produced a run: the git commit of the repository its working directory lies in, whether that
tree had uncommitted changes, and the uncommitted diff itself, kept with the run.

The diff is kept up to DIFF_LIMIT bytes (in the run's GIT_DIFF_FILE); a longer one is cut there,
and the record says so and how long it was (as far as git told within GIT_SECONDS): never left out
silently. Files git does not track are counted, not kept.

git runs with an argument list, never a shell, bounded in time and output, and told to run nothing
of the repository's own (no fsmonitor, no hooks, no external diff or text conversion): a repository
is the user's, but a clone may come from anyone.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ..core.store import GIT_DIFF_FILE

GIT_SECONDS = 5.0
DIFF_LIMIT = 1 << 20  # bytes of the uncommitted diff kept with the run
STATUS_LIMIT = 1 << 20
_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat", "-c", "diff.external=")


def git_state(directory: str | None) -> tuple[dict | None, bytes]:
    """(`{"commit", "dirty", "untracked", "diff": {"kept", "bytes", "whole"}}`, the diff kept), or
    (None, b"") outside a repository (or without git)."""
    git = shutil.which("git")
    if not directory or git is None or not os.path.isdir(directory):
        return None, b""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    code, head, _ = _bounded([git, *_SAFE, "-C", directory, "rev-parse", "--verify", "-q", "HEAD"], env, 4096)
    commit = head.decode("ascii", "replace").strip()
    if code != 0 or not commit or len(commit) not in (40, 64) or not all(c in "0123456789abcdef" for c in commit):
        return None, b""
    code, status, whole_status = _bounded([git, *_SAFE, "-C", directory, "status", "--porcelain", "-z", "--untracked-files=normal"], env, STATUS_LIMIT)
    entries = [entry for entry in status.split(b"\0") if entry] if code == 0 else []
    untracked = sum(entry.startswith(b"?? ") for entry in entries)
    code, diff, whole = _bounded([git, *_SAFE, "-C", directory, "diff", "HEAD", "--no-color", "--no-ext-diff", "--no-textconv", "--binary"], env, DIFF_LIMIT, count=True)
    total = whole if isinstance(whole, int) else None
    dirty = bool(entries) or bool(diff) or code != 0 or not whole_status
    state = {
        "commit": commit, "dirty": dirty, "untracked": untracked,
        "diff": {"kept": len(diff), "bytes": total, "whole": total is not None and total == len(diff)},
    }  # fmt: skip
    return state, diff


def local_directory(spec) -> str | None:
    """The directory of this machine a detached job's working directory is (or is sent from), if any."""
    from ..spec.job_spec import DetachedSpec

    if not isinstance(spec, DetachedSpec):
        return None
    sent = spec.options.sent_directory()
    if sent:
        return sent
    return spec.workdir if spec.options.job_machine() is None else None


def keep_diff(run_dir: Path, diff: bytes) -> None:
    from ..core.files import write_private_file

    if diff:
        write_private_file(run_dir / GIT_DIFF_FILE, diff, durable=False)


def _bounded(argv: list[str], env: dict, limit: int, count: bool = False) -> tuple[int | None, bytes, int | bool]:
    """(exit code or None, at most `limit` bytes of its output, and: with `count`, every byte it wrote
    (None if it was cut off in time), else whether the output was whole)."""
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError:
        return None, b"", False
    deadline = time.monotonic() + GIT_SECONDS
    kept, seen, timed_out = bytearray(), 0, False
    with process.stdout, selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                timed_out = True
                break
            chunk = os.read(process.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            seen += len(chunk)
            if len(kept) < limit:
                kept += chunk[: limit - len(kept)]
            elif not count:
                break
    if process.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
    code = process.wait()
    if count:
        return (None if timed_out else code), bytes(kept), (None if timed_out else seen)
    return (None if timed_out else code), bytes(kept), not timed_out and seen <= limit
