"""What only the Docker backend does: containers it creates, reuses, stops, and ones it did not create."""

import contextlib

import pytest
from conftest import wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.backends.docker.containers import default_container_name
from jupyter_trainer.core.record import Status
from jupyter_trainer.errors import (
    BackendUnavailable,
    ImageNotFound,
    InvalidOption,
    TrainerError,
)
from jupyter_trainer.jobs.job import Job, get_job
from jupyter_trainer.jobs.submit import submit_detached

pytestmark = pytest.mark.docker


def docker_spec(script, workdir, image=None, container=None, **options):
    return build_spec(script, host=False, image=image, container=container, workdir=str(workdir), gpus=None, **options)


def test_container_is_created_once_persistent_and_labelled(docker_client, docker_image, workdir, home):
    first = submit_detached(docker_spec("print(1)\n", workdir, docker_image), name="one").job
    second = submit_detached(docker_spec("print(2)\n", workdir, docker_image), name="two").job
    assert first.record.runtime["container_id"] == second.record.runtime["container_id"]
    container = docker_client.containers.get(first.record.runtime["container_id"])
    assert container.name == default_container_name(docker_image, str(workdir))
    assert container.labels["jupyter_trainer"] == "1" and container.attrs["HostConfig"]["Init"] is True
    assert {m["Destination"]: m["Source"] for m in container.attrs["Mounts"]} == {
        "/workspace": str(workdir),
        "/jupyter_trainer/jobs": str(home / "containers" / container.name),  # its own directory, not the store
    }
    for job in (first, second):
        assert job.wait(timeout=60) is Status.COMPLETED
    container.reload()
    assert container.status == "running"  # it outlives its jobs


def test_a_job_sees_its_containers_jobs_only_and_its_files_are_the_stores(docker_image, workdir, home, tmp_path):
    from jupyter_trainer.backends import build_spec as spec_of

    host_job = submit_detached(
        spec_of("print('host secret')\n", host=True, image=None, container=None, workdir=str(workdir), gpus=None), name="elsewhere"
    ).job
    assert host_job.wait(timeout=60) is Status.COMPLETED
    script = "import os, time\nprint(sorted(os.listdir('/jupyter_trainer/jobs')), flush=True)\ntime.sleep(2)\nraise SystemExit(4)\n"
    job = submit_detached(docker_spec(script, workdir, docker_image), name="inside").job
    links = home / "containers" / job.record.runtime["container_name"] / "inside" / "1"
    assert (links / "output.log").stat().st_ino == (job.run_dir / "output.log").stat().st_ino  # one file, two names
    assert job.wait(timeout=60) is Status.FAILED and job.exit_code == 4
    assert job.logs() == "['inside']\n"  # not the host job, nor anything else of the store
    assert not links.exists() and not links.parent.exists()  # released once the job ended
    assert (job.run_dir / "output.log").read_text() == "['inside']\n"


def test_a_container_that_mounts_the_whole_store_is_refused(docker_client, docker_image, workdir, home):
    # containers created before each had a directory of its own mount the store's jobs directory:
    # a job in one could read and change every other job's files
    (home / "jobs").mkdir(parents=True, exist_ok=True)
    name = default_container_name(docker_image, str(workdir))
    docker_client.containers.run(
        docker_image,
        ["tail", "-f", "/dev/null"],
        name=name,
        detach=True,
        init=True,
        labels={"jupyter_trainer": "1", "jupyter_trainer.jobs_dir": str(home / "jobs")},
        volumes={str(workdir): {"bind": "/workspace"}, str(home / "jobs"): {"bind": "/jupyter_trainer/jobs"}},
    )
    with pytest.raises(TrainerError, match=f"can reach the job store.*docker rm -f {name}"):
        submit_detached(docker_spec("print('old mount')\n", workdir, docker_image), name="old")
    assert not (home / "jobs" / "old").exists()
    docker_client.containers.get(name).remove(force=True)
    job = submit_detached(docker_spec("print('new mount')\n", workdir, docker_image), name="old").job
    assert job.wait(timeout=60) is Status.COMPLETED and job.logs() == "new mount\n"


