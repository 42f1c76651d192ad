"""Removing finished runs: `jupyter-trainer rm`, `%train_rm`, `jupyter-trainer prune` (never anything running)."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import types

import pytest
from conftest import IN_CI, TEST_IMAGE, wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.processes import ProcessIdentity
from jupyter_trainer.core.record import JobRecord, Status
from jupyter_trainer.errors import UnknownJob
from jupyter_trainer.jobs.job import Job, get_job
from jupyter_trainer.jobs.submit import submit_detached


def cli(*args):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=120)


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
    host_job("long", "import time\ntime.sleep(600)\n", workdir)
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
        Job.load("long").stop()  # the handle's record was rewritten under it (its creation time)


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


# -- what cannot be removed is said, and finished later --------------------------------------------


@contextlib.contextmanager
def read_only(path):
    """`path` made read-only for real, as a read-only file system is (root included): a read-only
    bind mount of it on itself."""
    _need_root_for("mount")
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True, capture_output=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True, capture_output=True)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True, capture_output=True)


@contextlib.contextmanager
def immutable(path):
    """A file no one can delete, root included (`chattr +i`), for the block; a block that moves
    it (with its directory) says where to by setting `.path` of what it was given."""
    _need_root_for("chattr")
    subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
    held = types.SimpleNamespace(path=path)
    try:
        yield held
    finally:
        subprocess.run(["chattr", "-i", str(held.path)], check=True, capture_output=True)


def _need_root_for(tool):
    if os.geteuid() != 0 or shutil.which(tool) is None:
        message = f"needs root and {tool} to make a real read-only place"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def listed(*words):
    return [(row["name"], row["status"]) for row in json.loads(cli("list", "--json", *words).stdout)]


def test_rm_and_prune_on_a_read_only_store_remove_nothing_and_say_so(home, workdir):
    assert host_job("done", "print('x')\n", workdir).wait(timeout=30) is Status.COMPLETED
    with read_only(home):
        for _ in range(2):  # and again: the second says the same, not "removed"
            refused = cli("rm", "done")
            assert refused.returncode == 1 and refused.stdout == "" and len(refused.stderr.splitlines()) == 1, refused
            assert "could not remove done run 1 (Read-only file system" in refused.stderr
            assert "nothing of it was removed, it is listed as before" in refused.stderr
            assert "then run jupyter-trainer rm done again" in refused.stderr
            assert listed() == [("done", "completed")]
        pruned = cli("prune", "--older-than", "0s")
        assert pruned.returncode == 1 and pruned.stdout == "" and len(pruned.stderr.splitlines()) == 1, pruned
        assert "could not remove done run 1 (Read-only file system" in pruned.stderr and "removed done" not in pruned.stderr
        assert listed() == [("done", "completed")] and cli("logs", "done").stdout == "x\n"  # whole
    assert cli("rm", "done").stdout.strip() == "removed done (run 1, completed)"
    assert not (home / "jobs" / "done").exists()


def test_train_rm_says_in_one_line_what_it_could_not_remove(home, workdir):
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    if "TrainerMagics" not in shell.magics_manager.registry:
        shell.run_line_magic("load_ext", "jupyter_trainer")
    assert host_job("magic", "print('x')\n", workdir).wait(timeout=30) is Status.COMPLETED
    with read_only(home / "jobs" / "magic"), pytest.raises(UsageError) as refused:
        shell.run_line_magic("train_rm", "magic")
    assert "could not remove magic run 1" in str(refused.value) and "then run %train_rm magic again" in str(refused.value)
    assert get_job("magic").status is Status.COMPLETED


def test_a_run_whose_files_cannot_all_be_deleted_is_unlisted_and_finished_later(home, workdir):
    assert host_job("half", "print('x')\n", workdir).wait(timeout=30) is Status.COMPLETED
    log = home / "jobs" / "half" / "1" / "output.log"
    with immutable(log) as held:
        failed = cli("rm", "half")
        assert failed.returncode == 1 and failed.stdout == "" and len(failed.stderr.splitlines()) == 1, failed
        assert "could not remove all of half run 1 (Operation not permitted" in failed.stderr
        assert "it is no longer listed, and the rest of its files is in" in failed.stderr
        assert listed("--all") == [] and "no job named 'half'" in cli("status", "half").stderr
        (leftover,) = (home / "jobs" / "half").iterdir()  # hidden beside the runs, found again below
        assert leftover.name.startswith(".removing-1-")
        held.path = leftover / "output.log"
        again = cli("rm", "half")  # still there: said again, never "removed"
        assert again.returncode == 1 and "could not remove the rest of half run 1, removed earlier" in again.stderr, again
        # the name is free meanwhile: a new run 1 is its own
        assert host_job("half", "print('y')\n", workdir).wait(timeout=30) is Status.COMPLETED
        assert listed() == [("half", "completed")] and cli("logs", "half").stdout == "y\n"
    pruned = cli("prune", "--older-than", "7d")  # the new run is recent: kept; the rest of the old one goes
    assert pruned.returncode == 0 and pruned.stdout.strip() == "finished removing half (run 1)", pruned
    assert sorted(path.name for path in (home / "jobs" / "half").iterdir()) == ["1"] and listed() == [("half", "completed")]
    assert cli("rm", "half").stdout.strip() == "removed half (run 1, completed)" and not (home / "jobs" / "half").exists()


def test_rm_of_a_name_finishes_what_an_earlier_rm_left(home, workdir):
    assert host_job("rest", "print('x')\n", workdir).wait(timeout=30) is Status.COMPLETED
    with immutable(home / "jobs" / "rest" / "1" / "script.py") as held:
        assert cli("rm", "rest", "--run", "1").returncode == 1
        (leftover,) = (home / "jobs" / "rest").iterdir()
        held.path = leftover / "script.py"
    finished = cli("rm", "rest", "--run", "1")
    assert finished.returncode == 0 and finished.stdout.strip() == "finished removing rest (run 1)", finished
    assert not (home / "jobs" / "rest").exists()
    assert "no job named 'rest'" in cli("rm", "rest").stderr


# -- rm and stop of one name at once -------------------------------------------------------------


def test_an_update_of_a_removed_run_says_it_was_removed(home, workdir, store):
    """What a stop writes after the backend took it, when another process removed the run
    meanwhile: not "cannot write the job store (free some disk space)"."""
    assert host_job("gone", "print('x')\n", workdir).wait(timeout=30) is Status.COMPLETED
    assert cli("rm", "gone").returncode == 0
    with pytest.raises(UnknownJob, match="job 'gone' has no run 1 any more: it was removed"):
        store.update("gone", 1, lambda record: None)


def test_a_stop_while_another_process_removes_the_job_says_so(home, workdir, monkeypatch):
    """The job ends under the stop, and another process removes it before the stop is recorded."""
    from jupyter_trainer import backends

    job = host_job("raced", "import time\ntime.sleep(600)\n", workdir)
    wait_for(lambda: job.refresh().status is Status.RUNNING, what="the job to start")
    host = backends.DEFAULT.get("host")
    stop = host.stop

    def stop_then_rm_elsewhere(record, run_dir, container=False):
        stop(record, run_dir, container=container)
        wait_for(lambda: cli("rm", "raced").returncode == 0, what="the other process's rm")

    monkeypatch.setattr(host, "stop", stop_then_rm_elsewhere)
    with pytest.raises(UnknownJob, match="it was removed"):
        job.stop()
    assert listed("--all") == [] and not (home / "jobs" / "raced").exists()


def test_rm_and_stop_of_one_name_at_once_each_say_the_truth(home, workdir):
    for attempt in range(4):
        name = f"both{attempt}"
        # a job that ends by itself around the time both arrive, and one that needs the stop
        job = host_job(name, f"import time\ntime.sleep({0.3 * attempt})\n", workdir)
        wait_for(lambda: job.refresh().status is not Status.PENDING, what="the job to start")
        command = [sys.executable, "-m", "jupyter_trainer"]
        stopping = subprocess.Popen([*command, "stop", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        removing = subprocess.Popen([*command, "rm", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        (stop_out, stop_err), (rm_out, rm_err) = stopping.communicate(timeout=120), removing.communicate(timeout=120)
        for err in (stop_err, rm_err):
            assert "Traceback" not in err and len(err.splitlines()) <= 1, err
        gone = not (home / "jobs" / name).exists()
        if removing.returncode == 0:
            assert rm_out.startswith(f"removed {name} (run 1, ") and gone
        else:
            assert f"job {name} is not finished" in rm_err and "nothing was removed" in rm_err and not gone
        if stopping.returncode == 0:
            assert stop_out.strip()
        else:
            assert gone and ("no job named" in stop_err or "it was removed" in stop_err), stop_err
        if not gone:  # the stop won: the job is stopped (or ended), whole, and removable
            assert dict(listed())[name] in ("stopped", "completed")
            assert sorted(path.name for path in (home / "jobs" / name).iterdir()) == ["1"]
            assert {"record.json", "output.log", "script.py"} <= {path.name for path in (home / "jobs" / name / "1").iterdir()}
            assert cli("rm", name).returncode == 0
        assert not (home / "jobs" / name).exists()


# -- prune --containers and the containers that submissions are starting --------------------------

PRUNE_CONTAINERS = [sys.executable, "-m", "jupyter_trainer", "prune", "--older-than", "7d", "--containers"]
PRUNE_WAIT = 10  # seconds: far longer than a prune that does not wait takes


@pytest.mark.docker
def test_prune_containers_leaves_a_stopped_container_a_submission_is_starting(docker_client, docker_image, workdir, home, monkeypatch):
    """A kernel submits a job to its stopped container: the record exists but names no container
    yet, and the container is stopped until the kernel starts it. A prune just then leaves it."""
    from docker.models.containers import Container

    spec = build_spec("print('x')\n", image=docker_image, workdir=str(workdir), stop_container_when_done=True)
    first = submit_detached(spec, name="first").job
    name = first.record.runtime["container_name"]
    assert first.wait(timeout=90) is Status.COMPLETED
    wait_for(lambda: docker_client.containers.get(name).status == "exited", timeout=60, what="the container to stop")
    assert cli("rm", "first").returncode == 0  # no record names the container now
    start, pruning = Container.start, []

    def start_once_a_prune_ran(container, *args, **kwargs):
        pruning.append(subprocess.Popen(PRUNE_CONTAINERS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        with contextlib.suppress(subprocess.TimeoutExpired):
            pruning[0].wait(timeout=PRUNE_WAIT)  # a prune that waits for this start is let go on
        return start(container, *args, **kwargs)

    monkeypatch.setattr(Container, "start", start_once_a_prune_ran)
    second = submit_detached(spec, name="second").job  # before: "Docker refused to start the job: No such container"
    monkeypatch.undo()
    out, err = pruning[0].communicate(timeout=120)
    assert pruning[0].returncode == 0 and out.strip().endswith("no container to remove"), out + err
    assert second.wait(timeout=90) is Status.COMPLETED and second.record.runtime["container_name"] == name


@pytest.mark.docker
def test_prune_containers_leaves_the_container_of_a_job_being_launched(docker_client, docker_image, workdir, home, store):
    """A job recorded but not launched yet (its record names no container) will run in its
    image's container, stopped just now: a prune leaves that container."""
    spec = build_spec("print('x')\n", image=docker_image, workdir=str(workdir), stop_container_when_done=True)
    first = submit_detached(spec, name="first").job
    name = first.record.runtime["container_name"]
    assert first.wait(timeout=90) is Status.COMPLETED and cli("rm", "first").returncode == 0
    wait_for(lambda: docker_client.containers.get(name).status == "exited", timeout=60, what="the container to stop")
    submitter = ProcessIdentity.current().to_dict()
    store.create(JobRecord(name="next", backend="docker", run=1, fingerprint="f", options=spec.public_options(), submitter=submitter))
    kept = cli("prune", "--older-than", "7d", "--containers")
    assert kept.returncode == 0 and kept.stdout.strip().endswith("no container to remove"), kept
    assert docker_client.containers.get(name).status == "exited"


