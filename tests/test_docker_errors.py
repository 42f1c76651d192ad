"""The one translation of docker-py's and paramiko's errors (backends/docker/errors.py) and the
way every call reaches an engine (Clients.calling): one wording per failure, the cause told to a
submission only, a lost engine's clients dropped, a remote one left to rest."""

import threading
import time

import docker
import paramiko
import pytest

from jupyter_trainer.backends.docker import clients as clients_module
from jupyter_trainer.backends.docker.clients import Clients
from jupyter_trainer.backends.docker.errors import LIST, LOOK, REACH, START, STOP, translate
from jupyter_trainer.backends.docker.hosts import Engine
from jupyter_trainer.errors import BackendUnavailable, TrainerError, Unreachable

LOCAL = Engine("unix:///nonexistent/docker.sock")
REMOTE = Engine("ssh://me@gpu1.example.org", name="gpu1")


def refusal(message="No such container: abc"):
    response = type("Response", (), {"status_code": 409, "reason": "Conflict", "url": "x"})()
    return docker.errors.APIError("409 Client Error", response=response, explanation=message)


def test_a_refusal_is_the_engine_saying_no():
    error = translate(refusal(), REMOTE, STOP)
    assert type(error) is TrainerError and str(error) == "Docker refused to stop the job: No such container: abc"


def test_a_host_with_no_session_to_spare_is_up():
    busy = OSError("channel failed")
    busy.__cause__ = paramiko.ChannelException(2, "Connect failed")
    error = translate(busy, REMOTE, LOOK)
    assert not isinstance(error, Unreachable) and "no SSH session to spare" in str(error)


def test_this_machines_engine_gone():
    cause = ConnectionRefusedError(111, "Connection refused")
    looked = translate(cause, LOCAL, LOOK)
    assert type(looked) is BackendUnavailable
    # a look repeats every poll and becomes the job's reason: never the cause, which varies
    assert str(looked) == "no Docker engine reachable at unix:///nonexistent/docker.sock: check that Docker is running"
    submitted = str(translate(cause, LOCAL, REACH))
    assert "(Connection refused" in submitted or "([Errno 111] Connection refused)" in submitted
    assert submitted.endswith("start Docker or set DOCKER_HOST, or use --host to run without a container")
    assert "while trying to stop the job" in str(translate(cause, LOCAL, STOP))


def test_a_remote_host_gone_names_it():
    error = translate(TimeoutError("no answer within 10 s"), REMOTE, LIST)
    assert isinstance(error, Unreachable) and error.host == "gpu1"
    assert error.message == "cannot reach the Docker engine on gpu1 while trying to list its containers"
    lost = translate(EOFError(), REMOTE, START)
    assert isinstance(lost, Unreachable) and "so nothing was recorded" in lost.message and "docker ps" in lost.hint
    # this machine's engine lost mid-start: nothing can run there unrecorded, no such warning
    assert "nothing was recorded" not in str(translate(EOFError(), LOCAL, START))


def test_a_remote_host_that_failed_rests_and_a_local_engine_is_asked_again(monkeypatch):
    attempts = []

    def connect(engine, sessions=None):
        attempts.append(engine.url)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(clients_module, "connect", connect)
    clients = Clients()
    for _ in range(3):
        with pytest.raises(Unreachable, match="cannot reach the Docker engine on gpu1"):
            with clients.calling(REMOTE, REACH):
                pass
    assert attempts == [REMOTE.url]  # asked once: the next RETRY_AFTER_SECONDS cost nothing
    with pytest.raises(Unreachable, match="did not answer a moment ago"):
        with clients.calling(REMOTE, REACH):
            pass
    for _ in range(2):
        with pytest.raises(BackendUnavailable, match="no Docker engine reachable"):
            with clients.calling(LOCAL, LOOK):
                pass
    assert attempts == [REMOTE.url, LOCAL.url, LOCAL.url]  # Docker may just have started


def test_a_lost_engine_drops_its_clients_and_a_refusal_keeps_them(monkeypatch):
    made = []

    class Client:
        closed = False

        def close(self):
            self.closed = True

    def connect(engine, sessions=None):
        made.append(Client())
        return made[-1]

    monkeypatch.setattr(clients_module, "connect", connect)
    clients = Clients()
    with pytest.raises(TrainerError, match="refused"):
        with clients.calling(LOCAL, STOP):
            raise refusal()
    with clients.calling(LOCAL, LOOK) as client:
        assert client is made[0]  # the engine answered: the same client
    with pytest.raises(BackendUnavailable):
        with clients.calling(LOCAL, LOOK):
            raise ConnectionResetError(104, "Connection reset by peer")
    assert made[0].closed
    with clients.calling(LOCAL, LOOK) as client:
        assert client is made[1]
    # our own errors pass as they are
    with pytest.raises(TrainerError, match="^mine$"):
        with clients.calling(LOCAL, LOOK):
            raise TrainerError("mine")


