"""The idle poller against hostile jobs and unlucky users: real files, real inotify, real processes."""

import os
import time
from contextlib import contextmanager
from pathlib import Path

import comm
import pytest
from comm.base_comm import BaseComm
from conftest import wait_for
from test_widget import Clock, fake_job

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.processes import SHARED_SCAN_SECONDS
from jupyter_trainer.jobs.job import get_job
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.logs.watch import LOST, ChangeWaiter
from jupyter_trainer.view.job_widget import WATCH_CHECK_SECONDS, JobWidget

MIB = 1 << 20


class QuietComm(BaseComm):
    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        pass


@pytest.fixture(autouse=True)
def quiet_widgets(monkeypatch):
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: QuietComm(*a, **k))


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


@pytest.mark.machine_wide
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


# -- the metrics a next kernel sees ----------------------------------------------------------------


def _training_output(rng):
    """What training scripts print: steps, epochs, a progress bar's redraws, a key-value table, a
    user's metric."""
    parts = []
    for epoch in range(1, 4):
        parts.append(f"Epoch {epoch}/3\n")
        for step in range(40):
            parts.append(f"\r {step * 100 // 40:3d}%|{'#' * (step // 4):10s}| {step}/40 [00:0{step % 9}<00:01, loss={rng.random():.4f}]")
            if step % 7 == 0:
                parts.append(f"\nstep {epoch * 40 + step} loss: {rng.random():.5f} acc={rng.random():.3f}\n")
        parts.append("\n| rollout/ep_rew_mean | %.3f |\n| train/value_loss | %.4f |\n| time/iterations | %d |\n" % (rng.random(), rng.random(), epoch))
        parts.append(f"val_loss: {rng.random():.4f} - val_accuracy: {rng.random():.4f}\n")
    return "".join(parts).encode()


def _series(monitor):
    metrics = monitor.metrics
    return metrics.axes, metrics.windows, metrics.latest, metrics.counts


def test_a_new_kernel_sees_every_value_whichever_save_it_starts_from(store, fake_backend, backends, monkeypatch):
    """The kernel that showed the job dies between two saves of its metrics: the next one starts
    from the last save and reads the rest of the log, and must see the very series one whole read
    of the log gives. The log is written in pieces cut anywhere (a line split across two reads)."""
    import random

    from jupyter_trainer.view import monitor as monitor_module
    from jupyter_trainer.view.monitor import JobMonitor

    monkeypatch.setattr(monitor_module, "SAVE_SECONDS", 0.0)  # a save at every read that caught up
    rng = random.Random(7)
    job = fake_job(store, backends, metrics=[("acc", r"acc=([\d.]+)")])
    log, cache = job.run_dir / "output.log", job.run_dir / "metrics.json"
    output = _training_output(rng)
    log.write_bytes(b"")
    first = JobMonitor(job)
    first.start()
    saves = []
    at = 0
    while at < len(output):
        cut = min(len(output), at + rng.randrange(1, 400))
        with open(log, "ab") as handle:
            handle.write(output[at:cut])
        at = cut
        first.read_log(now=time.time())
        if cache.exists() and (not saves or cache.read_bytes() != saves[-1][1]):
            saves.append((at, cache.read_bytes()))
    assert len(saves) > 20
    log.write_bytes(output)
    cache.unlink()
    whole = JobMonitor(job, read_budget=1 << 30)
    whole.start()
    whole.read_log()
    assert whole.caught_up and whole.metrics.counts["acc"] > 10
    for written, saved in saves:
        cache.write_bytes(saved)
        again = JobMonitor(job)
        again.start()
        assert again.cursor.offset > 0, f"the save made at {written} bytes was not used"
        while not again.caught_up:
            again.read_log()
        assert _series(again) == _series(whole), f"starting from the save made at {written} bytes"


# -- the header's clocks ---------------------------------------------------------------------------


