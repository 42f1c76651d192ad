"""The idle poller against hostile jobs and unlucky users: real files, real inotify, real processes."""

import os
import time
from contextlib import contextmanager
from pathlib import Path

import comm
import pytest
from comm.base_comm import BaseComm
from conftest import wait_for

from jupyter_trainer._changes import ChangeWaiter
from jupyter_trainer.job import get_job
from jupyter_trainer.proc import SHARED_SCAN_SECONDS
from jupyter_trainer.spec import DetachedSpec, build_spec
from jupyter_trainer.submit import submit_detached
from jupyter_trainer.widget import WATCH_CHECK_SECONDS, JobWidget

MIB = 1 << 20


class QuietComm(BaseComm):
    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        pass


@pytest.fixture(autouse=True)
def quiet_widgets(monkeypatch):
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: QuietComm(*a, **k))


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def fake_job(store, backends, name="w", metrics=()):
    spec = DetachedSpec(script="x", backend="fake", workdir=os.getcwd(), metrics=tuple(metrics))
    return submit_detached(spec, name=name, store=store, backends=backends).job


def host_job(name, script, workdir):
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    return submit_detached(spec, name=name).job


def append(path, text):
    with open(path, "a") as handle:
        handle.write(text)


@contextmanager
def sysctl(name, value):
    """An inotify limit lowered for a moment (root only), then set back as it was."""
    path = Path("/proc/sys/fs/inotify") / name
    if os.geteuid() != 0:
        pytest.skip("changing an inotify limit needs root")
    before = path.read_text()
    path.write_text(str(value))
    try:
        yield
    finally:
        path.write_text(before)


# -- the watch --------------------------------------------------------------------------------


def test_changes_lost_to_a_full_queue_are_told_as_changes_of_everything_watched(tmp_path):
    """A job that writes many files of its directory fills the inotify queue: the kernel then drops
    events, among them the log's last line and the exit code's file."""
    run, other = tmp_path / "run", tmp_path / "other"
    run.mkdir()
    other.mkdir()
    log = run / "output.log"
    log.write_text("")
    with sysctl("max_queued_events", 16):  # an instance's queue is sized when it is made
        waiter = ChangeWaiter()
    try:
        assert waiter.watch({str(run), str(log), str(other)}) == {str(run), str(log), str(other)}
        for index in range(100):  # each a new name: the kernel merges none of them
            (other / f"checkpoint-{index}").write_text("x")
        append(log, "the last line\n")
        (run / "exit_code").write_text("0")
        changed = waiter.wait(1.0)
        assert "output.log" in changed.get(str(run), set())
        view_names = changed.get(str(run), set())
        assert any(name not in ("output.log", "metrics.json") and not name.startswith(".") for name in view_names)
    finally:
        waiter.close()


def test_a_line_read_just_before_its_change_is_told_leaves_the_watch_trusted(store, fake_backend, backends):
    """A job that prints at the very moment its view reads the log (a status check, a check of the
    watch): the read finds the line before the change is told, and the tick after tells it."""
    job = fake_job(store, backends)
    log = job.run_dir / "output.log"
    append(log, "first\n")
    view = JobWidget(job, clock=Clock())
    waiter = ChangeWaiter()
    try:
        assert str(log) in waiter.watch({str(job.run_dir), str(log)})
        view.in_watch = True
        view.poll(now=1.0)
        waiter.wait(0)
        assert view.watched
        append(log, "printed as the status is checked\n")
        view.poll(now=1.0 + WATCH_CHECK_SECONDS)  # reads it: nothing was told yet
        changed = waiter.wait(1.0)  # the next tick: the change is told
        view.files_changed(changed[str(job.run_dir)])
        view.poll(now=1.5 + WATCH_CHECK_SECONDS)
        assert view.watched  # else polled four times a second until the job prints again
    finally:
        waiter.close()


# -- what the job uses --------------------------------------------------------------------------

FORKER = """
import os, signal, sys, time
from pathlib import Path
block = bytearray(200 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("held", flush=True)
while not Path("fork").exists():
    time.sleep(0.05)
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(1)
    children.append(pid)
print("forked", flush=True)
while not Path("reap").exists():
    time.sleep(0.05)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print("reaped", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("looked_before_the_fork", [True, False])
def test_memory_after_the_job_forks_and_its_children_exit_is_what_they_share_now(home, workdir, looked_before_the_fork):
    """Between two reads of a process's PSS its memory moves with its resident set: a fork
    shares the parent's pages with its children (its PSS falls, its resident set does not), and
    their exit gives them back. 200 MiB held, whatever the processes that share it."""

    def memory():
        time.sleep(SHARED_SCAN_SECONDS)  # a pass over /proc serves the looks this close to it
        return get_job("forker").usage(interval=0).memory_bytes

    job = host_job("forker", FORKER, workdir)
    try:
        wait_for(lambda: "held" in job.logs(), timeout=60, what="the job to hold its memory")
        if looked_before_the_fork:
            assert 200 * MIB <= memory() < 260 * MIB
        (workdir / "fork").write_text("")
        wait_for(lambda: "forked" in job.logs(), timeout=30, what="the children")
        assert 200 * MIB <= memory() < 260 * MIB  # four processes sharing it: counted once
        (workdir / "reap").write_text("")
        wait_for(lambda: "reaped" in job.logs(), timeout=30, what="the children to exit")
        assert 200 * MIB <= memory() < 260 * MIB  # the parent's pages are all its own again
    finally:
        job.stop()
