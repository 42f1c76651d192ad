"""The example notebooks run top to bottom in a real kernel, and the README's demo runs."""

import os
import re
import shutil
import subprocess

import nbformat
import pytest
from conftest import IN_CI, REPO, TEST_IMAGE
from nbclient import NotebookClient


def execute(name, cwd):
    """Run example_notebooks/NAME from a copy in `cwd`; return the text of all its outputs."""
    shutil.copy(REPO / "example_notebooks" / name, cwd / name)
    notebook = nbformat.read(cwd / name, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )


def test_train_detached_notebook(docker_client, docker_image, tmp_path, home, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_IMAGE", TEST_IMAGE)
    outputs = execute("train_detached.ipynb", tmp_path)
    assert "training in a container from " + TEST_IMAGE in outputs
    assert "saved model.json" in outputs and "completed 0" in outputs
    assert (tmp_path / "model.json").exists()  # written in /workspace, which is the notebook's directory


def test_sagemaker_fit_notebook(docker_client, docker_image, tmp_path, home, monkeypatch):
    __import__("sagemaker") if IN_CI else pytest.importorskip("sagemaker")
    monkeypatch.setenv("JUPYTER_TRAINER_SAGEMAKER_IMAGE", TEST_IMAGE)
    outputs = execute("sagemaker_fit.ipynb", tmp_path)
    assert "completed 0" in outputs and "epoch 29 loss" in outputs
    assert "'w': 2.9" in outputs or "'w': 3.0" in outputs, outputs[-2000:]


def test_bring_your_own_container_notebook(docker_client, docker_image, tmp_path, home, monkeypatch):
    """The image of example_notebooks/byoc_image, built on the test image, trained by its own
    `train` in local mode; then failed on an empty channel, with the reason it wrote."""
    __import__("sagemaker") if IN_CI else pytest.importorskip("sagemaker")
    shutil.copytree(REPO / "example_notebooks" / "byoc_image", tmp_path / "byoc_image")
    monkeypatch.setenv("JUPYTER_TRAINER_BYOC_BASE", TEST_IMAGE)
    try:
        outputs = execute("bring_your_own_container.ipynb", tmp_path)
    finally:
        with __import__("contextlib").suppress(Exception):
            docker_client.images.remove("byoc-trainer:example", force=True)
    assert "completed 0" in outputs and "epoch 200 loss" in outputs, outputs[-3000:]
    assert "'rows': 20, 'epochs': 200" in outputs, outputs[-2000:]
    assert "failed · no training data: no x,y rows in /opt/ml/input/data/training/*.csv" in outputs, outputs[-2000:]


def run_demo(tmp_path, **env):
    env = {**os.environ, "JUPYTER_TRAINER_DEMO_DIR": str(tmp_path), **env}
    result = subprocess.run(
        ["bash", str(REPO / "example_notebooks" / "run_demo.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "epoch  40 loss" in result.stdout and "saved model.json" in result.stdout
    assert (tmp_path / "model.json").exists()
    return result.stdout


def test_readme_demo_trains_in_a_container_and_removes_it(docker_client, docker_image, tmp_path, home):
    out = run_demo(tmp_path, JUPYTER_TRAINER_IMAGE=TEST_IMAGE)
    placed = re.search(r"\(--image (\S+) --container (jt-demo-[0-9-]+)\) from an IPython kernel, which then exits", out)
    assert placed and placed[1] == TEST_IMAGE, out
    assert "backend    docker" in out and "status     completed" in out
    assert "removing what the demo created: job demo-" in out and f"and container {placed[2]}" in out
    assert docker_client.containers.list(all=True, filters={"name": placed[2]}) == []
    assert not (home / "jobs").exists() or os.listdir(home / "jobs") == []


def test_readme_demo_without_an_engine_says_why_and_trains_here(tmp_path, home):
    out = run_demo(tmp_path, DOCKER_HOST="unix:///nonexistent/docker.sock")
    reason = next(line for line in out.splitlines() if "no Docker engine answers" in line)
    assert "/nonexistent/docker.sock" in reason and "training on this machine (--host)" in reason and "DOCKER_HOST" in reason
    assert "(--host) from an IPython kernel, which then exits" in out
    assert "backend    host" in out and "status     completed" in out


def test_readme_demo_names_why_with_debians_docker_client(docker_client, tmp_path, home):
    """Debian bookworm's docker 20.10 prints 'Cannot connect …' on stdout and only 'errors pretty printing
    info' on stderr: the demo's one line must still say why (the client is the real one, from the
    remote-host image that .ci/run builds with Debian's docker.io)."""
    import io
    import tarfile

    from remote_host import IMAGE as DEBIAN_DOCKER_IMAGE

    try:
        docker_client.images.get(DEBIAN_DOCKER_IMAGE)
    except Exception as exc:  # noqa: BLE001
        if IN_CI:
            pytest.fail(f"{DEBIAN_DOCKER_IMAGE} must exist in CI: {exc}")
        pytest.skip(f"{DEBIAN_DOCKER_IMAGE} missing (bash .ci/build-remote-host-image builds it)")
    container = docker_client.containers.create(DEBIAN_DOCKER_IMAGE, "true")
    try:
        stream, _ = container.get_archive("/usr/bin/docker")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:  # (no filter= before 3.11.4)
            (tmp_path / "bin").mkdir()
            (tmp_path / "bin" / "docker").write_bytes(archive.extractfile("docker").read())
            (tmp_path / "bin" / "docker").chmod(0o755)
    finally:
        container.remove(force=True)
    client = subprocess.run([tmp_path / "bin" / "docker", "--version"], capture_output=True, text=True)
    assert "20.10" in client.stdout, client.stdout
    out = run_demo(
        tmp_path / "demo",
        DOCKER_HOST="unix:///nonexistent/docker.sock",
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
    )
    reason = next(line for line in out.splitlines() if "no Docker engine answers" in line)
    assert "Cannot connect to the Docker daemon at unix:///nonexistent/docker.sock" in reason, reason
    assert "errors pretty printing" not in reason and "(--host) from an IPython kernel" in out