@pytest.mark.docker
def test_prune_containers_that_read_the_records_first_leaves_a_container_being_created(docker_image, workdir, home, tmp_path, monkeypatch):
    """A prune has read the records (no job yet) when a kernel records its job and creates the
    container, which is `created` until it is started: the prune does not remove it meanwhile."""
    from docker.models.containers import Container

    read, created = tmp_path / "records-read", tmp_path / "container-created"
    slow_prune = textwrap.dedent(
        f"""
        import pathlib, sys, time
        from jupyter_trainer.surfaces import cli
        from jupyter_trainer.core import store

        records = store.JobStore.records

        def records_then_a_pause(self, all_runs=False):
            found = list(records(self, all_runs))
            pathlib.Path({str(read)!r}).touch()
            deadline = time.monotonic() + {PRUNE_WAIT}
            while not pathlib.Path({str(created)!r}).exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # the time a prune takes to list the containers, made long
            return iter(found)

        store.JobStore.records = records_then_a_pause
        sys.exit(cli.main({PRUNE_CONTAINERS[3:]!r}))
        """
    )
    pruning = subprocess.Popen([sys.executable, "-c", slow_prune], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(read.exists, timeout=60, what="the prune to read the records")
    start = Container.start

    def start_once_the_prune_ran(container, *args, **kwargs):
        created.touch()
        with contextlib.suppress(subprocess.TimeoutExpired):
            pruning.wait(timeout=PRUNE_WAIT)
        return start(container, *args, **kwargs)

    monkeypatch.setattr(Container, "start", start_once_the_prune_ran)
    spec = build_spec("print('x')\n", image=docker_image, workdir=str(workdir))
    job = submit_detached(spec, name="fresh").job  # before: "Docker could not create container ...: No such container"
    monkeypatch.undo()
    out, err = pruning.communicate(timeout=120)
    assert pruning.returncode == 0 and out.strip().endswith("no container to remove"), out + err
    assert job.wait(timeout=90) is Status.COMPLETED


# -- the runs' volumes of containers on a remote host ---------------------------------------------

# `laptop` (conftest): SSH set up for the remote host, its containers and volumes removed after each test


@pytest.mark.docker
def test_a_users_volume_named_like_a_runs_volume_is_neither_used_nor_pruned(laptop, store, tmp_path):
    from jupyter_trainer.backends.docker.clients import remember_engine
    from jupyter_trainer.backends.docker.containers import LABEL, LABEL_JOBS_DIR, LABEL_STORE
    from jupyter_trainer.backends.docker.hosts import Engine
    from jupyter_trainer.backends.docker.runtime import SHIPPED_JOBS_DIR

    engine = laptop.client()
    engine.volumes.create("mybox-runs")  # the user's own, before any job
    script = tmp_path / "train.py"
    script.write_text("print('x')\n")
    refused = cli("submit", str(script), "--docker-host", laptop.alias_url, "--image", TEST_IMAGE, "--container", "mybox")
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused
    assert "a volume named 'mybox-runs' already exists on jt-remote-test and is not labelled as jupyter_trainer's" in refused.stderr
    assert [container.name for container in engine.containers.list(all=True)] == [] and listed() == []
    # a container as versions before labelled volumes made it, its volume unlabelled: the
    # container goes, a volume that may be the user's stays
    labels = {LABEL: "1", LABEL_JOBS_DIR: str(store.jobs_dir), LABEL_STORE: store.store_id()}
    engine.containers.create(TEST_IMAGE, ["true"], name="oldbox", labels=labels, volumes={"mybox-runs": {"bind": SHIPPED_JOBS_DIR, "mode": "rw"}})
    remember_engine(store.home, Engine(laptop.alias_url))
    pruned = cli("prune", "--older-than", "7d", "--containers")
    assert pruned.returncode == 0 and "removed containers oldbox on jt-remote-test" in pruned.stdout, pruned
    assert [volume.name for volume in engine.volumes.list()] == ["mybox-runs"]


@pytest.mark.docker
def test_prune_removes_the_runs_volume_it_made_with_its_container(laptop, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('x')\n")
    done = cli("submit", str(script), "--name", "away", "--docker-host", laptop.alias_url, "--image", TEST_IMAGE, "--container", "box", "--stop-container-when-done")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: listed() == [("away", "completed")], timeout=90, what="the job")
    engine = laptop.client()
    labels = engine.volumes.get("box-runs").attrs["Labels"]
    assert labels["jupyter_trainer"] == "1" and labels["jupyter_trainer.container"] == "box"
    wait_for(lambda: engine.containers.get("box").status == "exited", timeout=60, what="the container to stop")
    assert cli("rm", "away").returncode == 0
    pruned = cli("prune", "--older-than", "7d", "--containers")
    assert pruned.returncode == 0 and "removed containers box on jt-remote-test" in pruned.stdout, pruned
    assert "box-runs" not in [volume.name for volume in engine.volumes.list()]
