"""Hostile review of the GPU line (hostile36): what a job's leftovers, two submitters at once, and
another user do to it. See test_lines.py for the machine used here."""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from conftest import IN_CI, wait_for
from test_hostile_lines import machine  # noqa: F401  (the fixture: a machine of one GPU)
from test_lines import PROMPTLY, SCRIPT, cli_json, held_by, the_line

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.jobs.job import Job
from jupyter_trainer.jobs.submit import submit_detached

REPO = Path(__file__).resolve().parent.parent


def submit_script(machine, name, script, **options):
    spec = build_spec(textwrap.dedent(script), host=True, image=None, container=None, workdir=str(machine.workdir), env=[f"JOB={name}"], **options)
    job = submit_detached(spec, name=name, store=machine.store).job
    machine.jobs[name] = machine.store
    return job


# A job that leaves a process behind it and ends: the leftover's pid in `leftover-NAME`.
LEAVES = {
    # a child in the job's own process group, that outlives the job (`cmd &` in a shell, os.system)
    "background": """
        import os
        os.system("sleep 300 & echo $! > leftover-$JOB")
    """,
    # a daemon: double fork, a session of its own, its fds kept
    "daemon": """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                with open("leftover-" + os.environ["JOB"], "w") as handle:
                    handle.write(str(os.getpid()))
                time.sleep(300)
            os._exit(0)
        os.wait()
    """,
}