def test_threads_that_need_a_client_being_made_wait_for_that_one_handshake(monkeypatch):
    """A view's status check (its thread) and the poller's log read both need the host's first
    client: one handshake, whose outcome both take; a failed one leaves the host resting for both."""
    handshakes = []
    answer = threading.Event()

    class Client:
        def close(self):
            pass

    def connect(engine, sessions=None):
        handshakes.append(engine.url)
        answer.wait(5)
        if fail:
            raise TimeoutError("no answer within 10 s")
        return Client()

    def call(clients, got):
        try:
            with clients.calling(REMOTE, LOOK) as client:
                got.append(client)
        except Unreachable as error:
            got.append(error)

    monkeypatch.setattr(clients_module, "connect", connect)
    for fail in (False, True):
        clients, got = Clients(), []
        handshakes.clear()
        answer.clear()
        callers = [threading.Thread(target=call, args=(clients, got)) for _ in range(2)]
        for caller in callers:
            caller.start()
        time.sleep(0.2)
        answer.set()
        for caller in callers:
            caller.join(10)
        assert handshakes == [REMOTE.url]
        if fail:
            assert all(isinstance(outcome, Unreachable) for outcome in got) and len(got) == 2
        else:
            assert len(got) == 2 and got[0] is got[1]


@pytest.mark.parametrize(
    "status, words",
    [
        (409, "Container abc is not running"),
        (500, "Container abc is not running: Exited (143) Less than a second ago"),  # stopped between an exec's create and start
        (409, "Container abc is restarting, wait until the container is running"),
        (409, "Container abc is paused, unpause the container before exec"),
    ],
)
def test_a_container_changing_state_under_a_look_is_looked_at_again(monkeypatch, status, words):
    """A look that the engine refuses for the state the container is in now, not the one the look
    found, is made again: the status is not a failure."""
    from jupyter_trainer.backends.base import Observation
    from jupyter_trainer.backends.docker.backend import DockerBackend

    refusal = docker.errors.APIError("refused", response=type("Answer", (), {"status_code": status, "reason": "", "url": ""})(), explanation=words)
    answers = [refusal, Observation(alive=True, started=True)]

    def look(self, record, run_dir):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise TrainerError(f"Docker refused to answer: {words}") from answer
        return answer

    monkeypatch.setattr(DockerBackend, "_look", look)
    monkeypatch.setattr("jupyter_trainer.backends.docker.backend.time.sleep", lambda seconds: None)
    assert DockerBackend().observe(None, None).alive is True and not answers


def test_another_refusal_of_a_look_is_said():
    from jupyter_trainer.backends.docker.errors import changed_under_the_look

    refusal = docker.errors.APIError("refused", response=type("Answer", (), {"status_code": 500, "reason": "", "url": ""})(), explanation="no space left on device")
    assert not changed_under_the_look(refusal) and not changed_under_the_look(None)


def test_a_container_restarted_between_an_execs_creation_and_start_is_looked_at_again(docker_client, docker_image):
    """The engine forgets a container's execs when it restarts: a look's exec made just before a
    `docker restart` is refused with 404 'No such exec instance', which is the container changing
    under the look, not a failure to show (a status look said "Docker refused to answer")."""
    from jupyter_trainer.backends.docker.errors import changed_under_the_look

    container = docker_client.containers.run(docker_image, ["sleep", "60"], detach=True)
    try:
        exec_id = docker_client.api.exec_create(container.id, ["true"])["Id"]
        container.restart(timeout=0)
        forgotten = []
        for call in (docker_client.api.exec_start, docker_client.api.exec_inspect):
            with pytest.raises(docker.errors.APIError) as refused:
                call(exec_id)
            forgotten.append(refused.value)
        assert all(changed_under_the_look(error) for error in forgotten), [str(error) for error in forgotten]
        # an exec of a container that is not there is no such change
        gone = docker.errors.NotFound("404", response=type("Answer", (), {"status_code": 404, "reason": "", "url": ""})(), explanation="No such container: abc")
        assert not changed_under_the_look(gone)
    finally:
        container.remove(force=True)
