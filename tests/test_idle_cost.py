"""What quiet watched jobs cost the kernel, counted as work done (never timed: speed is only in
benchmarks/idle_threads.py)."""

import os
import signal
import subprocess
import sys

import pytest
from conftest import wait_for

from jupyter_trainer.core import processes as proc

SLEEPER = "import time\ntime.sleep(600)\n"
# a job that starts a child of its session once told to (a file "fork"), and says so (a file "forked")
FORKER = """import os, subprocess, sys, time
while not os.path.exists("fork"):
    time.sleep(0.02)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open("forked", "w").close()
time.sleep(600)
"""


@pytest.fixture
def passes(monkeypatch):
    """The processes whose stat each pass over /proc reads, from a clean slate, on a clock of the test's."""
    clock = [1000.0]
    monkeypatch.setattr(proc.time, "monotonic", lambda: clock[0])
    for name, value in (("_seen", {}), ("_looked_at", {}), ("_scan", (float("-inf"), {})), ("_full_scan_at", float("-inf"))):
        monkeypatch.setattr(proc, name, value, raising=False)  # (the state of a pass, whichever code keeps it)
    read: list[int] = []
    stat_fields = proc._stat_fields
    monkeypatch.setattr(proc, "_stat_fields", lambda pid: read.append(pid) or stat_fields(pid))
    return clock, read


def sleeper(**options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SLEEPER], **options)


def test_a_look_at_a_jobs_processes_reads_again_only_its_sessions_and_the_new_ones(passes, tmp_path):
    """A pass over /proc read the stat of every process of the machine, at each look: on a busy
    machine, most of what twenty quiet jobs cost. A process seen outside the sessions looked at
    cannot join one, so the next pass reads only theirs and the processes new since; every
    process is read again after FULL_SCAN_SECONDS, in case its pid was given again."""
    clock, read = passes
    job = subprocess.Popen([sys.executable, "-c", FORKER], cwd=tmp_path, start_new_session=True)
    stranger = sleeper(start_new_session=True)
    try:
        proc.session_usage(job.pid)
        assert len(proc._scan[1][job.pid]) == 1
        assert job.pid in read and stranger.pid in read
        read.clear()
        clock[0] += 5
        newcomer = sleeper(start_new_session=True)
        (tmp_path / "fork").write_text("")
        wait_for(lambda: (tmp_path / "forked").exists(), timeout=30, what="the job's child")
        try:
            assert proc.session_usage(job.pid) is not None
            assert len(proc._scan[1][job.pid]) == 2 and newcomer.pid in read  # the job's new child, and a new process of another session
            assert stranger.pid not in read
            read.clear()
            clock[0] += proc.FULL_SCAN_SECONDS
            proc.session_usage(job.pid)
            assert stranger.pid in read
        finally:
            newcomer.kill()
            newcomer.wait()
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the job and its child
        for process in (job, stranger):
            process.kill()
            process.wait()


def test_a_session_looked_at_for_the_first_time_is_read_at_once(passes):
    """Its processes seen in an earlier pass, outside the sessions looked at then, are read again:
    their CPU time and memory are those of now, not of that pass."""
    clock, read = passes
    first, second, stranger = (sleeper(start_new_session=True) for _ in range(3))
    try:
        proc.session_usage(first.pid, shared=True)
        read.clear()
        clock[0] += proc.SHARED_SCAN_SECONDS / 2  # the pass would serve a look at a session looked at before
        assert proc.session_usage(second.pid, shared=True) is not None
        assert second.pid in read and stranger.pid not in read
        read.clear()
        proc.session_usage(first.pid, shared=True)  # shared: the pass just made
        assert read == []
    finally:
        for process in (first, second, stranger):
            process.kill()
            process.wait()


# -- the poller between two beats --------------------------------------------------------------------


@pytest.fixture
def quiet_widgets(monkeypatch):
    import comm
    from comm.base_comm import BaseComm

    class QuietComm(BaseComm):
        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
            pass

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: QuietComm(*a, **k))


def test_a_line_printed_just_after_the_clock_moved_is_shown_at_once(store, fake_backend, backends, quiet_widgets):
    """The header's clock moves once a second, alone: that update is not counted against the pace
    of whole updates (four a second), which made a line printed within a quarter of a second
    after it wait, its view awake and its poller ticking, for the pace to allow it."""
    from test_widget import Clock, append, fake_job

    from jupyter_trainer.view.job_widget import JobWidget

    job = fake_job(store, backends)
    clock = Clock(now=(job.record.started_at or 1000.0) + 5)
    view = JobWidget(job, clock=clock)
    append(job, "first\n")
    view.poll(now=1.0)
    clock.now += 1
    view.poll(now=2.0)  # the beat: only the clock moved
    append(job, "printed just after\n")
    view.files_changed({"output.log"})
    view.poll(now=2.05)
    assert "printed just after" in view.log.value


def test_a_line_of_one_of_twenty_quiet_views_polls_that_view_alone(store, fake_backend, backends, quiet_widgets):
    """Between two beats, a change told wakes the poller for the views it concerns: the others,
    quiet, were each asked again whether they were quiet (and their files looked up), at every
    wake. Counted: which views the ticks told of the line poll, and which they ask."""
    import time

    from conftest import wait_for
    from test_widget import Clock, append, fake_job

    from jupyter_trainer.view.job_widget import JobWidget
    from jupyter_trainer.view.poller import Poller

    views = [JobWidget(fake_job(store, backends, name=f"q{index}"), clock=Clock()) for index in range(20)]
    for view in views:
        append(view.job, "first\n")
    asked, polled = [], []
    quiet, poll = JobWidget.quiet, JobWidget.poll

    class Counted(JobWidget):
        @property
        def quiet(self):
            asked.append(self)
            return quiet.fget(self)

        def poll(self, now):
            polled.append(self)
            return poll(self, now)

    for view in views:
        view.__class__ = Counted
    poller = Poller(interval=0.01, quiet_interval=60)  # no beat within the test
    try:
        poller.watch(*views)
        wait_for(lambda: all(view.quiet and view.watched and "first" in view.log.value for view in views), timeout=20, what="the views to settle")
        time.sleep(0.2)
        asked.clear()
        polled.clear()
        append(views[7].job, "second\n")
        wait_for(lambda: "second" in views[7].log.value, timeout=5, what="the line")
        time.sleep(0.2)
        assert views[7] in polled
        assert [view for view in asked + polled if view is not views[7]] == []
    finally:
        poller.forget_all()