def test_the_clocks_moved_in_place_are_those_a_header_drawn_anew_shows_whatever_the_wall_clock_does(store, fake_backend, backends):
    """The wall clock jumps back and forward (NTP, a laptop's suspend) while the job is quiet: each
    header with its clocks replaced in place is the header drawn from a new snapshot."""
    job = fake_job(store, backends)
    log = job.run_dir / "output.log"
    append(log, "step 1 loss: 0.5\n")
    started = job.record.started_at
    clock = Clock(now=started + 5)
    view = JobWidget(job, clock=clock)
    view.poll(now=1.0)
    poll_at = 1.0
    for jump in [1, 1, 3600, 1, -3590, 1, -20, 299, 2, -400, 1, 1e6, -1e6 - 3]:
        clock.now += jump
        poll_at += 1.0
        view.poll(now=poll_at)
        moved = view.header.value
        view.push()
        assert moved == view.header.value, f"after a jump of {jump} s"


@contextmanager
def watches_left(count):
    """Only `count` more inotify watches may be had (the user's max_user_watches nearly spent), for
    a moment: a probe takes what is left under a lowered limit, then gives back `count`."""
    limit = Path("/proc/sys/fs/inotify/max_user_watches")
    if os.geteuid() != 0:
        pytest.skip("changing an inotify limit needs root")
    before = limit.read_text()
    probe = ChangeWaiter()
    with __import__("tempfile").TemporaryDirectory() as scratch:
        files = [Path(scratch, str(index)) for index in range(400)]
        for file in files:
            file.touch()
        try:
            limit.write_text("300")
            taken = probe.watch({str(file) for file in files})
            if not count < len(taken) < len(files):
                pytest.skip(f"this user's watches cannot be brought down to {count} ({len(taken)} taken)")
            probe.watch(set(sorted(taken)[count:]))
            yield
        finally:
            limit.write_text(before)
            probe.close()


@pytest.mark.machine_wide
def test_a_view_whose_directory_cannot_be_watched_is_not_taken_for_watched(store, fake_backend, backends):
    """With the watches nearly spent, some views get their log's watch and not their directory's:
    their exit code's file is never told, so their status must be checked as often as an
    unwatched view's, not every watched_status_interval."""
    from jupyter_trainer.view.poller import Poller

    views = [JobWidget(fake_job(store, backends, name=f"v{index}"), clock=Clock()) for index in range(20)]
    for view in views:
        append(view.job.run_dir / "output.log", "a line\n")
        view.poll(now=1.0)
    poller = Poller(interval=0.01, quiet_interval=0.01)
    poller.widgets = list(views)
    waiter = ChangeWaiter()
    try:
        with watches_left(20):
            poller._wait(waiter, poller.clock(), poller.clock())
        watched = set(waiter._watches)
        assert 0 < len(watched) <= 20
        for view in views:
            both = {view.watched_directory, str(view.monitor.log_file)} <= watched
            assert view.in_watch == both, f"{view.job.name}: {sorted(watched & {view.watched_directory, str(view.monitor.log_file)})}"
    finally:
        waiter.close()


# -- a status that changes while the log stays quiet -----------------------------------------------

QUIET_THEN_ENDS = """
import sys, time
from pathlib import Path
print("step 1 loss: 0.5", flush=True)
while not Path("end").exists():
    time.sleep(0.05)
sys.exit(3)
"""