def test_stop_container_when_done_frees_the_container(docker_client, docker_image, workdir, home):
    job = submit_detached(
        docker_spec("print('trained')\n", workdir, docker_image, stop_container_when_done=True), name="once"
    ).job
    assert job.wait(timeout=60) is Status.COMPLETED
    container = docker_client.containers.get(job.record.runtime["container_id"])
    wait_for(lambda: container.reload() or container.status == "exited", timeout=30, what="the container to stop")
    assert get_job("once").status is Status.COMPLETED and get_job("once").logs() == "trained\n"
    # the next job starts the stopped container again
    again = submit_detached(docker_spec("print('again')\n", workdir, docker_image), name="again").job
    assert again.wait(timeout=60) is Status.COMPLETED and again.logs() == "again\n"


def test_stop_container_when_done_waits_for_other_jobs(docker_client, docker_image, workdir, home):
    long = submit_detached(docker_spec("import time\ntime.sleep(4)\n", workdir, docker_image), name="long").job
    wait_for(lambda: long.status is Status.RUNNING, what="the long job to run")
    short = submit_detached(
        docker_spec("print(1)\n", workdir, docker_image, stop_container_when_done=True), name="short"
    ).job
    assert short.wait(timeout=60) is Status.COMPLETED
    container = docker_client.containers.get(short.record.runtime["container_id"])
    assert container.status == "running" and long.status is Status.RUNNING
    assert long.wait(timeout=60) is Status.COMPLETED


TERM_HANDLING_MAIN = "import signal, time\nsignal.signal(signal.SIGTERM, lambda *_: exit(0))\ntime.sleep(10**6)\n"


@pytest.mark.parametrize(
    "main, init",
    [(["sleep", "infinity"], True), (["python3", "-c", TERM_HANDLING_MAIN], False)],
    ids=["with an init", "a main process that handles TERM"],
)
def test_stop_container_when_done_in_a_container_it_did_not_create(docker_client, docker_image, workdir, home, main, init):
    foreign = docker_client.containers.run(docker_image, main, detach=True, init=init)
    try:
        spec = docker_spec("print('trained')\n", workdir, container=foreign.name, stop_container_when_done=True)
        job = submit_detached(spec, name="guest").job
        assert job.wait(timeout=60) is Status.COMPLETED
        wait_for(lambda: foreign.reload() or foreign.status == "exited", timeout=30, what="the container to stop")
        assert Job.load("guest").logs() == "trained\n"
    finally:
        foreign.remove(force=True)


def test_stop_container_when_done_is_refused_where_the_container_cannot_stop_itself(docker_client, docker_image, workdir, store):
    foreign = docker_client.containers.run(docker_image, ["sleep", "infinity"], detach=True)  # PID 1 ignores TERM
    try:
        spec = docker_spec("print(1)\n", workdir, container=foreign.name, stop_container_when_done=True)
        with pytest.raises(InvalidOption) as info:
            submit_detached(spec, name="x")
        assert "cannot stop itself" in str(info.value) and "--init" in str(info.value) and "\n" not in str(info.value)
        assert store.names() == []
        submit_detached(docker_spec("print(1)\n", workdir, container=foreign.name), name="x")  # without it, fine
    finally:
        foreign.remove(force=True)


def test_stop_container_when_done_waits_for_other_stores_jobs(docker_client, docker_image, workdir, home, tmp_path):
    from jupyter_trainer.core.store import JobStore

    long = submit_detached(docker_spec("import time\ntime.sleep(6)\n", workdir, docker_image), name="long").job
    wait_for(lambda: long.status is Status.RUNNING, what="the long job to run")
    other_store = JobStore(tmp_path / "another-home")  # another user's, say, with the same image and directory
    spec = docker_spec("print(1)\n", workdir, container=long.record.runtime["container_name"], stop_container_when_done=True)
    short = submit_detached(spec, name="short", store=other_store).job
    assert short.record.runtime["mounted"] is False  # its files are copied in: the container mounts the first store
    assert short.wait(timeout=60) is Status.COMPLETED
    container = docker_client.containers.get(long.record.runtime["container_id"])
    assert container.status == "running" and long.status is Status.RUNNING
    assert long.wait(timeout=60) is Status.COMPLETED


def test_stop_with_container(docker_client, docker_image, workdir, home):
    job = submit_detached(docker_spec("import time\ntime.sleep(600)\n", workdir, docker_image), name="sleeper").job
    wait_for(lambda: job.status is Status.RUNNING, what="the job to run")
    job.stop(container=True)
    assert job.wait(timeout=30) is Status.STOPPED
    container = docker_client.containers.get(job.record.runtime["container_id"])
    assert container.status == "exited"


