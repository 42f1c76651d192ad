import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from file_times import FileTimes, slowest_first
from leftovers import Leftovers, labelling_client
from private_engine import PrivateEngine
from private_engine import missing as private_engine_missing

from jupyter_trainer.backends import Backends
from jupyter_trainer.backends.fake import FakeBackend
from jupyter_trainer.core.store import JobStore

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TEST_IMAGE = os.environ.get("JUPYTER_TRAINER_TEST_IMAGE", "jupyter-trainer-test:bookworm-pip")
REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    config.pluginmanager.register(FileTimes(), "file_times")
    # CPython 3.11 (Debian bookworm's 3.11.2, and 3.11.7 too) can crash pytest while it formats a
    # failure (gh-106905, "AST constructor recursion depth mismatch"): under xdist the worker dies,
    # the run stops there and says nothing of the tests it ran. Python's own tracebacks do not
    if sys.version_info[:2] == (3, 11) and config.option.tbstyle == "auto":
        config.option.tbstyle = "native"


def pytest_collection_modifyitems(config, items):
    slowest_first(items)


def pytest_sessionstart(session):
    session.config.stash[LEFTOVERS] = Leftovers.before()


def pytest_sessionfinish(session, exitstatus):
    """No test may leave a container or a process behind: say which, remove them, fail the run."""
    before = session.config.stash.get(LEFTOVERS, None)
    if before is None or session.config.option.collectonly:
        return
    marker = str(session.config._tmp_path_factory.getbasetemp())
    containers, processes = before.left(marker)
    if not (containers or processes):
        return
    report = session.config.pluginmanager.get_plugin("terminalreporter")
    if report:
        report.ensure_newline()
        report.write_sep("=", "the tests left these behind (now removed)", red=True)
        for line in [*(f"container {c}" for c in containers), *(f"process {p}" for p in processes)]:
            report.write_line(line, red=True)
    before.remove(marker)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


LEFTOVERS = pytest.StashKey[Leftovers]()


@pytest.fixture
def home(tmp_path, monkeypatch):
    path = tmp_path / "home"
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(path))
    # the machine's lines are each test's own too (a user's jobs on this machine wait in the real ones)
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(tmp_path / "lines"))
    monkeypatch.delenv("JUPYTER_TRAINER_GPUS", raising=False)
    return path


@pytest.fixture
def store(home):
    return JobStore(home)


@pytest.fixture
def workdir(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def fake_backend():
    return FakeBackend()


@pytest.fixture
def backends(fake_backend):
    """The backends a test resolves jobs with: the real ones, and `fake_backend` under its name."""
    return Backends(fake=fake_backend)


@pytest.fixture
def quiet_comm(monkeypatch):
    """Widgets made without a frontend: their comms send nothing (a test reads their traits)."""
    import comm
    from comm.base_comm import BaseComm

    class QuietComm(BaseComm):
        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
            pass

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: QuietComm(*a, **k))


def wait_for(predicate, timeout=30.0, interval=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _engine_problem():
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any failure means: no engine to test against
        return f"no Docker engine reachable ({exc.__class__.__name__})"
    try:
        client.images.get(TEST_IMAGE)
    except Exception:
        return f"test image {TEST_IMAGE} missing (bash .ci/run builds it)"
    return None


@pytest.fixture(scope="session")
def docker_client(tmp_path_factory):
    """The engine; each container a test makes through it is labelled as this session's."""
    problem = _engine_problem()
    if problem:
        if IN_CI:
            pytest.fail(f"Docker tests must run in CI: {problem}")
        pytest.skip(problem)
    return labelling_client(str(tmp_path_factory.getbasetemp()))


@pytest.fixture
def docker_image(docker_client, home):
    """The test image; containers created for any store of this test (all under its tmp_path) are removed afterwards."""
    yield TEST_IMAGE
    test_dir = str(home.parent) + "/"
    for container in docker_client.containers.list(all=True, filters={"label": "jupyter_trainer"}, ignore_removed=True):
        if container.labels.get("jupyter_trainer.jobs_dir", "").startswith(test_dir):
            container.remove(force=True)


@pytest.fixture(scope="module")
def private_engine(docker_client):
    """A Docker engine of this module's own, holding the test image, for tests that stop or restart an
    engine: the machine's engine may be a user's and is never touched. Tests use it through
    `private_docker`."""
    problem = private_engine_missing()
    if problem:
        if IN_CI:
            pytest.fail(f"Docker engine tests must run in CI: {problem}")
        pytest.skip(f"cannot run a private Docker engine: {problem}")
    engine = PrivateEngine()
    try:
        try:
            engine.start()
            engine.load_image(docker_client, TEST_IMAGE)
        except Exception as exc:
            pytest.fail(f"the private Docker engine did not start: {exc}")
        yield engine
    finally:
        engine.close()


@pytest.fixture
def private_docker(private_engine, monkeypatch):
    """The private engine, where this test's Docker jobs run and which it may stop and restart.

    Afterwards the engine runs again as it started, without containers, and the docker backend talks
    to the machine's engine again."""
    monkeypatch.setenv("DOCKER_HOST", private_engine.url)  # the docker backend reads it at each use
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    monkeypatch.delenv("DOCKER_CERT_PATH", raising=False)
    try:
        yield private_engine
    finally:
        if not private_engine.running:
            private_engine.start()
        private_engine.remove_containers()
        if private_engine.args:
            private_engine.restart()  # without the test's --live-restore and such


def run_python(code, env=None, **kwargs):
    """Run code in a fresh interpreter (the way another kernel or process would)."""
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **(env or {})}, capture_output=True, text=True, **kwargs
    )