@pytest.mark.parametrize("how", ["ends", "stopped from another process"])
def test_a_quiet_watched_job_that_ends_is_shown_ended_at_once(home, workdir, how):
    """A watched view's status is checked every watched_status_interval (10 s on the host), and at
    once when a run file that may be a status changes: a quiet job's end is shown in a second."""
    from jupyter_trainer.view.poller import Poller

    job = host_job("quiet-end", QUIET_THEN_ENDS, workdir)
    try:
        wait_for(lambda: "loss" in job.logs(), timeout=60, what="the job's first line")
        view = JobWidget(job)
        poller = Poller()
        poller.watch(view)
        wait_for(lambda: view.quiet and view.watched and "loss" in view.log.value, timeout=10, what="the view to settle")
        time.sleep(1.5)
        if how == "ends":
            (workdir / "end").write_text("")
        else:
            get_job("quiet-end").stop(wait=10)
        ended = time.monotonic()
        wait_for(lambda: not poller.running, timeout=15, what="the view to see the end")
        assert time.monotonic() - ended < 3
        assert ("exit code 3" if how == "ends" else "stopped") in view.header.value
    finally:
        job.stop()


def test_the_notebooks_copy_of_the_view_is_kept_up_after_the_wall_clock_jumps_back(store, fake_backend, backends, monkeypatch):
    """The copy is written every SAVE_INTERVAL of the wall clock: one set back an hour (NTP, a
    laptop's suspend) must not leave the notebook an hour behind the view."""
    import IPython.display

    from jupyter_trainer.view.job_widget import SAVE_INTERVAL

    updates = []

    class Handle:
        def update(self, obj):
            updates.append(obj.data)

    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=None: Handle() if display_id else None)
    job = fake_job(store, backends)
    log = job.run_dir / "output.log"
    clock = Clock(now=time.time())
    view = JobWidget(job, clock=clock)
    view.show()
    clock.now -= 3600
    for second in range(1, 3 * int(SAVE_INTERVAL)):
        append(log, f"step {second} loss: 0.5\n")
        clock.now += 1
        view.poll(now=float(second))
    assert len(updates) >= 2
    newest = max(int(step) for step in __import__("re").findall(r"step (\d+) loss", updates[-1]))
    assert newest >= 2 * int(SAVE_INTERVAL) - 1  # at most SAVE_INTERVAL behind the view


# -- a run removed, and its name taken again --------------------------------------------------------


def test_a_renamed_or_deleted_watched_directory_is_told_and_whatever_takes_its_path_is_watched_anew(tmp_path):
    """Removing a run renames its directory away first: the watch would go on telling of the renamed
    directory under the old path, and say nothing of the new directory a new job makes there."""
    waiter = ChangeWaiter()
    try:
        run = tmp_path / "jobs" / "same" / "1"
        run.mkdir(parents=True)
        assert waiter.watch({str(run)}) == {str(run)}
        hidden = tmp_path / "jobs" / "same" / ".1-removed"
        run.rename(hidden)
        changed = waiter.wait(1.0)
        assert LOST in changed.get(str(run), set()), changed
        assert waiter.watch({str(run)}) == set()  # nothing there yet: polled until it comes
        (hidden / "output.log").write_text("the removed job's\n")
        assert waiter.wait(0.2) == {}  # the renamed directory is no longer told of
        run.mkdir()
        assert waiter.watch({str(run)}) == {str(run)}
        (run / "output.log").write_text("the new job's\n")
        assert "output.log" in waiter.wait(1.0).get(str(run), set())
        (run / "output.log").unlink()
        run.rmdir()
        assert LOST in waiter.wait(1.0).get(str(run), set())
    finally:
        waiter.close()


REPLACEMENT = """
import time
for step in range(2, 200):
    print(f"step {step} loss: 9.{step}", flush=True)
    time.sleep(0.05)
"""


