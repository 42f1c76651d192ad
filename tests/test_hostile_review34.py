"""A Docker engine that stops answering mid-way, a full store, and a comparison of hundreds of jobs."""

import contextlib
import os
import signal
import subprocess
import sys

import pytest
from conftest import wait_for

from jupyter_trainer.job import Job
from jupyter_trainer.jobs import Status


def cli(*args, timeout=60, **options):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer.cli", *args], capture_output=True, text=True, timeout=timeout, **options)


# -- a full store ---------------------------------------------------------------------------------


@pytest.fixture
def small_store(tmp_path, monkeypatch):
    """$JUPYTER_TRAINER_HOME on a 1 MB tmpfs of its own (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(mount / "home"))
    try:
        yield mount
    finally:
        for pid in _processes_under(mount):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _processes_under(path):
    """Pids of the processes whose command line names `path` (the jobs this test started there)."""
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


def _fill(mount):
    """Leave no room on the mount."""
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\1" * 4096)
    finally:
        os.close(fd)


def test_a_stop_on_a_full_store_still_stops_the_job(small_store, tmp_path):
    """The store's disk is full (another job's log, say): the job the user stops to free it must
    stop. `stop` refused in one line, "cannot write the job store", and left the job running, as
    it could not write `stop_requested` into the record before sending the stop."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "long.py").write_text("import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(1)\n")
    assert cli("submit", "long.py", "--host", "--name", "long", cwd=workdir).returncode == 0
    run_dir = small_store / "home" / "jobs" / "long" / "1"
    wait_for(lambda: "up" in Job.load("long").logs(), what="the job to run")
    _fill(small_store)
    stopped = cli("stop", "long")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert _processes_under(run_dir) == []
    (small_store / "filler").unlink()
    shown = cli("status", "long")
    assert "stopped" in shown.stdout.split("reason")[0], shown.stdout
    assert Job.load("long").record.status is Status.STOPPED  # recorded once there is room again
