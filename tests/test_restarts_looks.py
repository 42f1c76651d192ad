"""--restarts: a look made while `docker restart` has the container down, at the two moments the
engine's answers disagree: its inspect says stopped, and its events, read a moment later, say it
has been started again already (the look's inspect was older than the start); or its events stop
at the container's death, before the engine has said its stop is done.

On the private Docker engine (conftest's `private_docker`), with the real container in each state.
"""

from test_restarts import STEPS, container_of, submit, wait_for_step

from jupyter_trainer.backends.docker import backend as docker_backend
from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import get_job


def test_a_look_whose_inspect_saw_the_container_stopped_before_it_started_again_keeps_it_running(private_docker, workdir, home, monkeypatch):
    engine = private_docker
    job = submit(STEPS, workdir, "stale", args=("20",), restarts=3)
    wait_for_step(job, 1)
    container = container_of(engine, job)
    container.stop(timeout=2)  # the first half of `docker restart`
    container.reload()
    stopped = container  # what the look's inspect answered
    container_of(engine, job).start()  # the second half, before the look asks for the events
    real_look = docker_backend.DockerBackend._look

    def look_with_the_inspect_made_in_between(self, record, run_dir):
        with monkeypatch.context() as inspecting:
            inspecting.setattr(type(engine.client.containers), "get", lambda *_: stopped)
            return real_look(self, record, run_dir)

    monkeypatch.setattr(docker_backend.DockerBackend, "_look", look_with_the_inspect_made_in_between)
    looked = get_job("stale")
    assert looked.status is Status.RUNNING, looked.reason


def test_a_look_at_a_container_dying_from_a_stop_whose_end_is_not_said_yet_keeps_it_running(private_docker, workdir, home):
    """`docker stop` (and restart) sends TERM, sees the container die, then says `stop`: in between,
    the engine's events end with the kill (TERM) and the death, as after `docker kill -s TERM`."""
    engine = private_docker
    job = submit(STEPS, workdir, "dying", args=("20",), restarts=3)
    wait_for_step(job, 1)
    container = container_of(engine, job)
    container.kill(signal="SIGTERM")
    container.wait()
    looked = get_job("dying")
    assert looked.status is Status.RUNNING, looked.reason
