"""Lines, with real processes on this machine (--host): `--gpus N` waits first in, first out for N
GPUs no other job holds, `--queue NAME` for a slot of a named queue; each job's own waiter waits,
and the kernel lets go of what a job held however it ends.

Each test has its own store and its own lines directory. The jobs' script blocks until the test
creates its `go-NAME` file; the tests wait for what they expect with a deadline, never a fixed
sleep. There is no GPU here: the GPUs come from a pool ($JUPYTER_TRAINER_GPUS), or from a stand-in
nvidia-smi replaying recorded answers (tests/data/nvidia_smi, see test_gpus.py)."""

import fcntl
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for

from jupyter_trainer.backends import DEFAULT, build_spec
from jupyter_trainer.backends.base import read_supervisor_facts
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.errors import InvalidOption
from jupyter_trainer.jobs.job import Job
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.surfaces.cli import run as cli_run
from jupyter_trainer.view.summary import status_json

DATA = Path(__file__).parent / "data" / "nvidia_smi"

# Says it started (appending its name to `starts`, its GPUs to `started-NAME`), then waits for the
# test to create `go-NAME`.
SCRIPT = """\
import json, os, time
me = os.environ["JOB"]
seen = {key: os.environ.get(key) for key in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
with open("started-" + me, "w") as handle:
    json.dump(seen, handle)
with open("starts", "a") as handle:
    handle.write(me + "\\n")
while not os.path.exists("go-" + me):
    time.sleep(0.02)
"""
PROMPTLY = 10  # seconds: a waiter wakes when what it waits for is let go (inotify), its job starts
RECHECK = 5  # seconds: the first in line asks nvidia-smi again while a GPU is busy outside us


class Lines:
    """A test's machine: its lines directory, the jobs it submitted (to any store), their directory."""

    def __init__(self, root, workdir, store):
        self.root, self.workdir, self.store = root, workdir, store
        self.jobs = {}  # name -> store

    def submit(self, name, store=None, env=(), **options):
        store = store or self.store
        spec = build_spec(
            SCRIPT,
            host=True,
            image=None,
            container=None,
            workdir=str(self.workdir),
            env=[f"JOB={name}", *env],
            **options,
        )
        job = submit_detached(spec, name=name, store=store).job
        self.jobs[name] = store  # once submitted: one refused is not ended at the test's end
        return job

    def submit_in_turn(self, name, store=None, **options):
        """Submits, then waits until the job has started or its waiter took its place in line: the
        next one submitted comes after it (see test_a_job_submitted_first_is_first_in_line)."""
        self.submit(name, store, **options)
        wait_for(lambda: self.started(name) or self.status(name).get("position"), what=f"{name} in line")

    def status(self, name):
        store = self.jobs.get(name, self.store)
        return status_json(Job.load(name, store).refresh().record, DEFAULT)

    def started(self, name):
        path = self.workdir / f"started-{name}"
        return json.loads(path.read_text()) if path.exists() and path.stat().st_size else None

    def starts(self):
        path = self.workdir / "starts"
        return path.read_text().split() if path.exists() else []

    def go(self, name, until="completed"):
        (self.workdir / f"go-{name}").touch()
        if until:
            wait_for(lambda: self.status(name)["status"] == until, what=f"{name} {until}")

    def wait_started(self, name, timeout=PROMPTLY):
        return wait_for(lambda: self.started(name), timeout=timeout, what=f"{name} to start")

    def waits(self, name, position):
        """`name` is pending at `position` in its line, with its waiter's reason: the status."""
        wait_for(lambda: self.status(name).get("position") == position, what=f"{name} at position {position}")
        return self.status(name)

    def pids(self, name):
        facts = read_supervisor_facts(Job.load(name, self.jobs[name]).run_dir)
        return facts.supervisor_pid, facts.job_pid

    def queue(self, *args):
        return cli_json(["queue", *args, "--json"], self.store)

    def end_all(self):
        """Every job ends on its own (a host job stopped as it starts can take its whole grace
        period to end); one that does not get its turn soon is stopped."""
        for name in self.jobs:
            (self.workdir / f"go-{name}").touch()
        for name, store in self.jobs.items():
            job = Job.load(name, store)
            if not job.wait(timeout=PROMPTLY).is_final:
                job.stop()


