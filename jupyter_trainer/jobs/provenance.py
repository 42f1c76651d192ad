"""What produced a run: the git commit of the repository its working directory lies in, whether that
tree had uncommitted changes, and the uncommitted diff itself, kept with the run.

The diff is kept up to DIFF_LIMIT bytes (in the run's GIT_DIFF_FILE); a longer one is cut there,
and the record says so and how long it was (as far as git told within GIT_SECONDS): never left out
silently. A changed file bigger than BIG_FILE (a dataset or a checkpoint in the tree) is named with
its size in the record (`left_out`), not diffed: git would read all of it, and the code's changes
would be lost behind it. Files git does not track are counted, not kept.

git runs with an argument list, never a shell, bounded in time and output, and told to run nothing
of the repository's own (no fsmonitor, no hooks, no external diff, text conversion or filter
driver, nothing in submodules): a repository is the user's, but a clone may come from anyone, and
a container job's code must not run outside its container through it.
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
BIG_FILE = DIFF_LIMIT  # a changed file past this many bytes is named, not diffed
LEFT_OUT_NAMED = 100  # big files named in the record; more are counted
STATUS_LIMIT = 1 << 20
CONFIG_LIMIT = 1 << 16
_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat", "-c", "diff.external=")


def git_state(directory: str | None) -> tuple[dict | None, bytes]:
    """(`{"commit", "dirty", "untracked", "diff": {"kept", "bytes", "whole"[, "left_out", "left_out_more"]}}`,
    the diff kept), or (None, b"") outside a repository (or without git)."""
    git = shutil.which("git")
    if not directory or git is None or not os.path.isdir(directory):
        return None, b""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    code, head, _ = _bounded([git, *_SAFE, "-C", directory, "rev-parse", "--verify", "-q", "HEAD"], env, 4096)
    commit = head.decode("ascii", "replace").strip()
    if code != 0 or not commit or len(commit) not in (40, 64) or not all(c in "0123456789abcdef" for c in commit):
        return None, b""
    safe = [git, *_SAFE, *_no_filters(git, directory, env), "-C", directory]
    code, status, whole_status = _bounded(
        [*safe, "status", "--porcelain", "-z", "--untracked-files=normal", "--ignore-submodules=dirty"],
        env,
        STATUS_LIMIT,
    )
    entries = [entry for entry in status.split(b"\0") if entry] if code == 0 else []
    untracked = sum(entry.startswith(b"?? ") for entry in entries)
    big = _big_files(safe, env, entries)
    excluded = [b":(top,exclude,literal)" + path for path, _size in big[:LEFT_OUT_NAMED]]
    pathspec = [b"--", b":(top)", *excluded] if excluded else []
    diff_argv = [
        *safe,
        "diff",
        "HEAD",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--binary",
        "--ignore-submodules=dirty",
        *pathspec,
    ]
    code, diff, whole = _bounded(diff_argv, env, DIFF_LIMIT, count=True)
    total = whole if isinstance(whole, int) else None
    dirty = bool(entries) or bool(diff) or code != 0 or not whole_status
    kept = {"kept": len(diff), "bytes": total, "whole": total is not None and total == len(diff) and not big}
    if big:  # what the diff leaves out, said: never silently
        kept["left_out"] = [
            {"path": path.decode("utf-8", "replace"), "bytes": size} for path, size in big[:LEFT_OUT_NAMED]
        ]
        if len(big) > LEFT_OUT_NAMED:
            kept["left_out_more"] = len(big) - LEFT_OUT_NAMED
    return {"commit": commit, "dirty": dirty, "untracked": untracked, "diff": kept}, diff


def _no_filters(git: str, directory: str, env: dict) -> list[str]:
    """`-c` settings that turn off every filter driver the repository's config names (a `clean` or
    `process` command runs as git reads a changed file; none of it is ours to run)."""
    code, found, _ = _bounded(
        [git, *_SAFE, "-C", directory, "config", "-z", "--get-regexp", r"^filter\."], env, CONFIG_LIMIT
    )
    drivers = set()
    for entry in found.split(b"\0") if code == 0 else []:
        key = entry.split(b"\n", 1)[0].decode("utf-8", "replace")
        if key.count(".") >= 2:
            drivers.add(key[len("filter.") : key.rindex(".")])
    settings = []
    for driver in sorted(drivers):
        for what in ("clean", "smudge", "process"):
            settings += ["-c", f"filter.{driver}.{what}="]
        settings += ["-c", f"filter.{driver}.required=false"]
    return settings


def _big_files(safe: list[str], env: dict, entries: list[bytes]) -> list[tuple[bytes, int]]:
    """The tracked files changed in the tree (`git status -z`'s entries) bigger than BIG_FILE there,
    biggest first, as (path from the repository's top, bytes)."""
    changed, source_follows = [], False
    for entry in entries:
        if source_follows:  # a rename's or a copy's entry is followed by the path it came from
            source_follows = False
            continue
        source_follows = entry[:1] in (b"R", b"C")
        if not entry.startswith(b"?? ") and len(entry) > 3:
            changed.append(entry[3:])
    if not changed:
        return []
    code, top, _ = _bounded([*safe, "rev-parse", "--show-toplevel"], env, 1 << 16)
    top = top.rstrip(b"\n")
    if code != 0 or not top:
        return []
    big = []
    for path in changed:
        with contextlib.suppress(OSError):
            size = os.lstat(os.path.join(top, path)).st_size
            if size > BIG_FILE:
                big.append((path, size))
    return sorted(big, key=lambda each: -each[1])


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


def _bounded(argv: list, env: dict, limit: int, count: bool = False) -> tuple[int | None, bytes, int | bool]:
    """(exit code or None, at most `limit` bytes of its output, and: with `count`, every byte it wrote
    (None if it was cut off in time), else whether the output was whole)."""
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
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
