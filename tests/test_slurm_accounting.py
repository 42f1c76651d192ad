"""The --slurm backend on a cluster with accounting (slurmdbd over MariaDB): how jobs the controller
has forgotten ended (one sacct for all), requeues counted as restarts, and a controller that is
down for a minute while a job runs."""

import json
import subprocess
import sys
import time

import pytest
import slurm_cluster
from conftest import wait_for
from slurm_cluster import submit

from jupyter_trainer.backends.base import read_supervisor_facts
from jupyter_trainer.backends.slurm import commands
from jupyter_trainer.backends.slurm.queue import QUEUE
from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import refreshed_records

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from slurm_cluster.for_the_session(tmp_path_factory, accounting=True, cluster="jtacct")


@pytest.fixture
def slurm(cluster, monkeypatch, home):
    yield from slurm_cluster.following(cluster, monkeypatch)


def slurm_id(job):
    return job.record.runtime["job_id"]


def run_to_the_end(cluster, job, timeout=120):
    """A requeued job's final status, started whenever it waits rather than when Slurm's BeginTime
    says (asked again and again: a job still being requeued is not pending yet, and a node that
    just came back may fail it once more)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.refresh().record.status.is_final:
            return job.record.status
        if job.record.status is Status.PENDING:
            if "held" in job.record.reason:  # a launch on a node that just came back failed: Slurm holds it
                cluster.run("scontrol", "release", slurm_id(job))
            cluster.run("scontrol", "update", f"jobid={slurm_id(job)}", "StartTime=now")
        time.sleep(1)
    return job.record.status


def forgotten(cluster, *jobs):
    listed = cluster.run("squeue", "--me", "--states=all", "-h", "-o", "%i").stdout.split()
    return not any(slurm_id(job) in listed for job in jobs)


def test_jobs_the_controller_forgot_are_read_from_accounting_in_one_query(slurm, workdir):
    done = submit("print('done')\n", workdir, "acct-done")
    three = submit("import sys\nsys.exit(3)\n", workdir, "acct-three")
    cancelled = submit("import time\nprint('up', flush=True)\ntime.sleep(600)\n", workdir, "acct-cancelled")
    wait_for(lambda: "up" in cancelled.logs(), timeout=60, what="the job to start")
    slurm.run("scancel", slurm_id(cancelled), check=True)
    # nobody looks until the controller has forgotten all three (MinJobAge)
    wait_for(lambda: forgotten(slurm, done, three, cancelled), timeout=90, interval=1, what="the controller to forget the jobs")
    before = dict(commands.CALLS)
    records = {record.name: record for record in refreshed_records()}
    assert commands.CALLS["squeue"] - before.get("squeue", 0) == 1
    assert commands.CALLS["sacct"] - before.get("sacct", 0) == 1
    assert records["acct-done"].status is Status.COMPLETED
    assert records["acct-three"].status is Status.FAILED and records["acct-three"].exit_code == 3
    assert records["acct-cancelled"].status is Status.STOPPED
    assert records["acct-cancelled"].reason == "cancelled by root"


def test_a_sweeps_tasks_the_controller_forgot_are_read_from_accounting_by_their_array_ids(slurm, workdir):
    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.jobs.sweeps import submit_sweep

    script = "import sys, time\nprint('up', flush=True)\nif sys.argv[-1] == '1':\n    time.sleep(600)\nsys.exit(int(sys.argv[-1]) * 3 - 3)\n"
    sweep = submit_sweep(build_spec(script, workdir=str(workdir), slurm=True), ["code=1,2"], name="acct-sweep")
    waiting, failing = (each.job for each in sweep.submissions)
    wait_for(lambda: "up" in waiting.logs(), timeout=60, what="the first task to start")
    slurm.run("scancel", slurm_id(waiting), check=True)  # one task, from the shell
    wait_for(lambda: forgotten(slurm, waiting, failing), timeout=90, interval=1, what="the controller to forget the tasks")
    before = dict(commands.CALLS)
    records = {record.name: record for record in refreshed_records()}
    assert commands.CALLS["sacct"] - before.get("sacct", 0) == 1
    assert records["acct-sweep-1"].status is Status.STOPPED and records["acct-sweep-1"].reason == "cancelled by root"  # accounting's word
    assert records["acct-sweep-2"].status is Status.FAILED and records["acct-sweep-2"].exit_code == 3


CHECKPOINTING = """\
import os, time
path = "checkpoint.txt"
start = int(open(path).read()) if os.path.exists(path) else 0
print("resumed from", start, "restart", os.environ.get("SLURM_RESTART_COUNT", "0"), flush=True)
for step in range(start, 12):
    print("step", step, flush=True)
    with open(path + ".tmp", "w") as f:
        f.write(str(step + 1))
    os.replace(path + ".tmp", path)
    time.sleep(0.5)