@pytest.fixture(params=["host", "docker"])
def where(request):
    """The options that place a job on each backend under test."""
    if request.param == "docker":
        return {"host": False, "image": request.getfixturevalue("docker_image")}
    return {"host": True, "image": None}


def placement_flags(where):
    return "--host" if where["host"] else f"--image {where['image']}"


def ipython_submitting(cell_line, script, env=None, magic="train_detached", **popen):
    """An IPython process that submits one cell, says SUBMITTED, then idles like an open kernel."""
    code = textwrap.dedent(
        f"""
        ip = get_ipython()
        ip.run_line_magic("load_ext", "jupyter_trainer")
        ip.run_cell_magic({magic!r}, {cell_line!r}, {script!r})
        print("SUBMITTED", flush=True)
        import time
        time.sleep(600)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "IPython", "--no-banner", "--quick", "-c", code],
        # a terminal's hangup ends a kernel, as it would under any shell: whatever the tests were
        # started under (nohup ignores SIGHUP, and its children would inherit that)
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
        **popen,
    )
    output = []
    for line in process.stdout:
        output.append(line)
        if line.startswith("SUBMITTED"):
            return process
    raise AssertionError("IPython did not submit the job:\n" + "".join(output))


SKLEARN_IMAGE = os.environ.get("JUPYTER_TRAINER_SKLEARN_IMAGE", "jupyter-trainer-test:bookworm-sklearn")
TORCH_IMAGE = os.environ.get("JUPYTER_TRAINER_TORCH_IMAGE", "jupyter-trainer-test:bookworm-torch")


def _extra_image(docker_client, image):
    try:
        docker_client.images.get(image)
    except Exception:
        message = f"test image {image} missing (bash .ci/run builds it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return image


@pytest.fixture(scope="session")
def sklearn_image(docker_client):
    """Debian's python3-sklearn, without SageMaker's training toolkit (bash .ci/run builds it)."""
    return _extra_image(docker_client, SKLEARN_IMAGE)


@pytest.fixture(scope="session")
def torch_image(docker_client):
    """Debian's python3-torch (with torchrun), without SageMaker's training toolkit."""
    return _extra_image(docker_client, TORCH_IMAGE)


@pytest.fixture(scope="module")
def remote(docker_client):
    """A remote host (tests/remote_host.py) holding the test image, shared by one module's tests."""
    from remote_host import RemoteHost, missing

    problem = missing(docker_client)
    if problem:
        if IN_CI:
            pytest.fail(f"the remote host tests must run in CI: {problem}")
        pytest.skip(f"cannot run a remote host: {problem}")
    host = RemoteHost(local=docker_client)  # its container is labelled as this session's
    try:
        try:
            host.start()
            host.load_image(TEST_IMAGE)
        except Exception as exc:
            pytest.fail(f"the remote host did not start: {exc}\n{host.log()}")
        yield host
    finally:
        host.close()


@pytest.fixture
def laptop(remote, home, monkeypatch, tmp_path):
    """This process and its subprocesses as the user's laptop: SSH set up for the remote host, the
    store in `home`, and the notebook's directory somewhere else."""
    for key, value in remote.environ().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    notebook_dir = tmp_path / "notebook"
    notebook_dir.mkdir()
    monkeypatch.chdir(notebook_dir)
    yield remote
    remote.start_sshd()  # whatever a test did to it
    remote.unblock_ssh()
    remote.exec("docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1; docker volume prune -af >/dev/null 2>&1")