def test_removed_container_makes_the_job_lost(docker_client, docker_image, workdir, home):
    job = submit_detached(docker_spec("import time\ntime.sleep(600)\n", workdir, docker_image), name="orphan").job
    wait_for(lambda: job.status is Status.RUNNING, what="the job to run")
    docker_client.containers.get(job.record.runtime["container_id"]).remove(force=True)
    job = get_job("orphan")
    assert job.status is Status.LOST and "was removed" in job.reason


def test_container_it_did_not_create_is_used_as_is(docker_client, docker_image, workdir, home):
    foreign = docker_client.containers.run(docker_image, ["sleep", "infinity"], detach=True, init=True)
    try:
        script = "import os\nprint('inside', os.environ['K'])\nraise SystemExit(5)\n"
        job = submit_detached(docker_spec(script, workdir, container=foreign.name, env=["K=v"]), name="guest").job
        assert job.record.runtime["mounted"] is False
        assert job.wait(timeout=60) is Status.FAILED and job.exit_code == 5
        assert job.logs() == "inside v\n" and job.logs(tail=1) == "inside v\n"
        lines = list(Job.load("guest").follow())
        assert lines == ["inside v"]
        foreign.stop(timeout=1)  # its log is still read, from the stopped container's file system
        assert Job.load("guest").logs() == "inside v\n" and Job.load("guest").logs(tail=1) == "inside v\n"
        foreign.remove(force=True)
        with pytest.raises(TrainerError, match="was removed"):
            Job.load("guest").logs()
    finally:
        with contextlib.suppress(Exception):
            foreign.remove(force=True)


def test_missing_image_is_one_clear_error_and_no_record(docker_client, docker_image, workdir, store):
    with pytest.raises(ImageNotFound) as info:
        submit_detached(docker_spec("print(1)\n", workdir, "jupyter-trainer-no-such-image:1"), name="x")
    assert "\n" not in str(info.value) and "could not be pulled" in str(info.value)
    assert store.names() == []


def test_unknown_container_without_image(docker_client, docker_image, workdir, store):
    with pytest.raises(InvalidOption, match="no container named 'nobody-here'"):
        submit_detached(docker_spec("print(1)\n", workdir, container="nobody-here"), name="x")
    assert store.names() == []


def test_gpus_without_a_gpu_runtime(docker_client, docker_image, workdir, store):
    if docker_client.info().get("Runtimes", {}).get("nvidia"):
        pytest.skip("this engine has an NVIDIA runtime")
    spec = build_spec("print(1)\n", host=False, image=docker_image, container=None, workdir=str(workdir), gpus="all")
    with pytest.raises(BackendUnavailable) as info:
        submit_detached(spec, name="gpu")
    assert "GPU" in str(info.value) and "\n" not in str(info.value)
    assert store.names() == []


def test_unreachable_engine(workdir, store, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(BackendUnavailable, match="no Docker engine reachable at unix:///nonexistent"):
        submit_detached(docker_spec("print(1)\n", workdir, "python:3.11-slim"), name="x")
    assert store.names() == []


def test_an_answer_cut_short_is_never_taken_for_the_whole(docker_client, docker_image):
    """A log read through the engine whose answer ends early (a connection reset, a job's replaced
    tools) must not pass for a short log: a reader would think the log was truncated."""
    from jupyter_trainer.backends.docker.in_container import run_in
    from jupyter_trainer.errors import BackendUnavailable

    container = docker_client.containers.run(docker_image, ["sleep", "300"], detach=True, init=True)
    try:
        assert run_in(container, 'printf "%s" "$1"', "whole answer", whole=True) == b"whole answer"
        assert run_in(container, "head -c 5 /dev/zero", limit=5, whole=True) == b"\0" * 5  # all that was asked for
        # the answer's shell is killed half way: part of it came, and it ended without its mark
        with pytest.raises(BackendUnavailable, match="gave no whole answer"):
            run_in(container, 'printf "part of it"; kill -9 $PPID; sleep 1; printf " and the rest"', whole=True)
    finally:
        container.remove(force=True)