print("done")
"""


def test_a_requeued_job_counts_a_restart_and_resumes_from_its_checkpoint(slurm, workdir):
    job = submit(CHECKPOINTING, workdir, "requeued", requeue=True)
    wait_for(lambda: "step 3" in job.logs(), timeout=60, what="a few steps")
    slurm.run("scontrol", "requeue", slurm_id(job), check=True)
    # Slurm holds a requeued job back for a while (BeginTime): it waits, says so, and is let go
    wait_for(lambda: job.refresh().record.status is Status.PENDING, timeout=30, what="pending again")
    wait_for(lambda: job.refresh().record.reason == "BeginTime", timeout=30, what="Slurm's reason")
    assert run_to_the_end(slurm, job) is Status.COMPLETED and job.exit_code == 0
    log = job.logs()
    assert log.startswith("resumed from 0 restart 0\n")
    assert "----- jupyter_trainer: Slurm restarted the job (restart 1)" in log
    resumed = log.split("Slurm restarted the job")[1]
    assert "resumed from 0" not in resumed and "resumed from" in resumed and log.rstrip().endswith("done")
    shown = json.loads(
        subprocess.run([sys.executable, "-m", "jupyter_trainer", "status", "requeued", "--json"], capture_output=True, text=True, timeout=60).stdout
    )
    assert shown["restarts"] == 1 and shown["slurm_job_id"] == slurm_id(job)


def test_a_controller_down_for_a_minute_leaves_the_job_running(slurm, workdir):
    # it runs until it is told to end, after the outage (one that ends during it ends then: below)
    script = "import os, time\ni = 0\nwhile not os.path.exists('go'):\n    print('tick', i, flush=True)\n    i += 1\n    time.sleep(1)\nprint('finished')\n"
    job = submit(script, workdir, "through-outage")
    wait_for(lambda: "tick 1" in job.logs() and job.refresh().record.status is Status.RUNNING, timeout=60, what="the job to run")
    slurm.stop_controller()
    try:
        time.sleep(QUEUE.ttl + 0.1)
        job.refresh()
        assert job.record.status is Status.RUNNING
        assert job.record.reason.startswith("cannot reach the Slurm controller since")
        down_since = time.monotonic()
        while time.monotonic() - down_since < 60:
            assert job.refresh().record.status is Status.RUNNING  # never lost for that
            time.sleep(5)
        assert "tick 40" in job.logs()  # it ran on meanwhile
    finally:
        slurm.start_controller()
        (workdir / "go").touch()
    assert job.wait(timeout=90) is Status.COMPLETED and job.logs().rstrip().endswith("finished")
    assert job.record.reason == "" and job.record.unreachable_since is None


def test_a_job_that_ends_while_the_controller_is_down_shows_its_outcome(slurm, workdir):
    script = "import os, sys, time\nprint('up', flush=True)\nwhile not os.path.exists('go'):\n    time.sleep(0.2)\nsys.exit(int(sys.argv[1]))\n"
    done, failed = (submit(script, workdir, name, args=[code]) for name, code in (("outage-done", "0"), ("outage-failed", "3")))
    wait_for(lambda: all(job.refresh().record.status is Status.RUNNING and "up" in job.logs() for job in (done, failed)), timeout=60, what="both to run")
    slurm.stop_controller()
    try:
        (workdir / "go").touch()
        for job in (done, failed):
            wait_for(lambda job=job: read_supervisor_facts(job.run_dir).exit_code is not None, timeout=30, what="the supervisor's exit code")
        QUEUE.forget()
        assert done.refresh().record.status is Status.COMPLETED and done.record.exit_code == 0, done.record.reason
        assert failed.refresh().record.status is Status.FAILED and failed.record.exit_code == 3, failed.record.reason
        assert done.record.unreachable_since is None and done.record.started_at <= done.record.ended_at
    finally:
        slurm.start_controller()


def test_a_failed_node_ends_the_job_lost(slurm, workdir):
    """Without --requeue. (With it, on this one-node cluster the node set DOWN comes back and goes
    down again under the relaunched job now and then: requeues are tested by scontrol requeue.)"""
    lost = submit("import time\nprint('on the node', flush=True)\ntime.sleep(600)\n", workdir, "node-lost")
    wait_for(lambda: "on the node" in lost.logs(), timeout=60, what="the job to run")
    node = slurm_cluster.NODE
    slurm.run("scontrol", "update", f"nodename={node}", "state=down", "reason=broken-for-a-test", check=True)
    try:
        assert lost.wait(timeout=60) is Status.LOST
        assert lost.reason.startswith(f"its node failed (NODE_FAIL: {node})") and "--requeue" in lost.reason
    finally:
        slurm.wait_for_node()  # resumed when it stays down
