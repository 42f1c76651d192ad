"""Lines under attack: what a running job (or an unlucky user, or the machine) does to the lines
directory, its own run files, or the clock, never puts two jobs on one GPU, never crashes a view,
and never makes another job fail or wait for nothing. See test_lines.py for the machine used here."""

import os
import shutil
import time

import pytest
from conftest import wait_for
from test_lines import RECHECK, Lines, answering, cli_text, the_line

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


def test_the_lines_dir_wiped_under_waiting_jobs_loses_none_of_them_nor_their_order(machine, tmp_path, monkeypatch):
    swap, _ = answering(tmp_path, monkeypatch, "synthetic-4gpus")  # GPU 1 busy outside us
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "1")
    machine.submit_in_turn("w1", gpus="1")
    machine.submit_in_turn("w2", gpus="1")
    gone = machine.root.with_name("gone")
    os.rename(machine.root, gone)  # a job's clean-up (or a tmp cleaner) takes everything
    shutil.rmtree(gone)
    wait_for(lambda: the_line(machine.queue())[1] == ["w1", "w2"], what="both back in line")
    machine.submit_in_turn("late", gpus="1")
    for name in ("w1", "w2", "late"):
        assert machine.status(name)["status"] == "pending", machine.status(name)["reason"]
    assert the_line(machine.queue())[1] == ["w1", "w2", "late"]
    assert "GPU line: 0 running, 3 waiting" in cli_text(["queue"], machine.store)
    swap("a800-580.119.02-idle")
    assert machine.wait_started("w1", timeout=3 * RECHECK)["CUDA_VISIBLE_DEVICES"] == "1"
    machine.go("w1")
    machine.wait_started("w2")
    machine.go("w2")
    machine.wait_started("late")


@pytest.mark.xfail(strict=True, reason="a holder's token and ticket both removed leave nothing of it in the lines; only nvidia-smi sees it")
def test_the_lines_dir_wiped_under_a_holder_does_not_give_its_gpu_again(machine):
    machine.submit_in_turn("h", gpus="1")
    machine.wait_started("h")
    machine.submit_in_turn("w", gpus="1")
    gone = machine.root.with_name("gone")
    os.rename(machine.root, gone)
    shutil.rmtree(gone)
    time.sleep(3)
    assert machine.started("w") is None, "two jobs on GPU 0"


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


def test_a_place_kept_before_the_clock_went_back_an_hour_does_not_hold_the_line_an_hour(tmp_path):
    root = str(tmp_path / "lines")
    line = lines.line_dir(root)
    lines.ensure_line(root, line)
    then = time.time_ns() + 3600 * 10**9  # the clock read an hour later when both came, then was set back
    lines.reserve_place(line, then, "a" * 16, {"job": "never-came"})
    fd, mine = lines.take_ticket(line, {"job": "next"}, then + 1)
    try:
        ahead = lines.live_waiting_ahead(line, mine)
        assert ahead == [] and lines.reserved_until(ahead) is None, ahead
        assert lines.line_now(line)[1] == [{"job": "next", "since": (then + 1) / 1e9}]
    finally:
        os.close(fd)


def test_a_lines_dir_of_another_user_that_is_not_sticky_is_refused_before_anything_is_recorded(tmp_path, monkeypatch):
    """Its owner could swap the tickets and tokens in it: refused in one line at submission, the
    store left as it was (the job was recorded and then failed in its waiter before)."""
    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.errors import InvalidOption
    from jupyter_trainer.jobs.submit import submit_detached

    root = tmp_path / "foreign-lines"
    root.mkdir(mode=0o755)
    os.chown(root, 12345, 12345)
    home = tmp_path / "home"
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(home))
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    spec = build_spec("print(1)\n", host=True, image=None, container=None, workdir=str(tmp_path), gpus="1")
    with pytest.raises(InvalidOption, match="belongs to another user and is not sticky"):
        submit_detached(spec, name="foreign")
    assert JobStore(home).runs("foreign") == [] and os.listdir(root) == []