def test_a_view_of_a_removed_run_whose_name_is_taken_again_does_not_follow_the_new_job(home, workdir):
    """A job ends, another kernel removes it (`rm` finds it ended) and runs a new job of the same name
    before this view has seen the end: the new run has the same name, number and paths. The view
    says its job was removed and shows nothing of the new one; a handle on the old run refuses to
    answer for the new one, in one line."""
    from jupyter_trainer.errors import UnknownJob
    from jupyter_trainer.jobs.housekeeping import remove_runs

    old = host_job("same", QUIET_THEN_ENDS, workdir)
    view = JobWidget(old)
    wait_for(lambda: view.poll(time.monotonic()) and "loss: 0.5" in view.log.value, timeout=30, what="the first job's line")
    (workdir / "end").write_text("")
    wait_for(lambda: get_job("same").status.is_final, timeout=30, what="the first job's end")  # another handle sees it
    remove_runs("same")
    new = host_job("same", REPLACEMENT, workdir)
    try:
        assert (new.name, new.run, new.run_dir) == (old.name, old.run, old.run_dir)
        wait_for(lambda: "loss: 9." in new.logs(), timeout=30, what="the new job's lines")
        # polled between two status checks: only its log is read
        view.last_status_check = time.monotonic()
        assert view.poll(time.monotonic()) is False
        assert view.removed and "a new job of its name has taken its place" in view.header.value
        assert "9." not in view.log.value and "loss: 0.5" in view.log.value
        assert view.monitor.metrics.curve("loss") == [(1.0, 0.5)]  # no value of the new job's
        with pytest.raises(UnknownJob, match=r"^job 'same' \(run 1\) was removed and a new job of that name took its place: %train_attach same follows the new one$"):
            old.status  # noqa: B018 (reading it asks the job)
        assert get_job("same").status.value == "running"  # the store's own is the new one, untouched
    finally:
        new.stop()


def test_the_supervisors_clock_samples_are_no_status_news(store, fake_backend, backends):
    """The supervisor writes its clock (the log's size now and then) every 15 s: a quiet view must
    not check its status for that, while any other run file's change still makes it due at once."""
    view = JobWidget(fake_job(store, backends), clock=Clock())
    view.poll(now=1.0)
    view.files_changed({"clock", "metrics.json", ".record.json.tmp"})
    assert view.last_status_check == 1.0
    view.files_changed({"clock", "exit_code"})
    assert view.last_status_check == float("-inf")


# -- every kind of view on one poller --------------------------------------------------------------

TWO_STEPS = """
import time
from pathlib import Path
for step in range(2):
    print(f"step {step} loss: {1 / (step + 1)}", flush=True)
while not Path("end").exists():
    time.sleep(0.05)
"""


def test_a_comparison_and_the_jobs_table_beside_a_job_view_on_one_poller(home, workdir):
    """The poller serves job views, comparisons and the live jobs table alike: none of them may
    break its wait (then no view sleeps, and each comparison says "cannot refresh"), and the job
    view is still watched beside them."""
    from jupyter_trainer.view.compare_runs import load_runs
    from jupyter_trainer.view.compare_view import CompareWidget
    from jupyter_trainer.view.jobs_table import JobsTable
    from jupyter_trainer.view.poller import Poller

    jobs = [host_job(name, TWO_STEPS, workdir) for name in ("cmp-a", "cmp-b")]
    poller = Poller()
    try:
        wait_for(lambda: all("step 1" in job.logs() for job in jobs), timeout=30, what="the jobs' lines")
        view, comparison, table = JobWidget(jobs[0]), CompareWidget(load_runs(["cmp-a", "cmp-b"])), JobsTable()
        failures = []
        for served in (view, comparison, table):
            show = served.show_failure
            served.show_failure = lambda exc, show=show: failures.append(exc) or show(exc)
        poller.watch(view, comparison, table)
        wait_for(lambda: view.watched and view.quiet, timeout=10, what="the job view to be watched")
        time.sleep(2.5)  # beats and ticks between them
        assert failures == [] and "cannot refresh" not in comparison.body.value
        assert "cmp-a" in comparison.body.value and "cmp-b" in comparison.body.value
        (workdir / "end").write_text("")
        wait_for(lambda: comparison not in poller.widgets and view not in poller.widgets, timeout=20, what="both views to see the ends")
        assert failures == [] and "completed" in comparison.body.value
    finally:
        poller.forget_all()
        (workdir / "end").write_text("")
        for job in jobs:
            job.stop()