@pytest.mark.parametrize("how", sorted(LEAVES))
def test_a_job_that_ended_leaving_a_process_behind_does_not_keep_its_gpu_for_ever(machine, how):
    job = submit_script(machine, "leaver", LEAVES[how], gpus="1")
    leftover = machine.workdir / "leftover-leaver"
    try:
        assert job.wait(timeout=30).is_final
        wait_for(lambda: leftover.exists() and leftover.read_text().strip(), what="the leftover's pid")
        ended = machine.status("leaver")
        assert ended["status"] == "completed", ended
        machine.submit("next", gpus="1")
        # the job has ended (completed): its GPU is let go (the contract: a job that ends releases
        # its GPUs at once), or the leftover went with it; never held for ever by a completed job
        wait_for(
            lambda: machine.started("next"),
            timeout=PROMPTLY,
            what=f"the next job to start (GPU 0 still held by {held_by(machine.queue())[0]!r}, {machine.status('next')['reason']!r})",
        )
    finally:
        if leftover.exists() and leftover.read_text().strip():
            try:
                os.kill(int(leftover.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_running_job_that_closes_every_inherited_fd_does_not_hand_its_gpu_to_the_next(machine):
    """What a launcher that closes the fds it does not know does (closefrom), or a hostile job:
    the locks it inherited go, the job goes on computing on its GPU."""
    closer = "import os\nos.closerange(3, 4096)\n" + SCRIPT
    submit_script(machine, "closer", closer, gpus="1")
    machine.wait_started("closer")
    machine.submit("next", gpus="1")
    wait_for(lambda: machine.status("next").get("position") or machine.started("next"), what="next in line")
    time.sleep(2)
    assert machine.started("next") is None, "two jobs on GPU 0"
    machine.go("closer")
    machine.wait_started("next")


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def test_a_running_jobs_waiter_killed_alone_takes_the_job_with_it_and_its_gpu_goes_to_the_next(machine):
    """The waiter holds the job's GPUs while the job runs as its child: killed alone, it leaves no
    job computing on a GPU that is no longer its own."""
    machine.submit_in_turn("held", gpus="1")
    machine.wait_started("held")
    machine.submit_in_turn("next", gpus="1")
    _, waiter = machine.pids("held")
    (job,) = wait_for(lambda: children(waiter), what="the job, the waiter's child")
    os.kill(waiter, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{job}/cmdline") or not open(f"/proc/{job}/cmdline").read(), what="the job gone")
    assert machine.wait_started("next")["CUDA_VISIBLE_DEVICES"] == "0"
    gone = wait_for(lambda: (lambda status: status["status"] != "running" and status)(machine.status("held")), what="held ended")
    assert gone["status"] == "failed" and gone["exit_code"] == 137, gone


# --- two submitters at the same instant ---------------------------------------------------------

OTHER_USER = "jtother"
SUBMITTER = """\
import os, sys, time
from jupyter_trainer.backends import build_spec
from jupyter_trainer.jobs.submit import submit_detached
ready, barrier, script, name = sys.argv[1:5]
spec = build_spec(open(script).read(), host=True, image=None, container=None, workdir=os.getcwd(), env=["JOB=" + name], gpus="1")
open(ready, "w").close()
while not os.path.exists(barrier):
    time.sleep(0.0005)
submit_detached(spec, name=name)
"""


def no_other_user():
    """Where the second user is missing: a skip, but a failure in CI (.ci/run makes the user)."""
    if IN_CI:
        pytest.fail(f"no user {OTHER_USER} here: .ci/run makes it (useradd -m {OTHER_USER})")
    pytest.skip(f"no user {OTHER_USER} here (useradd -m {OTHER_USER})")


def other_user():
    import pwd

    try:
        return pwd.getpwnam(OTHER_USER)
    except KeyError:
        return None


def as_user(user, home, shared, argv):
    """`argv` run by `user` (None: this one), with its own store `home` and the shared lines."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": user.pw_dir if user else os.environ["HOME"],
        "JUPYTER_TRAINER_HOME": str(home), "JUPYTER_TRAINER_LINES_DIR": str(shared / "lines"),
        "JUPYTER_TRAINER_GPUS": "0", "PYTHONPATH": str(shared / "code") if user else str(REPO),
    }  # fmt: skip
    if user is None:
        return [sys.executable, *argv], {**os.environ, **{k: v for k, v in env.items() if k != "PATH"}}
    return ["setpriv", "--reuid", str(user.pw_uid), "--regid", str(user.pw_gid), "--init-groups", "/usr/bin/python3", *argv], env


@pytest.fixture
def shared():
    """A directory every user can reach: the jobs' working directory, the lines under it."""
    path = Path(tempfile.mkdtemp(prefix="jt-hostile36-", dir="/tmp"))
    path.chmod(0o1777)
    (path / "starts").touch()
    (path / "starts").chmod(0o666)
    (path / "train.py").write_text(SCRIPT)
    (path / "train.py").chmod(0o644)
    # the package, where another user can read it (a clone under /root is not)
    shutil.copytree(REPO / "jupyter_trainer", path / "code" / "jupyter_trainer", ignore=shutil.ignore_patterns("__pycache__"))
    for directory, _dirs, files in os.walk(path / "code"):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)
    yield path
    for name in os.listdir(path):
        if name.startswith("started-"):
            (path / ("go-" + name[len("started-") :])).touch()
    # every job ends (its processes' working directory is this one) before it is removed
    wait_for(lambda: not working_in(path), timeout=30, what=f"the jobs in {path} to end")
    shutil.rmtree(path, ignore_errors=True)


def working_in(path):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(path):
                found.append(int(pid))
        except OSError:
            pass
    return found


def started_now(shared):
    return {name[len("started-"):] for name in os.listdir(shared) if name.startswith("started-")}


@pytest.mark.parametrize("two", ["two_kernels", "two_users"])
def test_two_submitters_at_the_same_instant_never_share_the_one_gpu(shared, tmp_path, monkeypatch, two):
    user = other_user() if two == "two_users" else None
    if two == "two_users" and user is None:
        no_other_user()
    homes = {"a": tmp_path / "home-a", "b": (shared / "home-b") if user else tmp_path / "home-b"}
    store = JobStore(homes["a"])
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(shared / "lines"))  # what `queue` looks at
    for round in range(4):
        names = {side: f"r{round}{side}" for side in "ab"}
        barrier = shared / f"barrier-{round}"
        submitters = []
        for side in "ab":
            ready = shared / f"ready-{names[side]}"
            argv, env = as_user(user if side == "b" else None, homes[side], shared, ["-c", SUBMITTER, str(ready), str(barrier), "train.py", names[side]])
            submitters.append(subprocess.Popen(argv, env=env, cwd=shared, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        wait_for(lambda: all((shared / f"ready-{names[side]}").exists() for side in "ab"), what="both submitters ready")
        barrier.touch()
        for submitter in submitters:
            out, err = submitter.communicate(timeout=60)
            assert submitter.returncode == 0, (out, err)
        first = wait_for(lambda: started_now(shared) & set(names.values()), what="one of them to start")
        time.sleep(1.5)  # the other's waiter has long had its look
        both = started_now(shared) & set(names.values())
        assert len(both) == 1, f"round {round}: {sorted(both)} both started on the one GPU"
        (first,) = first
        (second,) = set(names.values()) - {first}
        (shared / f"go-{first}").touch()
        wait_for(lambda: second in started_now(shared), timeout=PROMPTLY, what=f"{second} to start once {first} ended")
        (shared / f"go-{second}").touch()
        for side in "ab":  # its supervisor has written the job's exit code: it is over
            code = homes[side] / "jobs" / names[side] / "1" / "exit_code"
            wait_for(lambda: code.exists() and code.read_text().strip(), what=f"{names[side]} to end")
        assert the_line(cli_json(["queue", "--json"], store)) == ([], [])
    assert sorted((shared / "starts").read_text().split()) == sorted(f"r{round}{side}" for round in range(4) for side in "ab")
    if user is not None:  # the other side was the other user's
        assert (homes["b"] / "jobs").stat().st_uid == user.pw_uid


# --- another user, owner of the shared lines directory ---------------------------------------------

STEAL = """\
import os, sys
line = sys.argv[1]
for name in os.listdir(os.path.join(line, "tickets")):
    if name.startswith("r-"):  # the running job's ticket: out of the line
        os.rename(os.path.join(line, "tickets", name), os.path.join(line, "tickets", ".gone-" + name))
os.unlink(os.path.join(line, "tokens", "0"))  # and its token (the lock stays on the file it holds)
"""


def run_as(user, home, shared, argv):
    argv, env = as_user(user, home, shared, argv)
    done = subprocess.run(argv, env=env, cwd=shared, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done
    return done


def submit_as(user, home, shared, name):
    barrier = shared / f"barrier-{name}"
    barrier.touch()
    run_as(user, home, shared, ["-c", SUBMITTER, str(shared / f"ready-{name}"), str(barrier), "train.py", name])


def mine_running_theirs_waiting(shared, tmp_path, user, line):
    """This user's job runs on the one GPU, the other user's waits behind it."""
    from jupyter_trainer.core import lines

    submit_as(None, tmp_path / "home-a", shared, "mine")
    wait_for(lambda: "mine" in started_now(shared), what="mine to start")
    submit_as(user, shared / "home-b", shared, "theirs")
    wait_for(lambda: [job.get("job") for job in lines.line_now(line)[1]] == ["theirs"], what="theirs to wait")


def theirs_starts_only_once_mine_ended(shared, tmp_path):
    time.sleep(3)
    assert "theirs" not in started_now(shared), "two jobs on GPU 0: another user took it from under a running job"
    (shared / "go-mine").touch()
    wait_for(lambda: "theirs" in started_now(shared), timeout=PROMPTLY, what="theirs to start once mine ended")
    (shared / "go-theirs").touch()
    for home, name in ((tmp_path / "home-a", "mine"), (shared / "home-b", "theirs")):
        code = home / "jobs" / name / "1" / "exit_code"
        wait_for(lambda: code.exists() and code.read_text().strip(), what=f"{name} to end")


@pytest.mark.xfail(strict=True, reason="the user who made a shared directory may rename or remove anything in it, sticky or not: only directories root made are safe from their owner (README)")
def test_another_user_who_made_the_lines_directory_cannot_take_a_running_jobs_gpu(shared, tmp_path, monkeypatch):
    """The lines directory is made sticky (1777) by whoever submits first: its owner, another
    user, may remove or rename anything in it, a sticky directory's owner as much as root. It takes
    a running job's ticket and token out of the line: its own job, waiting, must not start on the
    GPU the running one still computes on."""
    from jupyter_trainer.core import lines

    user = other_user()
    if user is None:
        no_other_user()
    root = shared / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    line = lines.line_dir(str(root))
    # as the product makes it, the other user first
    make = f"from jupyter_trainer.core import lines; lines.ensure_line({str(root)!r}, {line!r})"
    run_as(user, shared / "home-b", shared, ["-c", make])
    assert root.stat().st_uid == user.pw_uid and (root.stat().st_mode & 0o7777) == 0o1777
    mine_running_theirs_waiting(shared, tmp_path, user, line)
    run_as(user, shared / "home-b", shared, ["-c", STEAL, line])
    theirs_starts_only_once_mine_ended(shared, tmp_path)


def test_lines_root_made_first_keep_a_running_jobs_gpu_from_another_user(shared, tmp_path, monkeypatch):
    """What the README says to do on a server shared with users one does not trust: root makes the
    lines first. The same theft as above is then refused, and the other user's job waits its turn."""
    from jupyter_trainer.core import lines

    user = other_user()
    if user is None:
        no_other_user()
    root = shared / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    line = lines.line_dir(str(root))
    lines.ensure_line(str(root), line)  # root's, before any job
    assert root.stat().st_uid == 0 and (root.stat().st_mode & 0o7777) == 0o1777
    mine_running_theirs_waiting(shared, tmp_path, user, line)
    argv, env = as_user(user, shared / "home-b", shared, ["-c", STEAL, line])
    stolen = subprocess.run(argv, env=env, cwd=shared, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert stolen.returncode != 0 and "PermissionError" in stolen.stderr, stolen
    theirs_starts_only_once_mine_ended(shared, tmp_path)


# --- a stream of one-GPU jobs around a two-GPU job in a queue ----------------------------------------


def test_a_two_gpu_job_in_a_queue_takes_its_place_in_the_gpu_line_ahead_of_one_gpu_jobs_submitted_after_it(machine, monkeypatch):
    """Two GPUs, a queue of one slot held by a CPU job. A --gpus 2 --queue q job waits for the slot
    while one-GPU jobs come after it and run meanwhile (it waits in the queue, not for GPUs); once
    it has the slot it is first in the GPU line, in its place (when it was submitted): the one-GPU
    jobs submitted after it wait behind it, and it starts as soon as the two GPUs are let go."""
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-1")
    machine.submit_in_turn("s0", gpus="1")
    machine.submit_in_turn("cpu", queue="q")
    machine.wait_started("s0")
    machine.wait_started("cpu")
    machine.submit_in_turn("big", queue="q", gpus="2")
    assert machine.status("big")["reason"].startswith("waiting for a slot in queue q"), machine.status("big")
    machine.submit_in_turn("s1", gpus="1")
    machine.wait_started("s1")  # the second GPU was free, and nobody waited for it
    for name in ("s2", "s3"):
        machine.submit_in_turn(name, gpus="1")
    assert machine.waits("s3", 2)["status"] == "pending"
    machine.go("cpu")  # big takes the slot, then its place in the GPU line: ahead of s2 and s3
    wait_for(lambda: machine.status("big")["reason"].startswith("waiting for 2 GPUs; next in line"), what="big first in the GPU line")
    assert machine.waits("s2", 2)["reason"] == "waiting for 1 GPU; 1 job ahead"
    machine.go("s0")  # its GPU is kept for big, not given to s2
    wait_for(lambda: held_by(machine.queue()) == {0: "big", 1: "s1"} or held_by(machine.queue()) == {1: "big", 0: "s1"}, what="s0's GPU kept for big")
    time.sleep(1)
    assert machine.started("s2") is None and machine.started("big") is None
    machine.go("s1")
    assert machine.wait_started("big")["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert machine.started("s2") is None
    machine.go("big")
    machine.wait_started("s2")
    machine.wait_started("s3")
    machine.go("s2")
    machine.go("s3")
    starts = machine.starts()
    assert (set(starts[:2]), starts[2:4], set(starts[4:])) == ({"s0", "cpu"}, ["s1", "big"], {"s2", "s3"}), starts


@pytest.mark.parametrize("planted", ["link", "directory", "fifo"])
def test_a_token_another_user_planted_for_one_gpu_does_not_keep_every_job_from_the_others(shared, tmp_path, monkeypatch, planted):
    """Two GPUs; another user plants something that is not a token at GPU 0's name in the shared
    tokens directory (sticky: nobody else can remove it). A job asking for one GPU runs on the
    other one, free; it does not fail."""
    from jupyter_trainer.core import lines

    user = other_user()
    if user is None:
        no_other_user()
    root = shared / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-1")
    line = lines.line_dir(str(root))
    lines.ensure_line(str(root), line)  # made by this user (root): sticky, its own
    token = os.path.join(line, "tokens", "0")
    plant = {
        "link": f"import os; os.symlink('/tmp/nowhere', {token!r})",
        "directory": f"import os; os.mkdir({token!r})",
        "fifo": f"import os; os.mkfifo({token!r})",
    }[planted]
    run_as(user, shared / "home-b", shared, ["-c", plant])
    spec = build_spec(SCRIPT, host=True, image=None, container=None, workdir=str(shared), env=["JOB=mine"], gpus="1")
    job = submit_detached(spec, name="mine", store=JobStore(tmp_path / "home-a")).job
    try:
        wait_for(lambda: "mine" in started_now(shared) or job.refresh().status.is_final, what="mine to start or end")
        assert "mine" in started_now(shared), (job.refresh().status, job.refresh().reason)
        assert (shared / "started-mine").read_text().count('"1"') == 1
    finally:
        (shared / "go-mine").touch()
        job.wait(timeout=30)


def test_a_waiting_jobs_supervisor_killed_its_job_still_takes_its_turn_and_its_status_says_so(machine):
    machine.submit_in_turn("h", gpus="1")
    machine.wait_started("h")
    machine.submit_in_turn("w", gpus="1")
    machine.submit_in_turn("after", gpus="1")
    supervisor, waiter = machine.pids("w")
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{supervisor}/cmdline") or not open(f"/proc/{supervisor}/cmdline").read(), what="the supervisor gone")
    still = machine.status("w")
    assert (still["status"], still["position"]) == ("pending", 1), still
    machine.go("h")
    assert machine.wait_started("w")["CUDA_VISIBLE_DEVICES"] == "0"
    running = wait_for(lambda: (lambda status: status["status"] == "running" and status)(machine.status("w")), what="w running")
    assert running["gpus"] == [0], running
    assert machine.waits("after", 1)["status"] == "pending"
    (machine.workdir / "go-w").touch()  # it ends with nobody to record it: its GPU goes all the same
    machine.wait_started("after")
    gone = wait_for(lambda: (lambda status: status["status"] != "running" and status)(machine.status("w")), what="w no longer running")
    assert gone["status"] != "pending", gone


PLANT_NEW = """\
import os, sys
tickets = os.path.join(sys.argv[1], "tickets")
for name in os.listdir(tickets):
    if name.startswith("p-"):  # a place kept: its key names the file its waiter will make
        open(os.path.join(tickets, ".new-" + name.split("-")[2]), "w").close()
        print(name)
"""


def test_another_user_cannot_make_a_job_fail_by_planting_the_file_its_waiter_will_make(shared, tmp_path, monkeypatch):
    """A place kept at submission (p-NS-KEY) names, for every user to see, the key its waiter will
    take its ticket under. Another user makes a file at the name the waiter makes its ticket
    under (.new-KEY) before it comes: the job must still wait its turn and run, not fail."""
    from jupyter_trainer.core import lines

    user = other_user()
    if user is None:
        no_other_user()
    root = shared / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    line = lines.line_dir(str(root))
    lines.ensure_line(str(root), line)
    gate = shared / "gate"
    gate.mkdir()
    slow = gate / "python3"  # the python3 this job's waiter starts on: it waits for the test's word
    slow.write_text(f'#!/bin/sh\nwhile [ ! -e {shlex.quote(str(gate / "open"))} ]; do sleep 0.02; done\nPATH={shlex.quote(os.environ["PATH"])} exec python3 "$@"\n')
    slow.chmod(0o755)
    spec = build_spec(SCRIPT, host=True, image=None, container=None, workdir=str(shared), env=["JOB=victim", f"PATH={gate}:{os.environ['PATH']}"], gpus="1")
    job = submit_detached(spec, name="victim", store=JobStore(tmp_path / "home-a")).job
    try:
        planted = run_as(user, shared / "home-b", shared, ["-c", PLANT_NEW, line])
        assert planted.stdout.strip(), "no place kept to plant for"
        (gate / "open").touch()
        wait_for(lambda: "victim" in started_now(shared) or job.refresh().status.is_final, what="the victim to start or end")
        assert "victim" in started_now(shared), (job.refresh().status, job.refresh().reason)
    finally:
        (gate / "open").touch()
        (shared / "go-victim").touch()
        job.wait(timeout=30)


TAKE = """\
import json, os, sys
from jupyter_trainer.core import lines
line, since, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fd, path = lines.take_ticket(line, {"job": "mine"}, since, key)
print(json.dumps([os.path.basename(path), lines.read_ticket(path)]))
"""


def test_a_waiter_whose_ticket_name_another_user_planted_takes_the_same_place_under_another_key(shared):
    """The ticket a place kept becomes (w-NS-KEY) is known to all; planted by another user in the
    sticky directory, it cannot be replaced: the waiter takes its place (NS) under a key of its own."""
    from jupyter_trainer.core import lines

    user = other_user()
    if user is None:
        no_other_user()
    root = str(shared / "lines")
    line = lines.line_dir(root)
    lines.ensure_line(root, line)
    since, key = time.time_ns(), "ab" * 8
    planted = os.path.join(line, "tickets", f"w-{since:020d}-{key}")
    with open(planted, "w") as handle:  # this user (root) plants; the waiter is the other user's
        handle.write('{"job": "planted"}')
    taken = run_as(user, shared / "home-b", shared, ["-c", TAKE, line, str(since), key])
    name, said = json.loads(taken.stdout)
    assert name.startswith(f"w-{since:020d}-") and name != os.path.basename(planted), name
    assert said == {"job": "mine"} and open(planted).read() == '{"job": "planted"}'


def test_a_waiter_whose_running_ticket_name_another_user_planted_still_takes_its_turn(shared, tmp_path, monkeypatch):
    """A waiting ticket w-NS-KEY becomes r-NS-KEY when its turn comes: a name every user can
    read off the line. Planted there by another user, it cannot be replaced; the job must run."""
    from jupyter_trainer.core import lines

    user = other_user()
    if user is None:
        no_other_user()
    root = shared / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    line = lines.line_dir(str(root))
    submit_as(None, tmp_path / "home-a", shared, "holder")
    wait_for(lambda: "holder" in started_now(shared), what="holder to start")
    submit_as(user, shared / "home-b", shared, "victim")
    waiting = wait_for(lambda: [name for name in os.listdir(os.path.join(line, "tickets")) if name.startswith("w-")], what="victim in line")
    with open(os.path.join(line, "tickets", "r" + waiting[0][1:]), "w") as handle:  # this user (root) plants it
        handle.write("{}")
    (shared / "go-holder").touch()
    code = shared / "home-b" / "jobs" / "victim" / "1" / "exit_code"
    wait_for(lambda: "victim" in started_now(shared) or (code.exists() and code.read_text().strip()), what="victim to start or end")
    log = shared / "home-b" / "jobs" / "victim" / "1" / "output.log"
    assert "victim" in started_now(shared), log.read_text()[-300:]
    (shared / "go-victim").touch()
    wait_for(lambda: code.exists() and code.read_text().strip(), what="victim to end")


def test_a_running_gpu_job_stopped_is_stopped_and_its_gpu_goes_to_the_next(machine):
    machine.submit_in_turn("held", gpus="1")
    machine.wait_started("held")
    machine.submit_in_turn("next", gpus="1")
    _, waiter = machine.pids("held")
    (job,) = wait_for(lambda: children(waiter), what="the job, the waiter's child")
    Job.load("held", machine.store).stop()
    stopped = machine.status("held")
    assert stopped["status"] == "stopped", stopped
    assert not os.path.exists(f"/proc/{job}/cmdline") or not open(f"/proc/{job}/cmdline").read()
    assert machine.wait_started("next")["CUDA_VISIBLE_DEVICES"] == "0"


BURST = """\
import os, sys, time
from jupyter_trainer.backends import build_spec
from jupyter_trainer.jobs.submit import submit_detached
ready, barrier, script = sys.argv[1:4]
jobs = [word.split(":") for word in sys.argv[4:]]
specs = [(name, build_spec(open(script).read(), host=True, image=None, container=None, workdir=os.getcwd(), env=["JOB=" + name], gpus=gpus)) for name, gpus in jobs]
open(ready, "w").close()
while not os.path.exists(barrier):
    time.sleep(0.0005)
for name, spec in specs:
    submit_detached(spec, name=name)
"""

# Holds its GPUs a moment, saying when it had them (its process's whole life: from its start to its end).
SPAN = """\
import json, os, time
began = time.time()
time.sleep(0.4)
with open("spans", "a") as handle:
    handle.write(json.dumps([os.environ["JOB"], os.environ.get("CUDA_VISIBLE_DEVICES"), began, time.time()]) + "\\n")
"""


def test_bursts_of_mixed_gpu_jobs_from_two_submitters_never_overlap_on_a_gpu(shared, tmp_path, monkeypatch):
    """Three GPUs; two processes submit at once five jobs each asking for 1, 2 or 3 GPUs: no two
    jobs ever hold a GPU at the same moment, and every job runs."""
    (shared / "train.py").write_text(SPAN)
    (shared / "spans").touch()
    (shared / "spans").chmod(0o666)
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(shared / "lines"))
    asks = {"a": ["1", "2", "1", "3", "1"], "b": ["2", "1", "1", "1", "3"]}
    names = {side: [f"{side}{i}" for i in range(5)] for side in "ab"}
    barrier = shared / "barrier"
    submitters = []
    for side in "ab":
        words = [f"{name}:{gpus}" for name, gpus in zip(names[side], asks[side])]
        argv, env = as_user(None, tmp_path / f"home-{side}", shared, ["-c", BURST, str(shared / f"ready-{side}"), str(barrier), "train.py", *words])
        env["JUPYTER_TRAINER_GPUS"] = "0-2"
        submitters.append(subprocess.Popen(argv, env=env, cwd=shared, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    wait_for(lambda: all((shared / f"ready-{side}").exists() for side in "ab"), what="both submitters ready")
    barrier.touch()
    for submitter in submitters:
        out, err = submitter.communicate(timeout=60)
        assert submitter.returncode == 0, (out, err)
    spans = lambda: [json.loads(line) for line in (shared / "spans").read_text().splitlines()]
    wait_for(lambda: len(spans()) == 10, timeout=40, what="the ten jobs to run")
    by_gpu = {}
    for job, gpus, began, ended in spans():
        assert len(gpus.split(",")) == int(dict(zip(names["a"] + names["b"], asks["a"] + asks["b"]))[job]), (job, gpus)
        for gpu in gpus.split(","):
            by_gpu.setdefault(gpu, []).append((began, ended, job))
    for gpu, held in by_gpu.items():
        held.sort()
        for (_, ended, first), (began, _, second) in zip(held, held[1:]):
            assert began >= ended, f"GPU {gpu}: {second} started {ended - began:.3f}s before {first} ended"
    for side in "ab":
        for name in names[side]:
            code = tmp_path / f"home-{side}" / "jobs" / name / "1" / "exit_code"
            wait_for(lambda: code.exists() and code.read_text().strip(), what=f"{name} to end")
    # first in, first out: the turns came in the order of the places (when each was submitted)
    turns = []
    for side in "ab":
        for name in names[side]:
            run = tmp_path / f"home-{side}" / "jobs" / name / "1"
            turns.append((json.loads((run / "line").read_text())["since_ns"], json.loads((run / "turn").read_text())["started_at"], name))
    turns.sort()
    # (each says when its turn came a moment after it took it: one that came just after another's
    # may say a moment earlier)
    for (_, first, earlier), (_, then, later) in zip(turns, turns[1:]):
        assert then > first - 0.05, f"{later} got its turn {first - then:.3f}s before {earlier}, in line before it: {turns}"


def test_a_gpu_jobs_exit_code_and_death_by_signal_are_its_own(machine):
    """The waiter that holds the job's GPUs ends as the job ended: its code, or its signal."""
    exits = submit_script(machine, "exits", "import sys\nsys.exit(3)\n", gpus="1")
    assert exits.wait(timeout=30).is_final
    assert (machine.status("exits")["status"], machine.status("exits")["exit_code"]) == ("failed", 3)
    machine.submit_in_turn("killed", gpus="1")
    machine.wait_started("killed")
    _, waiter = machine.pids("killed")
    (job,) = wait_for(lambda: children(waiter), what="the job, the waiter's child")
    os.kill(job, signal.SIGKILL)  # the job alone (the OOM killer's way)
    ended = wait_for(lambda: (lambda status: status["status"] != "running" and status)(machine.status("killed")), what="killed ended")
    assert (ended["status"], ended["exit_code"]) == ("failed", 137), ended


GROUP_SIGNALS = """\
import os, signal, time
seen = []
for name in ("SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE", "SIGVTALRM", "SIGPROF", "SIGXCPU", "SIGXFSZ"):
    number = getattr(signal, name)
    signal.signal(number, lambda *_: seen.append(1))
    os.killpg(os.getpgrp(), number)  # as a framework tells every process of its group
    time.sleep(0.1)
print("seen", len(seen), flush=True)
"""


def test_a_gpu_job_that_signals_its_own_group_is_not_killed_by_its_waiter_dying(machine):
    """A job that sends its process group a signal it handles itself (a framework telling its
    workers) must not lose its waiter to it, which would take the job down with it."""
    job = submit_script(machine, "signaller", GROUP_SIGNALS, gpus="1")
    assert job.wait(timeout=30).is_final
    ended = machine.status("signaller")
    assert (ended["status"], ended["exit_code"]) == ("completed", 0), (ended, job.logs()[-500:])
    assert "seen 8" in job.logs(), job.logs()[-500:]


def test_a_slot_token_another_user_planted_keeps_that_slot_out_not_the_queue(shared, tmp_path, monkeypatch):
    from jupyter_trainer.core import lines

    user = other_user()
    if user is None:
        no_other_user()
    root = shared / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    line = lines.line_dir(str(root), "q")
    lines.ensure_line(str(root), line)
    lines.set_max_running(line, 2)
    run_as(user, shared / "home-b", shared, ["-c", f"import os; os.mkdir({os.path.join(line, 'tokens', '0')!r})"])
    store = JobStore(tmp_path / "home-a")
    jobs = []
    for name in ("q1", "q2"):
        spec = build_spec(SCRIPT, host=True, image=None, container=None, workdir=str(shared), env=[f"JOB={name}"], queue="q")
        jobs.append(submit_detached(spec, name=name, store=store).job)
    try:
        wait_for(lambda: "q1" in started_now(shared) or jobs[0].refresh().status.is_final, what="q1 to start or end")
        assert "q1" in started_now(shared), (jobs[0].refresh().status, jobs[0].refresh().reason)
        time.sleep(1)
        assert "q2" not in started_now(shared), "two running in the one slot left"
        assert jobs[1].refresh().status.value == "pending", jobs[1].reason
        (shared / "go-q1").touch()
        wait_for(lambda: "q2" in started_now(shared), what="q2 to start")
    finally:
        for job in jobs:
            (shared / f"go-{job.name}").touch()
            job.wait(timeout=30)
