"""Sweeps given what a careless or hostile user gives them: odd values, names that collide, a record
too large to read back, a sweep's record corrupted or pointing at other jobs. Each is one clear
line, and the store is left as it was."""

import json
import os
import subprocess
import sys

import pytest

from jupyter_trainer.backends import Backends
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.errors import InvalidOption, TrainerError
from jupyter_trainer.jobs.sweeps import load_sweep, submit_sweep, sweep_path
from jupyter_trainer.spec.job_spec import DetachedSpec
from jupyter_trainer.spec.sweep import parse_axes

CLI = [sys.executable, "-m", "jupyter_trainer"]


def cli(*args, cwd=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def one_line_error(done):
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


@pytest.mark.parametrize("item", ["a=x\ny,z", "a=tab\there", "a=\x1b[2Jcleared", 'a=["ok", "cr\\r"]', "a=[1e400]", "a=[NaN]"])
def test_a_value_with_a_control_character_or_not_finite_is_refused(item):
    with pytest.raises(InvalidOption):
        parse_axes([item])


def test_a_job_may_not_take_a_sweeps_name_nor_a_sweep_a_name_its_runs_would_collide_with(home, workdir):
    (workdir / "t.py").write_text("print('loss 1')\n")
    assert cli("submit", "t.py", "--host", "--name", "s", "--sweep", "x=1", cwd=workdir).returncode == 0
    assert "sweep" in one_line_error(cli("submit", "t.py", "--host", "--name", "s", cwd=workdir))
    assert not JobStore(home).runs("s")  # the sweep stays reachable by its name
    # sweep s-2 exists; sweep s extended to two runs would make its run s-2: refused before anything
    assert cli("submit", "t.py", "--host", "--name", "s-2", "--sweep", "x=1", cwd=workdir).returncode == 0
    said = one_line_error(cli("submit", "t.py", "--host", "--name", "s", "--sweep", "x=1,2", "--rerun", cwd=workdir))
    assert "s-2" in said
    assert load_sweep(JobStore(home), "s").runs == ["s-1"] and not JobStore(home).runs("s-2")


def test_a_sweep_named_as_a_run_of_another_sweep_not_made_yet_is_refused(home, store):
    sweep_path(store, "a").parent.mkdir(parents=True)
    sweep_path(store, "a").write_text(json.dumps({"name": "a", "runs": ["a-1", "a-2"], "params": [{"x": "1"}, {"x": "2"}]}))
    with pytest.raises(TrainerError, match="run of sweep 'a'"):
        submit_sweep(DetachedSpec(script="x", backend="fake", workdir=str(home)), ["y=1"], name="a-2", store=store, backends=Backends())
    assert not sweep_path(store, "a-2").exists()


def test_values_too_large_for_the_sweeps_record_are_refused_before_anything_is_made(home, store, workdir):
    """Written, a record over the size a sweep's record is read up to could never be read back: the
    sweep could not be listed, stopped nor removed as one."""
    spec = DetachedSpec(script="print(1)", backend="host", workdir=str(workdir))
    many = [f"k{index}=" + "v" * 1000 for index in range(4500)]
    with pytest.raises(InvalidOption, match="MiB"):
        submit_sweep(spec, many, name="fat", store=store, backends=Backends())
    assert not sweep_path(store, "fat").exists() and not store.runs("fat-1")


@pytest.mark.parametrize(
    "record",
    [
        {"name": "ev", "runs": ["victim"], "params": [{}]},  # another job's name: rm would remove it
        {"name": "other", "runs": ["other-1"], "params": [{}]},
        {"name": "ev", "runs": ["ev-2"], "params": [{}]},
    ],
)
def test_a_sweeps_record_naming_other_jobs_than_its_own_runs_is_refused_in_one_line(home, workdir, record):
    store = JobStore(home)
    (workdir / "t.py").write_text("print('loss 1')\n")
    assert cli("submit", "t.py", "--host", "--name", "victim", cwd=workdir).returncode == 0
    sweep_path(store, "ev").parent.mkdir(parents=True, exist_ok=True)
    sweep_path(store, "ev").write_text(json.dumps(record))
    assert "cannot be read" in one_line_error(cli("rm", "ev"))
    assert store.latest_run("victim") is not None


def test_a_deeply_nested_sweep_record_is_one_line(home):
    store = JobStore(home)
    sweep_path(store, "deep").parent.mkdir(parents=True)
    sweep_path(store, "deep").write_text("[" * 200_000)
    assert "cannot be read" in one_line_error(cli("status", "deep"))


def test_a_sweep_asks_git_once_for_all_its_runs(home, store, workdir, backends, tmp_path, monkeypatch):
    """In a repository whose git is slow (a huge diff, a slow disk: each ask bounded at seconds), a
    sweep of many runs asked it once per run: minutes before its last run was made."""
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    (workdir / "t.py").write_text("print(1)\n")
    subprocess.run(["git", "-C", str(workdir), "add", "t.py"], check=True)
    subprocess.run(["git", "-C", str(workdir), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t"], check=True)
    real = subprocess.run(["which", "git"], capture_output=True, text=True, check=True).stdout.strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path / 'asked'}\nexec {real} \"$@\"\n")
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    spec = DetachedSpec(script="print(1)", backend="fake", workdir=str(workdir))
    sweep = submit_sweep(spec, ["x=1,2,3,4"], name="g", store=store, backends=backends)
    asked = (tmp_path / "asked").read_text().splitlines()
    assert sum("rev-parse" in line for line in asked) == 1, asked
    assert all(each.job.record.provenance["git"]["commit"] for each in sweep.submissions)