def reads(pid):
    """How many read() calls process `pid` has made: a waiter that sleeps makes none."""
    with open(f"/proc/{pid}/io") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("syscr:"))


def cli_json(argv, store):
    """One jupyter-trainer command run here, its output read as JSON."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_run(argv, store) == 0
    return json.loads(out.getvalue())


def cli_text(argv, store):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_run(argv, store) == 0
    return out.getvalue()


@pytest.fixture
def machine(tmp_path, monkeypatch, store, workdir):
    root = tmp_path / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-1")
    lines = Lines(root, workdir, store)
    yield lines
    lines.end_all()


def held_by(found):
    """`queue --json`'s GPUs: index -> the job that holds it (None: free)."""
    return {gpu["index"]: gpu["held_by"]["job"] if gpu["held_by"] else None for gpu in found["gpus"]["each"]}


def the_line(found, kind="gpus"):
    line = next(line for line in found["lines"] if line["line"] == kind)
    return [job["job"] for job in line["running"]], [job["job"] for job in line["waiting"]]


# --- GPUs given, not shared ------------------------------------------------------------------


def test_four_one_gpu_jobs_on_two_gpus_take_turns_first_in_first_out(machine):
    for name in ("j0", "j1", "j2", "j3"):
        machine.submit_in_turn(name, gpus="1")
    first_in_line = reads(machine.pids("j2")[1])
    seen = {name: machine.started(name) for name in ("j0", "j1")}
    assert {seen["j0"]["CUDA_VISIBLE_DEVICES"], seen["j1"]["CUDA_VISIBLE_DEVICES"]} == {"0", "1"}
    assert {seen[name]["CUDA_DEVICE_ORDER"] for name in seen} == {"PCI_BUS_ID"}
    running = {name: machine.status(name) for name in ("j0", "j1")}
    for name, status in running.items():
        assert status["status"] == "running" and status["gpus"] == [int(seen[name]["CUDA_VISIBLE_DEVICES"])], status
        assert status["started_at"] is not None and "position" not in status
    first, second = machine.status("j2"), machine.status("j3")
    assert (first["status"], first["reason"], first["position"], first["gpus"]) == (
        "pending", "waiting for 1 GPU; next in line (2 held by other jobs)", 1, [],
    ), first  # fmt: skip
    assert (second["status"], second["reason"], second["position"]) == (
        "pending",
        "waiting for 1 GPU; 1 job ahead",
        2,
    ), second
    assert first["started_at"] is None and machine.started("j2") is None and machine.started("j3") is None
    found = machine.queue()
    assert held_by(found) == {
        int(seen["j0"]["CUDA_VISIBLE_DEVICES"]): "j0",
        int(seen["j1"]["CUDA_VISIBLE_DEVICES"]): "j1",
    }
    assert the_line(found) == (["j0", "j1"], ["j2", "j3"])
    text = cli_text(["queue"], machine.store)
    assert (
        f"GPU {seen['j0']['CUDA_VISIBLE_DEVICES']}  held by j0" in text
        and "  1.    j2, for 1 GPU, waiting since" in text
    ), text
    assert "GPU line: 2 running, 2 waiting" in text and "  2.    j3, for 1 GPU" in text, text
    # meanwhile the first in line slept (each `queue` above woke it once: it looked at the tokens)
    assert reads(machine.pids("j2")[1]) - first_in_line < 40, reads(machine.pids("j2")[1]) - first_in_line

    machine.go("j0")  # its GPU goes to the first in line, and to it alone
    assert machine.wait_started("j2")["CUDA_VISIBLE_DEVICES"] == seen["j0"]["CUDA_VISIBLE_DEVICES"]
    assert machine.waits("j3", 1)["reason"] == "waiting for 1 GPU; next in line (2 held by other jobs)"
    assert machine.status("j2")["gpus"] == [int(seen["j0"]["CUDA_VISIBLE_DEVICES"])]
    machine.go("j1")
    assert machine.wait_started("j3")["CUDA_VISIBLE_DEVICES"] == seen["j1"]["CUDA_VISIBLE_DEVICES"]
    machine.go("j2")
    machine.go("j3")
    assert machine.starts() == ["j0", "j1", "j2", "j3"]
    ended = machine.status("j3")
    assert (
        ended["status"] == "completed"
        and ended["gpus"] == [int(seen["j1"]["CUDA_VISIBLE_DEVICES"])]
        and "position" not in ended
    )
    assert the_line(machine.queue()) == ([], [])


