"""The example notebooks run top to bottom in a real kernel."""

import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, TEST_IMAGE


def execute(path, cwd, env_image=None):
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return notebook


def test_train_detached_notebook(docker_client, docker_image, tmp_path, home, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_IMAGE", TEST_IMAGE)
    source = REPO / "example_notebooks" / "train_detached.ipynb"
    shutil.copy(source, tmp_path / source.name)
    notebook = execute(tmp_path / source.name, tmp_path)
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    assert "training in a container from " + TEST_IMAGE in outputs
    assert "saved model.json" in outputs and "completed 0" in outputs
    assert (tmp_path / "model.json").exists()  # written in /workspace, which is the notebook's directory


def test_sagemaker_fit_notebook(docker_client, docker_image, tmp_path, home, monkeypatch):
    pytest.importorskip("sagemaker")
    monkeypatch.setenv("JUPYTER_TRAINER_SAGEMAKER_IMAGE", TEST_IMAGE)
    source = REPO / "example_notebooks" / "sagemaker_fit.ipynb"
    shutil.copy(source, tmp_path / source.name)
    notebook = execute(tmp_path / source.name, tmp_path)
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    assert "completed 0" in outputs and "epoch 29 loss" in outputs
    assert "'w': 2.9" in outputs or "'w': 3.0" in outputs, outputs[-2000:]
