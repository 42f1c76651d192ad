"""Removing finished runs: `jupyter-trainer rm`, `%train_rm`, `jupyter-trainer prune` (never anything running)."""

import subprocess
import sys
import time

import pytest
from conftest import wait_for

from jupyter_trainer.job import Job, get_job
from jupyter_trainer.jobs import Status
from jupyter_trainer.spec import build_spec
from jupyter_trainer.submit import submit_detached


def cli(*args):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer.cli", *args], capture_output=True, text=True, timeout=120)


def host_job(name, script, workdir, rerun=False):
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    return submit_detached(spec, name=name, rerun=rerun).job


def test_rm_removes_a_finished_job_and_refuses_a_running_one(home, workdir):
    done = host_job("done", "print('x')\n", workdir)
    assert done.wait(timeout=30).value == "completed"
    host_job("done", "print('y')\n", workdir, rerun=True).wait(timeout=30)
    running = host_job("busy", "import time\ntime.sleep(600)\n", workdir)
    wait_for(lambda: running.refresh().status.value == "running", what="the job to start")
    try:
        refused = cli("rm", "busy")
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "not finished" in refused.stderr
        assert (home / "jobs" / "busy" / "1" / "record.json").exists()
        only_first = cli("rm", "done", "--run", "1")
        assert only_first.returncode == 0 and "done (run 1, completed)" in only_first.stdout
        assert not (home / "jobs" / "done" / "1").exists() and (home / "jobs" / "done" / "2").exists()
        assert cli("rm", "done").returncode == 0 and not (home / "jobs" / "done").exists()
        missing = cli("rm", "done")
        assert missing.returncode == 1 and "no job named 'done'" in missing.stderr
    finally:
        running.stop()
    assert cli("rm", "busy").returncode == 0 and cli("list", "--json").stdout.strip() == "[]"


def test_prune_removes_only_finished_runs_older_than_the_age(home, workdir, store):
    old = host_job("old", "print('x')\n", workdir)
    recent = host_job("recent", "print('x')\n", workdir)
    for job in (old, recent):
        assert job.wait(timeout=30).value == "completed"
    store.update("old", 1, lambda record: setattr(record, "ended_at", time.time() - 8 * 86400))
    running = host_job("long", "import time\ntime.sleep(600)\n", workdir)
    store.update("long", 1, lambda record: setattr(record, "created_at", time.time() - 30 * 86400))
    try:
        result = cli("prune", "--older-than", "7d")
        assert result.returncode == 0 and result.stdout.strip() == "removed old (run 1, completed)"
        assert sorted(path.name for path in (home / "jobs").iterdir()) == ["long", "recent"]
        assert Job.load("long").refresh().status.value == "running"  # never touched
        assert cli("prune", "--older-than", "7d").stdout.strip() == "nothing to remove"
        bad = cli("prune", "--older-than", "a week")
        assert bad.returncode == 1 and "--older-than expects an age" in bad.stderr
    finally:
        running.stop()


def test_train_rm_in_a_shell(home, workdir, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    if "TrainerMagics" not in shell.magics_manager.registry:
        shell.run_line_magic("load_ext", "jupyter_trainer")
    assert host_job("magic", "print('x')\n", workdir).wait(timeout=30).value == "completed"
    shell.run_line_magic("train_rm", "magic")
    assert "removed magic (run 1, completed)" in capsys.readouterr().out and not (home / "jobs" / "magic").exists()


@pytest.mark.docker
def test_prune_containers_removes_stopped_ones_no_job_uses(docker_client, docker_image, workdir, home):
    spec = build_spec("print('x')\n", image=docker_image, workdir=str(workdir), stop_container_when_done=True)
    job = submit_detached(spec, name="boxed").job
    name = job.record.runtime["container_name"]
    assert job.wait(timeout=90).value == "completed"
    wait_for(lambda: docker_client.containers.get(name).status == "exited", timeout=60, what="the container to stop")
    kept = cli("prune", "--older-than", "7d", "--containers")
    assert kept.returncode == 0 and "no container to remove" in kept.stdout  # its job is still there
    assert cli("rm", "boxed").returncode == 0
    removed = cli("prune", "--older-than", "7d", "--containers")
    assert removed.returncode == 0 and f"removed containers {name}" in removed.stdout
    assert name not in [container.name for container in docker_client.containers.list(all=True)]
    assert not (home / "containers" / name).exists()


def test_a_run_whose_processes_outlive_it_is_not_removed(home, workdir):
    import os
    import signal

    script = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('left a worker behind', flush=True)\n"
    )
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    job = submit_detached(spec, name="leaver").job
    assert job.wait(timeout=30) is Status.COMPLETED
    result = cli("rm", "leaver")
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "processes it started still run (pid " in result.stderr and "time.sleep(600)" in result.stderr
    assert get_job("leaver").status is Status.COMPLETED  # nothing removed
    assert "nothing to remove" in cli("prune", "--older-than", "0s").stdout
    worker = int(result.stderr.split("(pid ")[1].split(":")[0])
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: cli("rm", "leaver").returncode == 0, what="the run to be removable")
