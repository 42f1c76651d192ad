"""A job store on a small tmpfs of its own, for the tests of a store that fills up (root only)."""

import contextlib
import os
import signal
import subprocess

import pytest


@contextlib.contextmanager
def small_store(tmp_path, monkeypatch, size: str):
    """$JUPYTER_TRAINER_HOME on a tmpfs of `size` ("1m"); the jobs started there are killed and the
    tmpfs unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(mount / "home"))
    try:
        yield mount
    finally:
        end_processes_under(mount)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def processes_under(path):
    """Pids of the processes whose command line names `path` (the jobs a test started there)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                words = handle.read().split(b"\0")
        except OSError:
            continue
        if int(pid) != os.getpid() and any(os.fsencode(str(path)) in word for word in words):
            found.append(int(pid))
    return found


def end_processes_under(path):
    for pid in processes_under(path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
