"""--restarts against unlucky timing and hostile jobs: looks racing a container's restart, jobs
that kill their own container or tamper with the keeper's files, odd names and values.

On the private Docker engine (conftest's `private_docker`), as tests/test_restarts.py, whose
checkpointing script and helpers these tests share.
"""

import threading
import time

from test_restarts import STEPS, assert_every_step_once, container_of, status_json, submit, wait_for_step

from jupyter_trainer.backends.docker import restarts as keeper_side
from jupyter_trainer.job import get_job
from jupyter_trainer.jobs import Status

# -- a look while the container is down for a moment ---------------------------------------


def test_a_look_while_docker_restart_has_the_container_down_loses_nothing(private_docker, workdir, home):
    """`docker restart` is a stop, then a start: a look in between (a widget polls every 2 s) sees
    the container stopped. The job is not lost then, and its keeper starts it again."""
    engine = private_docker
    job = submit(STEPS, workdir, "between", args=("14",), restarts=2)
    wait_for_step(job, 2)
    container = container_of(engine, job)
    container.stop(timeout=2)  # as the first half of `docker restart`
    assert get_job("between").status is Status.RUNNING, get_job("between").reason
    container.start()
    assert job.wait(timeout=90) is Status.COMPLETED, job.reason
    assert_every_step_once(job, workdir, 14)
    assert status_json("between")["restarts"] == 1


def test_a_container_stopped_by_hand_is_lost_once_it_stays_down(private_docker, workdir, home, monkeypatch):
    monkeypatch.setattr(keeper_side, "RESTART_GAP_SECONDS", 1.0)
    engine = private_docker
    job = submit(STEPS, workdir, "left-down", args=("40",), restarts=2)
    wait_for_step(job, 1)
    container_of(engine, job).stop(timeout=2)
    time.sleep(1.5)
    lost = get_job("left-down")
    assert lost.status is Status.LOST and "was stopped at" in lost.reason and "exit code 143" in lost.reason, lost.reason


def test_status_looks_during_docker_restarts_never_lose_the_job_nor_fail(private_docker, workdir, home):
    """Two lookers (kernels, CLIs) asking all the time while the container is restarted again and
    again: every look answers, and the job completes, every step once."""
    engine = private_docker
    job = submit(STEPS, workdir, "looked", args=("30",), restarts=10)
    wait_for_step(job, 2)
    failures, statuses = [], set()
    done = threading.Event()

    def look():
        while not done.is_set():
            try:
                statuses.add(get_job("looked").status)
            except Exception as exc:  # what `status` would print as an error
                failures.append(repr(exc))

    lookers = [threading.Thread(target=look) for _ in range(2)]
    for looker in lookers:
        looker.start()
    try:
        for _ in range(5):
            container_of(engine, job).restart(timeout=2)
            time.sleep(0.7)
    finally:
        done.set()
        for looker in lookers:
            looker.join()
    assert not failures, failures[:3]
    assert statuses == {Status.RUNNING}, statuses
    assert job.wait(timeout=90) is Status.COMPLETED, job.reason
    assert_every_step_once(job, workdir, 30)
    assert status_json("looked")["restarts"] == 5
