"""Hostile review of the GPU line with containers (hostile36): a container killed under a --gpus
job that runs, and under one that waits. See test_lines_docker.py."""

import pytest
from conftest import wait_for
from test_lines_docker import ON_HOST, gpus_of, in_container, status, submit

from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import get_job

pytestmark = pytest.mark.docker


def container_of(docker_client, name):
    return docker_client.containers.get(get_job(name).record.runtime["container_id"])


def test_a_container_killed_under_a_running_gpu_job_lets_its_gpu_go_and_the_job_is_not_running(docker_image, docker_client, workdir, home, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    held = submit("held", workdir, in_container(docker_image))
    assert gpus_of(held) == "0"
    behind = submit("behind", workdir, ON_HOST)
    wait_for(lambda: "waiting for 1 GPU; next in line" in get_job("behind").reason, what="behind to wait")
    container_of(docker_client, "held").kill()
    assert gpus_of(behind) == "0"
    ended = wait_for(lambda: get_job("held").status.is_final and get_job("held"), timeout=60, what="held to be seen ended")
    assert ended.status is not Status.COMPLETED, (ended.status, ended.reason)
    (workdir / "release-behind").touch()
    assert get_job("behind").wait(timeout=60) is Status.COMPLETED


def test_a_container_killed_under_a_waiting_gpu_job_takes_it_out_of_the_line(docker_image, docker_client, workdir, home, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    holder = submit("holder", workdir, ON_HOST)
    assert gpus_of(holder) == "0"
    waiting = submit("waiting", workdir, in_container(docker_image))
    wait_for(lambda: "waiting for 1 GPU; next in line" in get_job("waiting").reason, timeout=60, what="the container job to wait")
    after = submit("after", workdir, ON_HOST)
    wait_for(lambda: "waiting for 1 GPU; 1 job ahead" in get_job("after").reason, what="after to wait behind it")
    container_of(docker_client, "waiting").kill()
    wait_for(lambda: "next in line" in get_job("after").reason, what="after to move up")
    gone = wait_for(lambda: get_job("waiting").status.is_final and get_job("waiting"), timeout=60, what="the killed job to be seen ended")
    assert gone.status is not Status.COMPLETED and gone.record.started_at is None, (gone.status, gone.reason)
    assert "gpus " not in waiting.logs()
    (workdir / "release-holder").touch()
    assert gpus_of(after) == "0"
    (workdir / "release-after").touch()
    assert get_job("after").wait(timeout=60) is Status.COMPLETED
    assert status("waiting") is gone.status


DAEMON = """
import os, time
print("gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
os.wait()
"""


def test_a_container_job_that_ends_leaving_a_daemon_in_its_container_lets_its_gpu_go(docker_image, workdir, home, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    leaver = submit("leaver", workdir, in_container(docker_image), script=DAEMON)
    assert gpus_of(leaver) == "0"
    assert leaver.wait(timeout=60) is Status.COMPLETED
    after = submit("after", workdir, ON_HOST)
    assert gpus_of(after) == "0"
    (workdir / "release-after").touch()
    assert get_job("after").wait(timeout=60) is Status.COMPLETED


def test_a_running_container_jobs_supervisor_killed_keeps_its_gpu_until_the_job_ends(docker_image, docker_client, workdir, home, monkeypatch):
    from jupyter_trainer.backends.base import read_supervisor_facts

    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    held = submit("held", workdir, in_container(docker_image))
    assert gpus_of(held) == "0"
    behind = submit("behind", workdir, ON_HOST)
    wait_for(lambda: "waiting for 1 GPU; next in line" in get_job("behind").reason, what="behind to wait")
    supervisor = read_supervisor_facts(get_job("held").run_dir).supervisor_pid
    assert container_of(docker_client, "held").exec_run(["sh", "-c", f"kill -KILL {supervisor}"]).exit_code == 0
    wait_for(lambda: container_of(docker_client, "held").exec_run(["sh", "-c", f"kill -0 {supervisor}"]).exit_code != 0, what="the supervisor gone")
    assert get_job("held").status is Status.RUNNING, get_job("held").reason
    assert "waiting for 1 GPU; next in line" in get_job("behind").reason and "gpus " not in behind.logs()
    (workdir / "release-held").touch()  # the job ends with nobody to record it: its GPU goes all the same
    assert gpus_of(behind) == "0"
    ended = wait_for(lambda: get_job("held").status is not Status.RUNNING and get_job("held"), timeout=60, what="held no longer running")
    assert ended.status.is_final, (ended.status, ended.reason)
    (workdir / "release-behind").touch()
    assert get_job("behind").wait(timeout=60) is Status.COMPLETED
