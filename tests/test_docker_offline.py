"""Docker backend logic that needs no engine: run files shared through links that are never followed, which main processes stop on TERM, finding a supervisor in a `docker top` listing."""

import os

import pytest

from jupyter_trainer.backends.docker.backend import DockerBackend
from jupyter_trainer.backends.docker.in_container import stops_on_term
from jupyter_trainer.backends.docker.links import link_run, unlink_run
from jupyter_trainer.core.record import JobRecord
from jupyter_trainer.errors import CorruptRecord

FILES = ("script.py", "output.log")


def make_run(tmp_path):
    run_dir = tmp_path / "store" / "jobs" / "train" / "1"
    run_dir.mkdir(parents=True)
    for name in FILES:
        (run_dir / name).write_text(name)
    shared = tmp_path / "store" / "containers" / "jt-box"
    shared.mkdir(parents=True)
    return run_dir, shared


def make_victim(tmp_path):
    victim = tmp_path / "victim"
    (victim / "1").mkdir(parents=True)
    for name in (*FILES, "keep.txt"):
        (victim / "1" / name).write_text("precious")
    return victim


def test_links_are_made_and_removed(tmp_path):
    run_dir, shared = make_run(tmp_path)
    assert link_run(shared, "train", 1, run_dir, FILES)
    assert (shared / "train" / "1" / "output.log").stat().st_ino == (run_dir / "output.log").stat().st_ino
    assert oct((shared / "train").stat().st_mode & 0o777) == "0o700"
    unlink_run(shared, "train", 1, FILES)
    assert list(shared.iterdir()) == [] and sorted(os.listdir(run_dir)) == sorted(FILES)


def test_a_planted_link_is_never_followed(tmp_path):
    run_dir, shared = make_run(tmp_path)
    victim = make_victim(tmp_path)
    (shared / "train").symlink_to(victim)  # what the container could do in its directory
    unlink_run(shared, "train", 1, FILES)
    assert not link_run(shared, "train", 1, run_dir, FILES)  # so the files are copied in instead
    assert sorted(os.listdir(victim / "1")) == sorted((*FILES, "keep.txt"))
    assert all((victim / "1" / name).read_text() == "precious" for name in os.listdir(victim / "1"))
    # one level down too
    (shared / "train").unlink()
    (shared / "train").mkdir()
    (shared / "train" / "1").symlink_to(victim / "1")
    unlink_run(shared, "train", 1, FILES)
    assert sorted(os.listdir(victim / "1")) == sorted((*FILES, "keep.txt"))


def test_a_released_run_is_found_by_name_never_by_a_path_in_the_record(tmp_path):
    run_dir, shared = make_run(tmp_path)
    victim = make_victim(tmp_path)
    assert link_run(shared, "train", 1, run_dir, FILES)
    record = JobRecord(name="train", backend="docker", run=1)
    runtime = {
        "container_id": "c0ffee", "container_name": "jt-box", "container_started_at": "2026-01-01T00:00:00Z",
        "exec_id": "e", "run_dir": "/jupyter_trainer/jobs/train/1", "mounted": True,
    }  # fmt: skip
    for tampered in ("../../victim", "/", "..", "", 7):
        record.runtime = {**runtime, "shared_dir": tampered}
        with pytest.raises(CorruptRecord):  # never taken for a directory to release
            DockerBackend().release(record, run_dir)
    assert sorted(os.listdir(victim / "1")) == sorted((*FILES, "keep.txt"))
    assert (shared / "train" / "1" / "script.py").exists()
    record.runtime = {**runtime, "shared_dir": "jt-box"}
    DockerBackend().release(record, run_dir)
    assert not (shared / "train").exists() and (run_dir / "script.py").read_text() == "script.py"


def proc_status(name, caught):
    return f"Name:\t{name}\nState:\tS (sleeping)\nSigBlk:\t0000000000000000\nSigCgt:\t{caught}\n"


def test_which_main_processes_stop_on_term():
    assert not stops_on_term(proc_status("sleep", "0000000000000000"))
    assert not stops_on_term(proc_status("tail", "0000000000000002"))  # SIGINT only
    assert stops_on_term(proc_status("python3", "0000000180004002"))  # a TERM handler (bit 15)
    assert stops_on_term(proc_status("tini", "0000000000000000"))  # waits for signals instead
    assert stops_on_term(proc_status("docker-init", "0000000000000000"))
    assert stops_on_term("")  # cannot tell: let it be


def test_the_supervisor_is_found_in_a_docker_top_listing_by_its_run():
    from jupyter_trainer.backends.docker.in_container import runs_supervisor

    def listing(*commands, titles=("PID", "COMMAND")):
        return {"Titles": list(titles), "Processes": [["7", command] for command in commands]}

    run = "/jupyter_trainer/jobs/train/2"
    ours = f"sh {run}/supervise.sh {run} 10 0 python3 {run}/script.py"
    other = ours.replace("/train/2", "/train/1")
    assert runs_supervisor(listing("tail -f /dev/null", ours), run)
    assert not runs_supervisor(listing("tail -f /dev/null", other, f"python3 {run}/script.py"), run)
    assert not runs_supervisor(listing(ours[:32]), run)  # a listing cut at 32 columns names no run
    assert runs_supervisor(listing(ours, titles=("UID", "PID", "PPID", "CMD")) | {"Processes": [["0", "7", "1", ours]]}, run)
    assert not runs_supervisor({}, run)