def test_a_job_that_asks_for_more_gpus_than_offered_is_one_line_and_nothing_is_recorded(machine, home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('never')\n")
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", "submit", str(script), "--host", "--gpus", "3", "--name", "greedy"],
        capture_output=True, text=True, timeout=60, cwd=machine.workdir,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        "jupyter-trainer: --gpus 3 asks for more GPUs than"
    ), done.stderr
    assert "2 (0, 1, from $JUPYTER_TRAINER_GPUS)" in done.stderr and done.stdout == ""
    assert JobStore(home).names() == [] and not machine.root.exists()


@pytest.fixture
def one_gpu(machine, monkeypatch):
    """A machine of one GPU whose holder `h` runs, with `w1` and `w2` waiting behind it, in that order."""
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    machine.submit_in_turn("h", gpus="1")
    machine.wait_started("h")
    machine.submit_in_turn("w1", gpus="1")
    machine.submit_in_turn("w2", gpus="1")
    return machine


def test_a_waiting_job_stopped_leaves_the_line_never_started_and_the_next_gets_its_turn(one_gpu):
    machine = one_gpu
    Job.load("w1").stop()
    stopped = machine.status("w1")
    assert (stopped["status"], stopped["started_at"], stopped["gpus"]) == (
        "stopped",
        None,
        [],
    ) and "position" not in stopped, stopped
    assert machine.waits("w2", 1)["reason"] == "waiting for 1 GPU; next in line (1 held by other jobs)"
    assert the_line(machine.queue()) == (["h"], ["w2"])
    machine.go("h")
    assert machine.wait_started("w2")["CUDA_VISIBLE_DEVICES"] == "0"
    machine.go("w2")
    assert machine.starts() == ["h", "w2"] and machine.status("w1")["started_at"] is None


def test_a_holder_killed_with_its_whole_group_lets_go_of_its_gpu_at_once(one_gpu):
    machine = one_gpu
    _, job_pid = machine.pids("h")
    killed = time.monotonic()
    os.killpg(job_pid, signal.SIGKILL)
    machine.wait_started("w1")
    took = time.monotonic() - killed
    assert took < PROMPTLY, took
    gone = machine.status("h")
    assert gone["status"] == "failed" and gone["exit_code"] == 137, gone
    assert machine.status("w1")["gpus"] == [0] and machine.waits("w2", 1)["reason"].endswith("(1 held by other jobs)")


def test_a_holder_whose_supervisor_alone_is_killed_keeps_its_gpu_until_it_ends(one_gpu):
    machine = one_gpu
    supervisor, _ = machine.pids("h")
    os.kill(supervisor, signal.SIGKILL)
    wait_for(
        lambda: not os.path.exists(f"/proc/{supervisor}/cmdline") or not open(f"/proc/{supervisor}/cmdline").read(),
        what="the supervisor gone",
    )
    still = machine.status("h")
    assert still["status"] == "running" and still["gpus"] == [0], still  # the job goes on, on its GPU
    assert machine.status("w1")["position"] == 1 and held_by(machine.queue()) == {0: "h"}
    assert machine.started("w1") is None
    ended = time.monotonic()
    (machine.workdir / "go-h").touch()  # the job ends with nobody to record it: its GPU goes all the same
    machine.wait_started("w1")
    took = time.monotonic() - ended
    assert took < PROMPTLY, took
    assert machine.status("h")["status"] != "running"


def test_a_waiter_killed_loses_its_job_and_the_next_one_moves_up(one_gpu):
    machine = one_gpu
    _, waiter = machine.pids("w1")
    os.kill(waiter, signal.SIGKILL)
    lost = wait_for(
        lambda: (lambda status: status["status"] != "pending" and status)(machine.status("w1")),
        what="w1 no longer pending",
    )
    assert lost["status"] == "failed" and lost["started_at"] is None and "position" not in lost, lost
    assert machine.waits("w2", 1)["reason"] == "waiting for 1 GPU; next in line (1 held by other jobs)"
    machine.go("h")
    assert machine.wait_started("w2")["CUDA_VISIBLE_DEVICES"] == "0"
    machine.go("w2")
    assert machine.starts() == ["h", "w2"]