ENDS_AT_ONCE = """
print("step 1 loss: 0.5", flush=True)
"""


def test_a_status_check_that_waited_for_the_record_while_its_run_was_replaced_writes_nothing_of_it(home, workdir):
    """A handle's status check asks the runtime first, then takes the record's lock to write what it
    saw. Meanwhile another kernel removes the run (under that lock) and submits a new job of the same
    name: once the lock is free, the check must not write the old job's end into the new job's
    record, nor take that record for its own; a stop from the old handle must not touch the new job."""
    import os
    import threading

    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.errors import JobReplaced

    store = JobStore()
    old = host_job("same", ENDS_AT_ONCE, workdir)
    seen = lambda: old.backend_impl().observe(old.record, old.run_dir)  # noqa: E731  (writes nothing)
    wait_for(lambda: seen().exit_code is not None, timeout=30, what="the first job's end")
    assert not old.record.status.is_final  # this handle has not seen the end yet
    run_dir = old.run_dir
    outcome = {}

    def check():
        try:
            old.refresh()
            outcome["record"] = old.record
        except Exception as exc:  # noqa: BLE001  what the check raised, asserted below
            outcome["error"] = exc

    new = None
    with store.locked("same", 1):  # another process's removal holds the record's lock
        checker = threading.Thread(target=check)
        checker.start()
        wait_for(lambda: outcome or _waits_for_a_lock(run_dir / "record.lock"), timeout=10, what="the check to wait for the lock")
        hidden = run_dir.parent / ".removing-1-test"
        os.rename(run_dir, hidden)  # what JobStore.retire does under the lock
        new = host_job("same", QUIET_THEN_ENDS, workdir)
    try:
        checker.join(timeout=30)
        assert isinstance(outcome.get("error"), JobReplaced), outcome
        stored = store.load("same", 1)
        assert stored.created_at == new.record.created_at
        assert not stored.status.is_final and (stored.exit_code, stored.ended_at) == (None, None), stored
        assert old.record.created_at != new.record.created_at  # the handle still holds its own run
        with pytest.raises(JobReplaced):
            old.stop(wait=0)
        wait_for(lambda: get_job("same").status.value == "running", timeout=30, what="the new job to run, unstopped")
        assert not store.load("same", 1).stop_requested
    finally:
        (workdir / "end").write_text("")
        if new is not None:
            new.stop()


def _waits_for_a_lock(path) -> bool:
    """Whether a process waits to lock `path` with flock: /proc/locks lists it after a "->"."""
    inode = f":{os.stat(path).st_ino}"
    with open("/proc/locks") as locks:
        return any("->" in line and line.split()[-3].endswith(inode) for line in locks)


def test_following_a_log_whose_run_is_removed_and_replaced_never_yields_the_new_jobs_lines(home, workdir):
    """`logs -f` reads the log at its path while it grows, and asks the status only once it stops
    growing: a run removed and replaced between two reads has a new log at the same path, which
    grows all the time. What follows the old run must stop there, not follow the new job."""
    from jupyter_trainer.errors import JobReplaced
    from jupyter_trainer.jobs.housekeeping import remove_runs

    old = host_job("same", QUIET_THEN_ENDS, workdir)
    lines = old.follow(tail=0, interval=0.05)
    assert next(lines) == "step 1 loss: 0.5"
    (workdir / "end").write_text("")
    wait_for(lambda: get_job("same").status.is_final, timeout=30, what="the first job's end")
    remove_runs("same")
    new = host_job("same", REPLACEMENT, workdir)
    try:
        wait_for(lambda: "loss: 9." in new.logs(), timeout=30, what="the new job's lines")
        followed = []
        with pytest.raises(JobReplaced):
            for line in lines:
                followed.append(line)
        assert not [line for line in followed if "9." in line], followed
    finally:
        new.stop()
