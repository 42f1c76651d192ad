"""Lines under attack: what a running job (or an unlucky user, or the machine) does to the lines
directory, its own run files, or the clock, never puts two jobs on one GPU, never crashes a view,
and never makes another job fail or wait for nothing. See test_lines.py for the machine used here."""

import os
import shutil
import time

import pytest
from conftest import wait_for
from test_lines import Lines, cli_text, held_by, the_line  # noqa: F401

from jupyter_trainer.core import lines


@pytest.fixture
def machine(tmp_path, monkeypatch, store, workdir):
    root = tmp_path / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    found = Lines(root, workdir, store)
    yield found
    found.end_all()


def gpu_line(machine):
    return lines.line_dir(str(machine.root))


def test_a_holder_that_deletes_its_token_does_not_hand_its_gpu_to_the_next(machine):
    machine.submit_in_turn("h", gpus="1")
    machine.wait_started("h")
    machine.submit_in_turn("w", gpus="1")
    token = os.path.join(gpu_line(machine), "tokens", "0")
    os.unlink(token)  # what `h` can do: the file is its user's
    open(token, "w").close()  # and a new one in its place (its close wakes the first in line)
    time.sleep(2)
    assert machine.started("w") is None, "two jobs on GPU 0"
    assert machine.status("w")["status"] == "pending"
    machine.go("h")
    assert machine.wait_started("w")["CUDA_VISIBLE_DEVICES"] == "0"


def test_the_lines_dir_wiped_under_waiting_jobs_loses_none_of_them(machine):
    machine.submit_in_turn("h", gpus="1")
    machine.wait_started("h")
    machine.submit_in_turn("w1", gpus="1")
    machine.submit_in_turn("w2", gpus="1")
    shutil.rmtree(machine.root)  # a job's clean-up (or a tmp cleaner) takes everything
    time.sleep(2)
    assert machine.status("w1")["status"] == "pending", machine.status("w1")["reason"]
    assert machine.status("w2")["status"] == "pending", machine.status("w2")
    assert "GPU line" in cli_text(["queue"], machine.store)
    machine.go("h")
    assert machine.wait_started("w1")["CUDA_VISIBLE_DEVICES"] == "0"
    assert machine.started("w2") is None
    machine.go("w1")
    assert machine.wait_started("w2")["CUDA_VISIBLE_DEVICES"] == "0"


def test_a_running_job_that_deletes_its_slots_token_does_not_let_one_more_run(machine):
    machine.submit_in_turn("q1", queue="hostile")
    machine.wait_started("q1")
    machine.submit_in_turn("q2", queue="hostile")
    token = os.path.join(lines.line_dir(str(machine.root), "hostile"), "tokens", "0")
    os.unlink(token)
    open(token, "w").close()
    time.sleep(2)
    assert machine.started("q2") is None, "two jobs running in a queue of at most 1"
    assert machine.status("q2")["reason"] == "waiting for a slot in queue hostile; next in line (1 of 1 running)"
    machine.go("q1")
    machine.wait_started("q2")