def test_jobs_of_two_stores_on_one_machine_wait_for_each_other(machine, monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    other = JobStore(tmp_path / "other-home")
    machine.submit_in_turn("mine", gpus="1")
    machine.wait_started("mine")
    machine.submit_in_turn("theirs", store=other, gpus="1")
    waiting = machine.status("theirs")
    assert (waiting["status"], waiting["reason"]) == (
        "pending",
        "waiting for 1 GPU; next in line (1 held by other jobs)",
    ), waiting
    found = cli_json(["queue", "--json"], other)  # what the other store's user sees
    assert held_by(found) == {0: "mine"} and the_line(found) == (["mine"], ["theirs"])
    machine.go("mine")
    assert machine.wait_started("theirs")["CUDA_VISIBLE_DEVICES"] == "0"
    assert [job.name for job in [Job.load("theirs", other)]] == ["theirs"] and other.names() == ["theirs"]
    assert machine.store.names() == ["mine"]


# --- named queues -----------------------------------------------------------------------------


def test_a_named_queue_runs_at_most_max_running_and_raising_it_starts_the_next_at_once(machine):
    assert "queue nightly (at most 2 running): 0 running, 0 waiting" in cli_text(
        ["queue", "nightly", "--max-running", "2"], machine.store
    )
    for name in ("q1", "q2", "q3"):
        machine.submit_in_turn(name, queue="nightly")
    machine.wait_started("q1")
    machine.wait_started("q2")
    assert machine.started("q1") == {"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None}  # a slot, no GPU
    assert machine.status("q1")["queue"] == "nightly" and machine.status("q1")["gpus"] == []
    first_in_line = reads(machine.pids("q3")[1])
    third = machine.status("q3")
    assert (third["status"], third["reason"], third["position"]) == (
        "pending", "waiting for a slot in queue nightly; next in line (2 of 2 running)", 1,
    ), third  # fmt: skip
    found = machine.queue("nightly")
    assert [(line["queue"], line["max_running"]) for line in found["lines"]] == [("nightly", 2)]
    assert the_line(found, "queue") == (["q1", "q2"], ["q3"]) and "gpus" not in found
    text = cli_text(["queue"], machine.store)
    assert (
        "queue nightly (at most 2 running): 2 running, 1 waiting" in text and "GPU line: 0 running, 0 waiting" in text
    ), text
    assert "GPU 0  free" in text and "  1.    q3, waiting since" in text, text
    assert reads(machine.pids("q3")[1]) - first_in_line < 40, (
        reads(machine.pids("q3")[1]) - first_in_line
    )  # it slept meanwhile

    raised = time.monotonic()
    cli_text(["queue", "nightly", "--max-running", "3"], machine.store)
    machine.wait_started("q3")
    took = time.monotonic() - raised
    assert took < PROMPTLY, took
    assert the_line(machine.queue("nightly"), "queue") == (["q1", "q2", "q3"], [])
    for name in ("q1", "q2", "q3"):
        machine.go(name)
    assert machine.starts() == ["q1", "q2", "q3"]


def test_queue_commands_given_bad_words_say_so_in_one_line(machine, capsys):
    from jupyter_trainer.surfaces.cli import main

    for argv, says in (
        (["queue", "--max-running", "2"], "jupyter-trainer: --max-running needs the queue's NAME"),
        (["queue", "../up", "--max-running", "2"], "jupyter-trainer: invalid --queue '../up'"),
        (["queue", "nightly", "--max-running", "0"], "jupyter-trainer: cannot set queue nightly's --max-running: --max-running must be between 1 and 10000, not 0"),
    ):  # fmt: skip
        assert main(argv) == 1
        said = capsys.readouterr()
        assert said.out == "" and said.err.startswith(says) and said.err.count("\n") == 1, said
    assert not (machine.root / "queues" / ".." / "up").exists() and not (machine.root / "up").exists()


# --- GPUs busy outside us ---------------------------------------------------------------------


def answering(tmp_path, monkeypatch, recording):
    """A stand-in nvidia-smi first on PATH, answering what the files in `answer/` say (the test swaps
    them: `swap`), noting each question in `asked`; no pool."""
    bin_dir, answer = tmp_path / "bin", tmp_path / "answer"
    bin_dir.mkdir()
    answer.mkdir()
    asked = tmp_path / "asked"
    program = bin_dir / "nvidia-smi"
    program.write_text(
        "#!/bin/sh\n"
        f'echo "$(date +%s.%N) $1" >> {shlex.quote(str(asked))}\n'
        '[ "$2" = "--format=csv,noheader,nounits" ] || { echo "stand-in: asked for $2"; exit 99; }\n'
        'case "$1" in\n'
        f"  --query-gpu=index,uuid,memory.used,memory.total,mig.mode.current) exec cat {shlex.quote(str(answer / 'gpus'))} ;;\n"
        f"  --query-compute-apps=gpu_uuid,pid,used_memory) exec cat {shlex.quote(str(answer / 'apps'))} ;;\n"
        "esac\n"
        'echo "stand-in: asked $1"; exit 99\n'
    )
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("JUPYTER_TRAINER_GPUS")

    def swap(name):
        for kind in ("apps", "gpus"):  # each replaced whole: nvidia-smi never answers half a file
            (answer / f"{kind}.new").write_bytes((DATA / f"{name}.{kind}").read_bytes())
            os.replace(answer / f"{kind}.new", answer / kind)

    swap(recording)
    return swap, asked


def test_a_job_takes_a_gpu_nothing_else_uses_and_waits_while_all_are_busy(machine, tmp_path, monkeypatch):
    """synthetic-4gpus: GPU 0 idle; a foreign process on 1, another on 2, on 3 memory no process accounts for."""
    swap, asked = answering(tmp_path, monkeypatch, "synthetic-4gpus")
    machine.submit_in_turn("first", gpus="1")
    assert machine.wait_started("first")["CUDA_VISIBLE_DEVICES"] == "0"
    found = machine.queue()
    assert found["gpus"]["source"] == "nvidia-smi"
    assert [(gpu["index"], gpu["held_by"] and gpu["held_by"]["job"], gpu["busy_outside"]) for gpu in found["gpus"]["each"]] == [
        (0, "first", False), (1, None, True), (2, None, True), (3, None, True),
    ]  # fmt: skip
    machine.submit_in_turn("second", gpus="1")
    waiting = machine.waits("second", 1)
    assert (
        waiting["reason"]
        == "waiting for 1 GPU; next in line (1 held by other jobs; GPUs 1, 2, 3 busy outside jupyter_trainer)"
    ), waiting
    looks = lambda: [float(line.split()[0]) for line in asked.read_text().splitlines() if "--query-gpu" in line]
    then = len(looks())
    wait_for(lambda: len(looks()) > then, timeout=2 * RECHECK, what="a look at nvidia-smi")
    swap("a800-580.119.02-idle")  # GPUs 0 and 1, nothing on either
    freed = time.monotonic()
    assert machine.wait_started("second", timeout=RECHECK + PROMPTLY)["CUDA_VISIBLE_DEVICES"] == "1"
    took = time.monotonic() - freed
    assert took < RECHECK + PROMPTLY, took
    # while a GPU it could take is busy outside us, the first in line asks again every few seconds, not at once
    assert looks()[then + 1] - looks()[then] > RECHECK * 0.8, looks()
    machine.go("first")
    machine.go("second")


# --- what a job or another user can plant -------------------------------------------------------


# A running job's turn file that the job itself overwrote says nothing: the job stays running
# (backends/turns.py, read_turn: only a waiter's own words count as waiting).


@pytest.mark.parametrize(
    "said",
    [
        pytest.param(b"\xff\xfe\x00 not json at all", id="garbage"),
        pytest.param(b"[" * (1 << 20), id="deep"),  # 1 MB, deeper than json goes
        pytest.param(
            json.dumps({"state": "running", "gpus": [0] * (1 << 18)}).encode(), id="megabyte"
        ),
        pytest.param(
            json.dumps({"state": "running", "gpus": "0,1", "queue": ["q"], "started_at": "soon"}).encode(), id="strings"
        ),
        pytest.param(
            json.dumps({"state": "running", "gpus": [True, -1, 1.5, "1", 10**30, 1], "started_at": 1e300}).encode(),
            id="numbers",
        ),
        pytest.param(
            json.dumps({"state": {"running": 1}, "line": "gpus", "ahead": -3, "wants": [1]}).encode(),
            id="nested",
        ),
        pytest.param(None, id="fifo"),
        pytest.param(Path("/etc/passwd"), id="link"),
    ],
)
def test_a_turn_file_the_job_overwrites_leaves_its_status_sane(machine, said):
    machine.submit_in_turn("liar", gpus="1")
    machine.wait_started("liar")
    before = machine.status("liar")
    turn = Job.load("liar").run_dir / "turn"
    # what the job itself can do: its run's files are its user's
    if isinstance(said, bytes):
        turn.write_bytes(said)
    else:
        turn.unlink()
        os.mkfifo(turn) if said is None else os.symlink(said, turn)
    status = machine.status("liar")  # a FIFO would block a reader that opened it
    assert isinstance(status["gpus"], list) and all(
        isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 1024 for index in status["gpus"]
    ), status
    assert (status["status"], status["started_at"]) == ("running", before["started_at"]), status
    assert "liar" in cli_text(["list"], machine.store) and the_line(machine.queue()) == (["liar"], [])
    machine.go("liar")


def test_a_link_planted_as_a_token_is_refused_and_never_followed(machine, monkeypatch, tmp_path):
    from jupyter_trainer.core import lines

    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    line = lines.line_dir(str(machine.root))
    lines.ensure_line(str(machine.root), line)  # as the machine's first waiter made it
    elsewhere = tmp_path / "elsewhere"
    os.symlink(elsewhere, os.path.join(line, "tokens", "0"))
    job = machine.submit("fooled", gpus="1")
    assert job.wait(timeout=30) == "failed"
    status = machine.status("fooled")
    assert status["reason"] == f"LineError: {line}/tokens/0 is a symbolic link, not a regular file", status
    assert status["started_at"] is None and machine.started("fooled") is None and not elsewhere.exists()


def test_links_and_others_planted_as_tickets_are_never_followed(machine, monkeypatch, tmp_path):
    from jupyter_trainer.core import lines

    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    line = lines.line_dir(str(machine.root))
    lines.ensure_line(str(machine.root), line)
    bait = tmp_path / "bait"
    bait.write_text("{}")
    held = os.open(bait, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # a live holder, were the links followed: the oldest in line
    tickets = Path(line) / "tickets"
    os.symlink(bait, tickets / f"w-{1:020d}-{'a' * 16}")
    os.symlink(bait, tickets / f"r-{2:020d}-{'b' * 16}")
    os.mkfifo(tickets / f"w-{3:020d}-{'c' * 16}")
    (tickets / f"w-{4:020d}-{'d' * 16}").mkdir()
    try:
        machine.submit("undeceived", gpus="1")
        assert machine.wait_started("undeceived")["CUDA_VISIBLE_DEVICES"] == "0"
        assert the_line(machine.queue()) == (["undeceived"], [])
        assert bait.read_text() == "{}" and len(os.listdir(tickets)) == 5  # left, untouched
        machine.go("undeceived")
    finally:
        os.close(held)


@pytest.mark.parametrize("kind", ["link", "file"])
def test_a_lines_dir_that_is_a_link_or_a_file_is_one_line(machine, monkeypatch, tmp_path, capsys, kind):
    from jupyter_trainer.surfaces.cli import main

    real = tmp_path / "real"
    real.mkdir()
    root = tmp_path / "not-a-dir"
    os.symlink(real, root) if kind == "link" else root.write_text("")
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    for argv in (["queue"], ["queue", "nightly", "--json"], ["queue", "nightly", "--max-running", "2"]):
        assert main(argv) == 1, argv
        said = capsys.readouterr()
        assert (
            said.out == ""
            and said.err.count("\n") == 1
            and f"{root} is not a directory (a link, or a file)" in said.err
        ), said
    # a job that would wait there is refused before anything is recorded
    with pytest.raises(InvalidOption, match=f"{re.escape(str(root))} is not a directory \\(a link, or a file\\)"):
        machine.submit("misplaced", gpus="1")
    assert machine.store.runs("misplaced") == [] and os.listdir(real) == []


def test_a_job_submitted_first_is_first_in_line(machine, monkeypatch, tmp_path):
    """Its waiter may start after the next job's (a loaded machine, a slow python3): it is still ahead."""
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    machine.submit_in_turn("holder", gpus="1")
    machine.wait_started("holder")
    gate = tmp_path / "gate"
    gate.mkdir()
    slow = gate / "python3"  # the python3 this job's waiter starts on: it waits for the test's word
    slow.write_text(
        f'#!/bin/sh\nwhile [ ! -e {shlex.quote(str(gate / "open"))} ]; do sleep 0.02; done\nPATH={shlex.quote(os.environ["PATH"])} exec python3 "$@"\n'
    )
    slow.chmod(0o755)
    machine.submit("early", env=[f"PATH={gate}:{os.environ['PATH']}"], gpus="1")
    machine.submit_in_turn("late", gpus="1")
    (gate / "open").touch()
    wait_for(lambda: machine.status("early").get("position"), what="early in line")
    assert (machine.status("early")["position"], machine.status("late")["position"]) == (1, 2)
    machine.go("holder")
    machine.wait_started("early")
    machine.go("early")
    machine.go("late")
    assert machine.starts() == ["holder", "early", "late"]


def test_a_four_gpu_job_is_not_starved_by_one_gpu_jobs_submitted_after_it(machine, monkeypatch):
    """Four GPUs, one in use: a job asking for all four waits first in line, and the one-GPU jobs
    submitted after it wait behind it though three GPUs are free (no job jumps the line, so a
    stream of small jobs never keeps a big one waiting). The free GPUs stay idle meanwhile; the
    big job gets them as soon as the first ends, and the small ones after it."""
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-3")
    machine.submit_in_turn("small0", gpus="1")
    machine.wait_started("small0")
    machine.submit_in_turn("big", gpus="4")
    for name in ("small1", "small2", "small3"):
        machine.submit_in_turn(name, gpus="1")
    assert machine.waits("small3", 4)["reason"] == "waiting for 1 GPU; 3 jobs ahead"
    assert machine.status("big")["reason"] == "waiting for 4 GPUs; next in line (1 held by other jobs)"
    assert [machine.started(name) for name in ("big", "small1", "small2", "small3")] == [None] * 4
    # the free ones are kept for the first in line: nobody behind it can take them
    assert held_by(machine.queue()) == {0: "small0", 1: "big", 2: "big", 3: "big"}
    machine.go("small0")
    assert machine.wait_started("big")["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert machine.waits("small1", 1)["status"] == "pending"
    machine.go("big")
    for name in ("small1", "small2", "small3"):
        machine.wait_started(name)
    assert machine.starts()[:2] == ["small0", "big"]
    turns = {name: machine.status(name)["started_at"] for name in ("small1", "small2", "small3")}
    assert sorted(turns, key=turns.get) == ["small1", "small2", "small3"], turns  # (their processes may start in any order)
    assert len({machine.started(name)["CUDA_VISIBLE_DEVICES"] for name in ("small1", "small2", "small3")}) == 3


def test_the_views_say_what_a_job_waits_for_and_the_gpus_a_running_one_holds(machine, quiet_comm):
    """The widget's header, the notebook's jobs table and the text one: "waiting for 2 GPUs; next
    in line (...)" and "1 job ahead" while pending, the GPUs held while running."""
    import html as html_module
    import re as re_module

    from test_jobs_view import rows_of

    from jupyter_trainer.view.job_widget import JobWidget
    from jupyter_trainer.view.jobs_table import JobsTable

    def text_of(value):
        return html_module.unescape(re_module.sub(r"<[^>]+>", "", value))

    machine.submit_in_turn("holder", gpus="2")
    machine.wait_started("holder")
    machine.submit_in_turn("next", gpus="2")
    machine.submit_in_turn("third", gpus="1")
    said = {
        "holder": "running · GPUs 0, 1",
        "next": "pending · waiting for 2 GPUs; next in line (2 held by other jobs)",
        "third": "pending · waiting for 1 GPU; 1 job ahead",
    }
    for name, words in said.items():
        header = text_of(JobWidget(Job.load(name, machine.store)).header.value)
        assert words.split(" · ")[1] in header, (name, header)
    rows = {row["name"]: row["status"] for row in rows_of(JobsTable(machine.store))}
    assert {name: rows[name] for name in said} == {name: words.replace(" · ", " ") for name, words in said.items()}, rows  # (a badge, then the words)
    listed = cli_text(["list"], machine.store)
    assert all(words in listed for words in said.values()), listed
