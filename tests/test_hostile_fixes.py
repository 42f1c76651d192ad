"""What a hostile job and an unlucky user do to a Slurm job's token, linked scripts, interpreter
wrappers, direction controls, runs made half-way, sparse logs and metrics --json: each test here
shows one way the product breaks its promises."""

import json
import os
import subprocess
import sys

import pytest

from conftest import wait_for

from jupyter_trainer.backends.slurm.queue import QUEUE
from jupyter_trainer.housekeeping import remove_runs
from jupyter_trainer.job import Job
from jupyter_trainer.jobs import Status

import slurm_cluster

LONG = "import time\nprint('up', flush=True)\ntime.sleep(300)\n"


def cli(*args, timeout=60, **options):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer.cli", *args], capture_output=True, text=True, timeout=timeout, **options)


# -- Slurm: the token is only as good as the record that names it -------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from slurm_cluster.for_the_session(tmp_path_factory, accounting=False)


@pytest.fixture
def slurm(cluster, monkeypatch, home):
    yield from slurm_cluster.following(cluster, monkeypatch, set())


def _earlier_run_removed(name, workdir):
    earlier = slurm_cluster.submit("print('never')\n", workdir, name, sbatch_args=["--hold"])
    earlier.stop()
    assert earlier.record.status is Status.STOPPED
    remove_runs(name)
    return earlier.record.runtime["job_id"]


def _rewrite_runtime(job, **changes):
    """What the job can do: it writes into its run directory, its record included."""
    record_file = job.run_dir / "record.json"
    data = json.loads(record_file.read_text())
    for key, value in changes.items():
        if value is None:
            data["runtime"].pop(key, None)
        else:
            data["runtime"][key] = value
    record_file.write_text(json.dumps(data))
    QUEUE.forget()


@pytest.mark.slurm
@pytest.mark.parametrize("pointed_at_earlier", [False, True], ids=["token", "token-and-id"])
def test_a_job_that_rewrites_its_token_is_neither_lost_nor_hidden(slurm, workdir, pointed_at_earlier):
    """The token that tells a run's Slurm job from the earlier run's is looked for in squeue's
    Command, which nobody can change, but which token to look for is read from the record, which
    the job can: any 32 hex digits there and the running job is `lost` (and a stop no longer
    cancels it)."""
    earlier = _earlier_run_removed("retoken", workdir)
    job = slurm_cluster.submit(LONG, workdir, "retoken")  # run 1 again: the same name and log
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=60, what="running")
    real = job.record.runtime["job_id"]
    _rewrite_runtime(job, token="0" * 32, **({"job_id": earlier} if pointed_at_earlier else {}))
    record = Job.load("retoken").refresh().record
    try:
        assert record.status is Status.RUNNING, (record.status, record.reason)
    finally:
        slurm.run("scancel", real)
