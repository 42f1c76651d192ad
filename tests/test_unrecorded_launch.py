"""A launch whose run cannot be written (a full or read-only store): one line, and never a job
left running that nothing follows or stops."""

import errno
import os

import pytest

from jupyter_trainer.backends import base
from jupyter_trainer.core import files as _fs
from jupyter_trainer.core.store import LAUNCH_TARGET_FILE, JobStore
from jupyter_trainer.errors import StoreError
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.spec.job_spec import DetachedSpec


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_launch_that_cannot_be_recorded_stops_its_job_and_leaves_no_run(store, fake_backend, backends, monkeypatch):
    real_update = JobStore.update

    def update(self, name, run, change):
        if fake_backend.launched:  # the launch is done: its record cannot be written
            raise StoreError(f"cannot write the job store at {self.home} (No space left on device)")
        return real_update(self, name, run, change)

    monkeypatch.setattr(JobStore, "update", update)
    spec = DetachedSpec(script="print(1)", backend="fake", workdir=os.getcwd())
    with pytest.raises(StoreError):
        submit_detached(spec, name="full", store=store, backends=backends)
    assert fake_backend.launched == ["full"] and fake_backend.stopped == [("full", False)]
    assert store.runs("full") == [] and store.abandoned("full") == []


def test_the_launch_target_a_full_store_cannot_take_is_a_store_error(store, tmp_path, monkeypatch):
    run_dir = store.run_dir("full", 1)
    run_dir.mkdir(parents=True)
    monkeypatch.setattr(base, "write_private_file", _full)
    monkeypatch.setattr(_fs, "write_private_file", _full)
    spec = DetachedSpec(script="print(1)", backend="host", workdir=str(tmp_path))
    with pytest.raises(StoreError, match="cannot write the job store"):
        base.write_launch_target(run_dir, spec, str(tmp_path), "full")
    assert not (run_dir / LAUNCH_TARGET_FILE).exists()
