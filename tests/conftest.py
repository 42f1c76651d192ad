import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_trainer.backends import _instances, register_backend
from jupyter_trainer.backends.fake import FakeBackend
from jupyter_trainer.store import JobStore

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TEST_IMAGE = os.environ.get("JUPYTER_TRAINER_TEST_IMAGE", "jupyter-trainer-test:bookworm-pip")
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path, monkeypatch):
    path = tmp_path / "home"
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(path))
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
    backend = FakeBackend()
    register_backend("fake", backend)
    yield backend
    _instances.pop("fake", None)


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
def docker_client():
    problem = _engine_problem()
    if problem:
        if IN_CI:
            pytest.fail(f"Docker tests must run in CI: {problem}")
        pytest.skip(problem)
    import docker

    return docker.from_env()


@pytest.fixture
def docker_image(docker_client, home):
    """The test image; containers created for this test's store are removed afterwards."""
    yield TEST_IMAGE
    jobs_dir = str(home / "jobs")
    for container in docker_client.containers.list(all=True, filters={"label": "jupyter_trainer"}):
        if container.labels.get("jupyter_trainer.jobs_dir") == jobs_dir:
            container.remove(force=True)


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
