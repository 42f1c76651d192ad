"""A backend and a log source that have only what their protocols require of their own work with
the defaults of the rest (BackendBase, LogSourceBase): every surface that asks them something
(the jobs list, `status --json`, the widget, `logs -f`, a comparison) gets the defaults' answer."""

import json
import os

import pytest

from jupyter_trainer.backends import Backends
from jupyter_trainer.backends.base import LOG_FILE, BackendBase, FileLogSource
from jupyter_trainer.backends.fake import FakeBackend
from jupyter_trainer.core.record import Observation, Status
from jupyter_trainer.jobs.job import list_jobs
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.logs.source import LogSourceBase, TellingLog
from jupyter_trainer.spec.job_spec import DetachedSpec
from jupyter_trainer.surfaces.cli import run
from jupyter_trainer.view.compare_runs import ComparedRun
from jupyter_trainer.view.job_widget import JobWidget
from jupyter_trainer.view.words import status_text

OPTIONAL_BACKEND_MEMBERS = ("watched_status_interval", "polling", "status_fields")
OPTIONAL_SOURCE_MEMBERS = ("local_file", "modified", "settle")


class PlainLog(LogSourceBase):
    """A log read through a runtime, as a new backend's might be: `size` and `read`, nothing more."""

    def __init__(self, path):
        self.file = FileLogSource(path)

    def size(self):
        return self.file.size()

    def read(self, offset, limit):
        return self.file.read(offset, limit)


class PlainBackend(FakeBackend):
    """The fake, under a name of its own, whose log is a PlainLog."""

    name = "plain"

    def log_source(self, record, run_dir):
        return PlainLog(run_dir / LOG_FILE)


def own_members(cls, base) -> set[str]:
    """What `cls` and its bases but `base` define themselves."""
    return {name for klass in cls.__mro__ if klass not in (base, object) for name in vars(klass)}


@pytest.fixture(autouse=True)
def quiet_widgets(quiet_comm):
    """Views are made without a frontend: their traits are read."""


def test_a_backend_and_a_log_source_without_the_optional_members_work_with_the_defaults(store, capsys):
    backend = PlainBackend()
    assert own_members(PlainBackend, BackendBase).isdisjoint(OPTIONAL_BACKEND_MEMBERS)
    assert own_members(PlainLog, LogSourceBase).isdisjoint(OPTIONAL_SOURCE_MEMBERS)
    backends = Backends(plain=backend)
    spec = DetachedSpec(script="x", backend="plain", workdir=os.getcwd())
    job = submit_detached(spec, name="plain", store=store, backends=backends).job
    (job.run_dir / LOG_FILE).write_text("".join(f"step {step} loss: {1 / step:.3f}\n" for step in range(1, 6)))
    backend.observations["plain"] = Observation(alive=True, started=True)

    # a poll of many jobs enters the backend's polling(), a nothing of BackendBase's
    assert [listed.record.status for listed in list_jobs(store, backends=backends)] == [Status.RUNNING]
    job.refresh()
    # status_fields says nothing more: no restarts counted, no field of its own
    assert status_text(job.record, backends) == "running"
    assert run(["status", "plain", "--json"], store, backends) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "running" and "restarts" not in shown

    view = JobWidget(job)
    assert view.watched_status_interval == view.status_interval == backend.status_interval
    assert view.monitor.last_output_at is None  # the log's time of growth cannot be seen
    view.monitor.read_log()
    assert view.monitor.log_file is None and view.log_path is None  # no file here to watch...
    assert view.log_stream is None and not isinstance(job.log_source(), TellingLog)  # ...nor a stream that tells
    assert view.monitor.log_text().endswith("step 4 loss: 0.250\nstep 5 loss: 0.200")
    assert view.monitor.metrics.counts == {"loss": 5}

    backend.finish("plain", 0)
    job.refresh()
    assert job.status is Status.COMPLETED
    # the ended job's log is read to its end, with nothing to settle first
    followed = list(job.follow(interval=0.01))
    assert followed[0] == "step 1 loss: 1.000" and followed[-1] == "step 5 loss: 0.200" and len(followed) == 5
    compared = ComparedRun(job).read_all()
    assert compared.caught_up and len(compared.by_own.points["loss"]) == 5
