"""A submission killed at any moment leaves no run without its record, and nothing of it stays.

`kill -9` of `jupyter-trainer submit` just after its run's directory was made and before its
record was written once left an empty `jobs/NAME/1/` for good: no listing named it, the next
submission was run 2, and `rm` and `prune`, which work from records, left it and `jobs/NAME/`.
Here the moment is reached every time: a stand-in for the record's writing kills the process.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

# `jupyter-trainer submit`, killed (SIGKILL) where its run's record is written: before it is
# written, or once it is, before the submission goes on
KILLED_SUBMIT = r"""
import os, signal, sys
from jupyter_trainer.core.store import JobStore

write = JobStore._write


def killed_there(self, run_dir, record):
    if sys.argv[1] == "after-the-record":
        write(self, run_dir, record)
    os.kill(os.getpid(), signal.SIGKILL)


JobStore._write = killed_there
from jupyter_trainer.surfaces.cli import main

sys.exit(main(sys.argv[2:]))
"""
MOMENTS = ["before-the-record", "after-the-record"]


def cli(*words, cwd=None):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *words], capture_output=True, text=True, timeout=120, cwd=cwd)


def killed_submit(moment, workdir, *words):
    done = subprocess.run([sys.executable, "-c", KILLED_SUBMIT, moment, "submit", *words], capture_output=True, text=True, timeout=120, cwd=workdir)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr


def submitted(workdir, *words):
    """A real submission: the job's name and run, once it has completed."""
    from jupyter_trainer.jobs.job import Job

    done = cli("submit", *words, cwd=workdir)
    assert done.returncode == 0, done.stderr
    name = words[words.index("--name") + 1]
    job = Job.load(name)
    assert job.wait(timeout=60).value == "completed", job.logs()
    return job.record.run


@pytest.fixture
def scripts(workdir):
    (workdir / "train.py").write_text("print('loss: 0.5')\n")
    (workdir / "other.py").write_text("print('loss: 0.25')\n")
    return workdir


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_killed_submission_leaves_no_run_and_the_next_is_run_1(moment, home, scripts):
    killed_submit(moment, scripts, "train.py", "--host", "--name", "cut")
    listed = cli("list", "--all", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []  # nothing was started: nothing to list
    assert submitted(scripts, "train.py", "--host", "--name", "cut") == 1
    assert sorted(os.listdir(home / "jobs" / "cut")) == ["1"]


@pytest.mark.parametrize("moment", MOMENTS)
def test_rm_and_prune_leave_nothing_of_a_killed_submission(moment, home, scripts):
    assert submitted(scripts, "train.py", "--host", "--name", "rerun") == 1
    killed_submit(moment, scripts, "other.py", "--host", "--name", "rerun", "--rerun")  # its run 2
    removed = cli("rm", "rerun")
    assert removed.returncode == 0 and "rerun (run 1, completed)" in removed.stdout, removed.stderr
    assert not (home / "jobs" / "rerun").exists()

    killed_submit(moment, scripts, "train.py", "--host", "--name", "never")  # its only run
    removed = cli("rm", "never")
    assert removed.returncode == 0 and "interrupted submission" in removed.stdout, removed.stderr
    assert not (home / "jobs" / "never").exists()

    killed_submit(moment, scripts, "train.py", "--host", "--name", "pruned")
    pruned = cli("prune", "--older-than", "7d")  # no run: gone whatever its age
    assert pruned.returncode == 0 and "interrupted submission" in pruned.stdout, pruned.stderr
    assert os.listdir(home / "jobs") == []


def test_an_empty_run_an_earlier_version_left_is_removed_once_no_submission_can_be_making_it(home, scripts, store):
    """What an earlier version's killed submission left: a run directory with no record. Younger
    than ABANDONED_AFTER it may be such a submission at work, and is left alone."""
    from jupyter_trainer.core.store import ABANDONED_AFTER

    young = home / "jobs" / "old" / "1"
    young.mkdir(parents=True)
    assert store.abandoned("old") == []
    assert submitted(scripts, "train.py", "--host", "--name", "old") == 2  # past the one being made
    past = time.time() - ABANDONED_AFTER - 1
    os.utime(young, (past, past))
    assert store.abandoned("old") == [(1, young)]
    removed = cli("rm", "old")
    assert removed.returncode == 0 and "old (run 2, completed)" in removed.stdout and "old (run 1)" in removed.stdout
    assert not (home / "jobs" / "old").exists()

    for name, left in (("reused", []), ("tmp-left", [".record.json.123.0123abcd.tmp", "record.lock"])):
        run_dir = home / "jobs" / name / "1"
        run_dir.mkdir(parents=True)
        for file in left:
            (run_dir / file).write_text("")
        os.utime(run_dir, (past, past))
        assert submitted(scripts, "train.py", "--host", "--name", name) == 1  # its number is free again
        assert sorted(os.listdir(home / "jobs" / name)) == ["1"]

    kept = home / "jobs" / "by-hand" / "1"  # no record, but a log: not what a submission leaves
    kept.mkdir(parents=True)
    (kept / "output.log").write_text("by hand\n")
    os.utime(kept, (past, past))
    assert store.abandoned("by-hand") == []


def test_a_run_being_made_is_never_taken_for_abandoned(home, store):
    """Its maker holds its lock until it is renamed into place."""
    making = home / "jobs" / "busy" / ".creating-1-0123abcd"
    making.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", str(making)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        assert store.abandoned("busy") == []
        store.remove_abandoned("busy")
        assert making.is_dir()
    finally:
        holder.communicate("", timeout=30)
    assert store.abandoned("busy") == [(1, making)]  # its maker is gone
    store.remove_abandoned("busy")
    assert not making.exists()
