"""A hostile job, a hostile log and a second kernel: every promise holds.

Each test here stands for an attack or an unlucky moment that once broke a
promise; it runs on the backend where the defect lived.
"""

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import IN_CI, wait_for
from test_logs import CountingSource

from jupyter_trainer.backends import build_spec
from jupyter_trainer.backends.base import FileLogSource
from jupyter_trainer.core.record import Status
from jupyter_trainer.errors import TrainerError
from jupyter_trainer.jobs.job import get_job
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.logs.reading import MetricParser, tail_lines
from jupyter_trainer.spec.job_spec import Metric


def submit(script, where, workdir, name, **options):
    spec = build_spec(textwrap.dedent(script), container=None, workdir=str(workdir), gpus=None, **where, **options)
    return submit_detached(spec, name=name).job


# -- two kernels, one name -----------------------------------------------------------

SUBMITTER = r"""
import json, os, sys, time
from jupyter_trainer.backends.base import FileLogSource
from jupyter_trainer.errors import TrainerError
from jupyter_trainer.backends import build_spec
from jupyter_trainer.jobs.submit import submit_detached

name, script, go, workdir = sys.argv[1:5]
spec = build_spec(script, host=True, image=None, container=None, workdir=workdir, gpus=None)
while not os.path.exists(go):  # every submitter starts at the same moment
    pass
try:
    submission = submit_detached(spec, name=name)
    print(json.dumps({"attached": submission.attached, "run": submission.job.run}))
except TrainerError as error:
    print(json.dumps({"error": str(error)}))
"""


@pytest.mark.parametrize("same_cell", [True, False], ids=["same-cell", "different-cells"])
def test_two_kernels_submitting_one_name_at_once_launch_it_once(same_cell, workdir, home, tmp_path):
    for attempt in range(8):
        name, go = f"race-{attempt}", tmp_path / f"go-{attempt}"
        scripts = ["print('one')\n", "print('one')\n" if same_cell else "print('two')\n"]
        submitters = [
            subprocess.Popen([sys.executable, "-c", SUBMITTER, name, script, str(go), str(workdir)], stdout=subprocess.PIPE, text=True)
            for script in scripts
        ]
        go.touch()
        outcomes = [json.loads(process.communicate(timeout=60)[0]) for process in submitters]
        launched = [outcome for outcome in outcomes if outcome.get("attached") is False]
        assert len(launched) == 1, outcomes
        other = next(outcome for outcome in outcomes if outcome is not launched[0])
        if same_cell:
            assert other == {"attached": True, "run": 1}, outcomes
        else:
            assert "error" in other and "different cell" in other["error"], outcomes
        assert sorted(os.listdir(home / "jobs" / name)) == ["1"]
        assert get_job(name).wait(timeout=30) is Status.COMPLETED


# -- a job that attacks its own run files ---------------------------------------------

SCRIBBLER = """
import os, time
time.sleep(1)  # seen running first
run_dir = os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode())
with open(os.path.join(run_dir, {file!r}), "w") as handle:
    handle.write({content!r})
print("scribbled", flush=True)
time.sleep(600)
"""


def cli(*words):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *words], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "file, content", [("pid", "x y"), ("pid", "<img src=x onerror=alert(1)>"), ("exit_code", "9" * 5000 + "\n")],
    ids=["words-in-pid", "html-in-pid", "5000-digit-exit-code"],
)
def test_a_job_that_scribbles_on_its_run_files_breaks_only_itself(where, workdir, home, file, content):
    bystander = submit("import time\ntime.sleep(600)\n", where, workdir, "bystander")
    job = submit(SCRIBBLER.format(file=file, content=content), where, workdir, "scribbler")
    wait_for(lambda: job.status is Status.RUNNING, what="the job to run")
    wait_for(lambda: "scribbled" in job.logs(), what="the job to scribble")
    listing = cli("list", "--json")
    assert listing.returncode == 0, listing.stderr
    shown = {row["name"]: row for row in json.loads(listing.stdout)}
    assert shown["bystander"]["status"] == "running"
    assert shown["scribbler"]["status"] == "running" and "state unknown" in shown["scribbler"]["reason"]
    assert content[:20] not in listing.stdout  # what the job wrote is never echoed
    status = cli("status", "scribbler")
    assert status.returncode == 0 and "state unknown" in status.stdout and "Traceback" not in status.stderr
    stopped = cli("stop", "scribbler")
    assert stopped.returncode == 0, stopped.stderr
    assert get_job("scribbler").wait(timeout=60) is Status.STOPPED
    assert get_job("bystander").status is Status.RUNNING
    bystander.stop()


def test_a_fifo_in_place_of_a_run_file_blocks_nobody(workdir, home):
    script = """
    import os, time
    run_dir = os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode())
    for name in ("pid", "output.log"):
        os.remove(os.path.join(run_dir, name))
        os.mkfifo(os.path.join(run_dir, name))
    print("done", flush=True)
    time.sleep(600)
    """
    job = submit(script, {"host": True, "image": None}, workdir, "fifo")
    wait_for(lambda: (job.run_dir / "output.log").is_fifo(), what="the job to plant its FIFOs")
    listing = cli("list")  # an open() that waited on the FIFO would never return
    assert listing.returncode == 0 and "fifo" in listing.stdout
    logs = cli("logs", "fifo")
    assert logs.returncode == 1 and "output.log" in logs.stderr and len(logs.stderr.splitlines()) == 1
    assert cli("stop", "fifo").returncode == 0
    assert get_job("fifo").wait(timeout=60) is Status.STOPPED


def test_a_job_that_ends_as_it_is_stopped_keeps_its_outcome(where, workdir, home, store):
    job = submit("print('finished on its own')\n", where, workdir, "race")
    wait_for(lambda: (job.run_dir / "exit_code").read_bytes().strip(), what="the exit code to be written")
    # the stop is asked between a look that still saw it running and the end being recorded
    store.update("race", 1, lambda record: setattr(record, "stop_requested", True))
    get_job("race").stop()
    assert get_job("race").status is Status.COMPLETED and get_job("race").exit_code == 0


def test_an_unreadable_run_file_is_not_an_unreachable_engine(where, workdir, home):
    job = submit("import time\nprint('up', flush=True)\ntime.sleep(3)\n", where, workdir, "unreadable")
    wait_for(lambda: job.status is Status.RUNNING, what="the job to run")
    exit_code = job.run_dir / "exit_code"
    exit_code.rename(job.run_dir / "exit_code.moved")
    exit_code.mkdir()  # reading it fails as a permission error would
    seen = get_job("unreadable")
    assert seen.status is Status.RUNNING and "exit_code file cannot be read" in seen.reason
    assert "Docker engine" not in seen.reason
    wait_for(lambda: get_job("unreadable").status.is_final, timeout=60, what="the job to end")
    ended = get_job("unreadable")
    assert ended.status is Status.LOST and "outcome is unknown" in ended.reason


# -- Docker: a killed supervisor ----------------------------------------------------------


def test_a_job_whose_supervisor_was_killed_in_its_container_is_followed_and_stopped(docker_client, docker_image, workdir, home):
    job = submit("import time\nprint('up', flush=True)\ntime.sleep(600)\n", {"host": False, "image": docker_image}, workdir, "orphan")
    wait_for(lambda: "up" in job.logs(), what="the job to run")
    container = docker_client.containers.get(job.record.runtime["container_id"])
    supervisor, job_pid = (job.run_dir / "pid").read_text().split()
    container.exec_run(["sh", "-c", 'kill -KILL "$1"', "sh", supervisor])
    wait_for(lambda: not docker_client.api.exec_inspect(job.record.runtime["exec_id"])["Running"], what="the supervisor to die")
    seen = get_job("orphan")
    assert seen.status is Status.RUNNING, seen.reason
    seen.stop()
    assert get_job("orphan").status is Status.STOPPED
    alive = container.exec_run(["sh", "-c", f"kill -0 {job_pid} 2>/dev/null && echo alive || echo gone"]).output
    assert alive.strip() == b"gone"


# -- the store, out of every container's reach ----------------------------------------------

PEEKER = """
import os
store = "/workspace/home"
print("listing:", sorted(os.listdir(store)) if os.path.isdir(store) else "none")
for path in (store + "/fingerprint.key", store + "/jobs/bystander/1/record.json"):
    try:
        open(path, "rb").read()
        print("read", path)
    except OSError as exc:
        print("cannot read", path, exc.__class__.__name__)
try:
    open(store + "/planted", "w").write("x")
    print("wrote into the store")
except OSError as exc:
    print("cannot write", exc.__class__.__name__)
"""


def test_a_container_job_cannot_see_the_store_in_its_workspace(docker_image, home, tmp_path):
    # the notebook's directory (the default workdir) holds the store, as ~ holds ~/.jupyter_trainer
    bystander = submit("import time\ntime.sleep(600)\n", {"host": True, "image": None}, tmp_path, "bystander")
    job = submit(PEEKER, {"host": False, "image": docker_image}, tmp_path, "peeker")
    assert job.wait(timeout=60) is Status.COMPLETED, job.logs()
    output = job.logs()
    assert "listing: []" in output and "cannot write" in output and "\nread /" not in output, output
    assert not (home / "planted").exists()
    assert get_job("bystander").status is Status.RUNNING
    bystander.stop()


@pytest.mark.parametrize(
    "run_options, refusal",
    [
        ({"volumes": {"{tmp_path}": {"bind": "/data"}}}, "can reach the job store"),  # the store's parent
        ({"volumes": {"/var/run": {"bind": "/hostrun"}}}, "engine's socket"),  # the engine, which mounts anything
        ({"pid_mode": "host"}, "pid=host"),  # the machine's processes, and their files through /proc
    ],
    ids=["mounts-the-store", "reaches-the-engine", "shares-processes"],
)
def test_a_container_that_can_reach_the_store_is_refused(docker_client, docker_image, home, tmp_path, store, run_options, refusal):
    (home / "jobs").mkdir(parents=True)
    store.fingerprint_key()  # made at the first submission, whatever its outcome
    options = {key: ({path.format(tmp_path=tmp_path): bind for path, bind in value.items()} if key == "volumes" else value) for key, value in run_options.items()}
    theirs = docker_client.containers.run(docker_image, ["sleep", "infinity"], detach=True, init=True, **options)
    try:
        before = sorted(os.walk(home))
        spec = build_spec("print(1)\n", host=False, image=None, container=theirs.name, workdir=str(tmp_path), gpus=None)
        with pytest.raises(TrainerError) as refused:
            submit_detached(spec, name="exposed")
        assert refusal in str(refused.value) and "\n" not in str(refused.value)
        assert sorted(os.walk(home)) == before
    finally:
        theirs.remove(force=True)


def test_a_forged_record_never_gets_an_unrelated_process_signalled(workdir, home, store):
    job = submit("import time\ntime.sleep(600)\n", {"host": True, "image": None}, workdir, "forged")
    wait_for(lambda: job.status is Status.RUNNING, what="the job to run")
    real_supervisor = job.record.runtime["supervisor"]["pid"]
    bystander = subprocess.Popen(["sleep", "600"])
    try:

        def forge(record):  # what a job able to write its record could do
            record.runtime["supervisor"] = {"pid": bystander.pid, "start_time": None, "boot_id": record.runtime["supervisor"]["boot_id"]}

        store.update("forged", 1, forge)
        assert cli("stop", "forged").returncode == 0
        assert bystander.poll() is None  # never signalled
        assert get_job("forged").status is not Status.RUNNING
    finally:
        bystander.kill()
        os.kill(real_supervisor, 15)


# -- hostile logs --------------------------------------------------------------------------------


def test_the_default_metrics_are_linear_and_any_pattern_is_bounded(tmp_path):
    from jupyter_trainer.metrics.reader import MetricReader

    hostile = b"epoch 1 loss" + b" " * 20_000 + b"\n"
    fair = b"epoch 2 step 0 loss" + b" " * 300 + b"0.25\nstep 1 loss: 0.5\nstep 2 loss=0.75\n"

    def found(data):
        points = []
        reader = MetricReader(points.append)
        reader.feed(data)
        reader.flush()
        return [(name, value) for name, _, _, value in points]

    # an old default took 17.5 s on this line with the GIL held; linear, it takes about 2 ms
    assert found(hostile + fair) == [("loss", 0.25), ("loss", 0.5), ("loss", 0.75)]
    assert found(hostile * 200 + fair) == [("loss", 0.25), ("loss", 0.5), ("loss", 0.75)]
    quadratic = MetricParser([Metric("slow", r"loss\s*[:=]?\s*(\d+\.\d+)")])
    assert quadratic.scan(hostile * 20 + fair) == [("slow", [b"0.25", b"0.5", b"0.75"])]
    assert quadratic.skipped == {"slow": 20}  # the lines it could read only in part, said, not hidden


def test_a_kernel_keeps_answering_while_its_widget_reads_a_hostile_log(workdir, home):
    from jupyter_client.manager import start_new_kernel

    script = "print('epoch 1 loss' + ' ' * 20000 + ' nothing', flush=True)\n" * 30 + "import time\ntime.sleep(60)\n"
    manager, client = start_new_kernel(kernel_name="python3", env={**os.environ})
    try:
        cell = f"%load_ext jupyter_trainer\n%%train_detached --host --name hostile-log --workdir {workdir} --metric 'slow=loss\\s*[:=]?\\s*(\\d+)'\n{script}"
        client.execute_interactive("%load_ext jupyter_trainer", timeout=60)
        reply = client.execute_interactive(cell.split("\n", 1)[1], timeout=60)
        assert reply["content"]["status"] == "ok", reply
        wait_for(lambda: get_job("hostile-log").logs(tail=1).endswith("nothing\n"), what="the job to print")
        # the poller thread reads the log meanwhile; a match never holds the GIL for long
        probe = "from jupyter_trainer.view.poller import poller; print(sum(w.monitor.cursor.offset for w in poller().widgets))"
        read = 0
        for _ in range(40):
            output = []
            reply = client.execute_interactive(probe, timeout=10, output_hook=output.append)
            assert reply["content"]["status"] == "ok"
            read = max([read] + [int(m["content"]["text"]) for m in output if m["msg_type"] == "stream"])
            time.sleep(0.25)
        assert read > 30 * 20000  # the widget did read the whole hostile log
    finally:
        with contextlib.suppress(Exception):
            get_job("hostile-log").stop()
        client.stop_channels()
        manager.shutdown_kernel(now=True)


TRUNCATOR = """
import os, time
for i in range(5):
    print("before", i, flush=True)
while not os.path.exists({go!r}):
    time.sleep(0.05)
{truncate}
for i in range(3):
    print("after", i, flush=True)
"""

TRUNCATIONS = {
    "ftruncate": "os.ftruncate(1, 0)",
    "reopened": "import sys\nsys.stdout = open('/dev/stdout', 'w')",  # reopening truncates (O_TRUNC)
    "copytruncate": "import shutil\nshutil.copy(os.path.join(os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode()), 'output.log'), {rotated!r})\nos.truncate(os.path.join(os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode()), 'output.log'), 0)",
}


@pytest.mark.parametrize("how", TRUNCATIONS)
def test_a_truncated_log_is_followed_from_its_new_start(how, workdir, home, tmp_path, store, fake_backend):
    go = tmp_path / "go"
    truncate = TRUNCATIONS[how].format(rotated=str(tmp_path / "rotated.log"))
    job = submit(TRUNCATOR.format(go=str(go), truncate=truncate), {"host": True, "image": None}, workdir, "truncated")
    follower = subprocess.Popen([sys.executable, "-m", "jupyter_trainer", "logs", "truncated", "-f"], stdout=subprocess.PIPE, text=True)
    from jupyter_trainer.view.monitor import JobMonitor

    monitor = JobMonitor(get_job("truncated"))
    monitor.start()
    follow = get_job("truncated").follow(interval=0.1)
    seen = [next(follow) for _ in range(5)]
    assert seen == [f"before {i}" for i in range(5)]
    monitor.read_log()
    printed = [follower.stdout.readline().rstrip("\n") for _ in range(5)]
    go.touch()
    assert job.wait(timeout=60) is Status.COMPLETED
    rest = list(follow)
    assert rest[0].startswith("[jupyter_trainer: the log was truncated") and rest[1:] == [f"after {i}" for i in range(3)]
    printed += follower.communicate(timeout=60)[0].splitlines()
    assert printed[:5] == seen and "truncated" in printed[5] and printed[6:] == rest[1:]
    monitor.read_log()
    assert monitor.log_text().split("\n")[-4:] == rest


def test_a_log_of_one_endless_redraw_line_is_tailed_by_its_end(workdir, home, tmp_path):
    redraw = "".join(f"\r{i:>9}/10000000 [{'#' * 40}] loss={i / 1e7:.6f}" for i in range(1_000_000))
    script = f"import sys\nsys.stdout.write({redraw[-200:]!r} * 0)\nwith open('/dev/null') as _: pass\n"
    job = submit(script, {"host": True, "image": None}, workdir, "endless")
    assert job.wait(timeout=60) is Status.COMPLETED
    (job.run_dir / "output.log").write_text(redraw)  # ~70 MB of one line, as tqdm writes it without a newline
    source = CountingSource(job.run_dir / "output.log")
    assert tail_lines(source, 5) == [redraw[redraw.rindex("\r") + 1 :]]
    assert source.bytes_read <= 2 << 20
    assert get_job("endless").logs(tail=5) == redraw[redraw.rindex("\r") + 1 :] + "\n"
    endless = b"x" * (50 << 20)  # no redraw at all: shown by its end
    (job.run_dir / "output.log").write_bytes(endless)
    (line,) = tail_lines(FileLogSource(job.run_dir / "output.log"), 5)
    assert line.startswith("…") and len(line) <= 16 * 1024 + 1


def test_metrics_inside_an_unended_redraw_line_count_as_they_come(workdir, home, tmp_path):
    go = tmp_path / "go"
    script = f"""
import os, sys, time
for i in range(2000):
    sys.stdout.write(f"\\r{{i}}/2000 loss={{i / 1000:.3f}}")
    sys.stdout.flush()
    if i == 999:
        while not os.path.exists({str(go)!r}):
            time.sleep(0.05)
print()
"""
    job = submit(script, {"host": True, "image": None}, workdir, "redraws")
    from jupyter_trainer.view.monitor import JobMonitor

    monitor = JobMonitor(get_job("redraws"), read_budget=4096)  # small reads: redraws cut anywhere
    monitor.start()
    wait_for(lambda: monitor.read_log() or monitor.metrics.counts.get("loss", 0) >= 999, what="the first half of the epoch")
    assert get_job("redraws").status is Status.RUNNING  # read while the line is still being redrawn
    go.touch()
    assert job.wait(timeout=60) is Status.COMPLETED
    while monitor.read_log():
        pass
    assert monitor.metrics.counts["loss"] == 2000  # every redraw once, none lost, none twice
    assert monitor.metrics.last("loss") == 1.999


MOVER = """
import os
for move in (("/workspace/sub", "/workspace/moved"), ("/workspace/sub/.jt", "/workspace/sub/jt2")):
    try:
        os.rename(*move)
        print("moved", move[0])
    except OSError as exc:
        print("cannot move", move[0], exc.__class__.__name__)
try:
    os.makedirs("/workspace/sub/.jt/jobs", exist_ok=True)
    print("planted")
except OSError as exc:
    print("cannot plant", exc.__class__.__name__)
"""


def test_a_container_job_can_neither_move_nor_replace_a_store_deep_in_its_workspace(docker_image, tmp_path, monkeypatch):
    # the store two levels below the workspace: renaming the directory on the way would make this
    # machine use a "store" of the job's making
    home = tmp_path / "sub" / ".jt"
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(home))
    job = submit(MOVER, {"host": False, "image": docker_image}, tmp_path, "mover")
    try:
        assert job.wait(timeout=60) is Status.COMPLETED, job.logs()
        output = job.logs()
        assert "moved" not in output.replace("cannot move", "") and "cannot plant" in output, output
        assert (home / "fingerprint.key").exists() and not (tmp_path / "moved").exists()
        (tmp_path / "sub" / "mine.txt").write_text("the workspace's own files are still there")
        seer = submit("print(open('/workspace/sub/mine.txt').read())\n", {"host": False, "image": docker_image}, tmp_path, "seer")
        assert seer.wait(timeout=60) is Status.COMPLETED and "still there" in seer.logs()
    finally:
        import docker

        for container in docker.from_env().containers.list(all=True, filters={"label": "jupyter_trainer"}, ignore_removed=True):
            if container.labels.get("jupyter_trainer.jobs_dir") == str(home / "jobs"):
                container.remove(force=True)


def test_a_store_reached_through_a_link_in_the_workspace_is_refused(docker_image, tmp_path, monkeypatch):
    real = tmp_path / "elsewhere" / "store"
    real.mkdir(parents=True)
    workspace = tmp_path / "notebooks"
    workspace.mkdir()
    (workspace / ".jupyter_trainer").symlink_to(real)  # a job could put a directory of its own there
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(workspace / ".jupyter_trainer"))
    with pytest.raises(TrainerError) as refused:
        submit("print(1)\n", {"host": False, "image": docker_image}, workspace, "linked")
    message = str(refused.value)
    assert "a link a job could replace" in message and f"JUPYTER_TRAINER_HOME={real}" in message and "\n" not in message
    assert not (real / "jobs" / "linked").exists()


def test_a_job_that_forges_an_exit_code_still_runs_and_is_stopped(where, workdir, home):
    job = submit(SCRIBBLER.format(file="exit_code", content="0 exited\n"), where, workdir, "forger")
    wait_for(lambda: "scribbled" in job.logs(), what="the job to forge its exit code")
    assert get_job("forger").status is Status.RUNNING  # its supervisor lives: the job is not done
    assert cli("stop", "forger").returncode == 0
    stopped = get_job("forger")
    assert stopped.status is Status.STOPPED and stopped.exit_code != 0


def test_a_job_cannot_end_a_neighbour_in_its_container(docker_image, workdir, home):
    where = {"host": False, "image": docker_image}
    victim = submit("import time\nprint('up', flush=True)\ntime.sleep(600)\n", where, workdir, "victim")
    wait_for(lambda: "up" in victim.logs(), what="the victim to run")
    forger = submit("open('/jupyter_trainer/jobs/victim/1/exit_code', 'w').write('0 exited\\n')\n", where, workdir, "neighbour")
    assert forger.wait(timeout=60) is Status.COMPLETED
    assert get_job("victim").status is Status.RUNNING
    get_job("victim").stop()
    assert get_job("victim").status is Status.STOPPED


def test_a_container_whose_tools_hang_never_hangs_us(docker_client, docker_image, workdir, home):
    from jupyter_trainer.backends import Backends
    from jupyter_trainer.backends.docker.backend import DockerBackend

    patient = Backends(docker=DockerBackend(exec_seconds=2))  # answers from inside awaited 2 s, not 30
    theirs = docker_client.containers.run(docker_image, ["sleep", "infinity"], detach=True, init=True)
    try:
        script = """
import os, time
run_dir = os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode())
os.remove(os.path.join(run_dir, "output.log"))
os.mkfifo(os.path.join(run_dir, "output.log"))  # wc -c < it waits forever
os.remove("/bin/sh")
with open("/bin/sh", "w") as fake:
    fake.write("#!/bin/dash\\nexec sleep 1000\\n")
os.chmod("/bin/sh", 0o755)
time.sleep(600)
"""
        spec = build_spec(textwrap.dedent(script), host=False, image=None, container=theirs.name, workdir=str(workdir), gpus=None)
        job = submit_detached(spec, name="hanger", backends=patient).job
        wait_for(lambda: theirs.exec_run(["/bin/dash", "-c", "head -c 2 /bin/sh"]).output == b"#!", what="the job to replace sh")
        with pytest.raises(TrainerError) as answered:
            job.logs(tail=3)
        assert "did not answer within 2 s" in str(answered.value) and "\n" not in str(answered.value)
        with pytest.raises(TrainerError) as stopping:
            get_job("hanger", backends=patient).stop()
        assert "did not answer" in str(stopping.value)
    finally:
        theirs.remove(force=True)


def test_a_job_that_kills_its_supervisor_cannot_name_another_process_as_itself(workdir, home, tmp_path):
    told = tmp_path / "bystander.pid"
    script = f"""
import os, signal, time
run_dir = os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode())
while not os.path.exists({str(told)!r}):
    time.sleep(0.05)
bystander = open({str(told)!r}).read().strip()
supervisor = int(open(os.path.join(run_dir, "pid")).read().split()[0])
os.kill(supervisor, signal.SIGKILL)
with open(os.path.join(run_dir, "pid"), "r+") as pid_file:
    pid_file.write(f"{{supervisor}} {{bystander}}\\n")
print("pretending", flush=True)
time.sleep(600)
"""
    job = submit(script, {"host": True, "image": None}, workdir, "pretender")
    # another process, of its own session, started just after the job: within its start window
    bystander = subprocess.Popen(["setsid", "sleep", "600"])
    try:
        told.write_text(str(bystander.pid))
        wait_for(lambda: "pretending" in job.logs(), what="the job to pretend")
        assert get_job("pretender").status is Status.RUNNING  # the job itself is still found, by what it runs
        assert cli("stop", "pretender").returncode == 0
        time.sleep(0.5)
        assert bystander.poll() is None  # never signalled
        assert get_job("pretender").status is Status.STOPPED
    finally:
        bystander.kill()
        subprocess.run(["pkill", "-f", str(home / "jobs" / "pretender")])


def test_any_pattern_costs_a_bounded_time_per_chunk():
    # each line alone is slow for this pattern; there are enough of them to hold a poll for a minute
    slow = MetricParser([Metric("val", r"val (?:a|aa)*b(\d)")])
    chunk = ("val " + "a" * 40 + "c\n") * 20_000 + "val ab7\n"
    started = time.process_time()
    found = slow.scan(chunk.encode())
    spent = time.process_time() - started
    assert slow.skipped["val"] > 0  # what could not be read in time is said
    assert spent < 5, spent  # the old matcher spent about a minute here (a bound, not a speed target)
    assert found[0][0] == "val"


def test_one_bad_entry_in_the_store_never_breaks_the_listing(workdir, home, store):
    good = submit("print('fine')\n", {"host": True, "image": None}, workdir, "good")
    assert good.wait(timeout=30) is Status.COMPLETED
    record = json.loads((good.run_dir / "record.json").read_text())
    bad = {
        "a-list": b"[]",
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "text-start": json.dumps({**record, "name": "text-start", "started_at": "yesterday"}).encode(),
        "null-runtime": json.dumps({**record, "name": "null-runtime", "runtime": None}).encode(),
        "list-runtime": json.dumps({**record, "name": "list-runtime", "runtime": [1]}).encode(),
        "string-supervisor": json.dumps({**record, "name": "string-supervisor", "status": "running", "runtime": {"supervisor": "x"}}).encode(),
        "another-jobs": json.dumps(record).encode(),  # a record copied under another name
    }
    for name, content in bad.items():
        (home / "jobs" / name / "1").mkdir(parents=True)
        (home / "jobs" / name / "1" / "record.json").write_bytes(content)
    (home / "jobs" / "as-dir" / "1" / "record.json").mkdir(parents=True)
    (home / "jobs" / "notes").write_text("a stray file")
    for words in (["list"], ["list", "--json"], ["list", "--all"]):
        listing = cli(*words)
        assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
        assert "good" in listing.stdout
    table = cli("list").stdout
    assert table.count("! ") >= len(bad) - 1  # each bad record says so on a line of its own
    status = cli("status", "deep")
    assert status.returncode == 1 and len(status.stderr.splitlines()) == 1


def test_printing_a_huge_log_whole_never_holds_it_in_memory(workdir, home):
    job = submit("print('x')\n", {"host": True, "image": None}, workdir, "huge")
    assert job.wait(timeout=30) is Status.COMPLETED
    line = b"epoch 1 step 2 loss 0.5 " + b"." * 100 + b"\n"
    with open(job.run_dir / "output.log", "wb") as log:
        for _ in range(400):  # 400 MB
            log.write(line * ((1 << 20) // len(line)))
    measured = (
        "import runpy, sys\n"
        "sys.argv = ['jupyter-trainer', 'logs', 'huge']\n"
        "try:\n    runpy.run_module('jupyter_trainer.surfaces.cli', run_name='__main__')\n"
        "except SystemExit as exit:\n    assert not exit.code\n"
        # VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')), file=sys.stderr)\n"
    )
    with open(os.devnull, "w") as sink:
        printer = subprocess.run([sys.executable, "-c", measured], stdout=sink, stderr=subprocess.PIPE, text=True, timeout=300)
    assert printer.returncode == 0, printer.stderr
    peak_kb = int(printer.stderr.split()[-1])
    assert peak_kb < 200_000, peak_kb  # a bound against holding the log, not a speed or memory target


def test_no_terminal_control_from_a_log_reaches_the_terminal(workdir, home):
    hostile = "\x1b]0;retitled\x07\x1b]8;;unterminated \x1bPq#0\x1b\\\x1bc\x1b(0\x9b2J\x07\x00\x85 loss=0.5\tdone"
    job = submit(f"import sys\nsys.stdout.write({hostile!r} + '\\n')\n", {"host": True, "image": None}, workdir, "controls")
    assert job.wait(timeout=30) is Status.COMPLETED
    for words in (["logs", "controls"], ["logs", "controls", "-n", "1"]):
        shown = cli(*words).stdout
        assert not any(ord(char) < 32 and char not in "\t\n" or 0x7F <= ord(char) <= 0x9F for char in shown), repr(shown)
        assert "done" in shown


def test_a_store_path_a_job_could_redirect_through_links_is_refused(docker_image, tmp_path, monkeypatch):
    workspace = tmp_path / "ws"
    (workspace / "real").mkdir(parents=True)
    (workspace / "sub").symlink_to(workspace / "real")  # a link inside the workspace...
    (tmp_path / "outside").symlink_to(workspace / "sub")  # ...reached through a link outside it
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(tmp_path / "outside" / ".jt"))
    with pytest.raises(TrainerError) as refused:
        submit("print(1)\n", {"host": False, "image": docker_image}, workspace, "redirected")
    assert "a link a job could replace" in str(refused.value) and "\n" not in str(refused.value)


def test_a_store_path_with_dot_dot_after_a_link_means_what_it_says(docker_image, tmp_path, monkeypatch):
    # WS/l/../.jt is WS/.jt, as a shell's cd takes it: the store never depends on where l leads, so
    # a job replacing l moves nothing; and WS/.jt, in the workspace, is covered
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (workspace / "l").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", f"{workspace}/l/../.jt")
    peek = "import os\nos.remove('/workspace/l')\nos.mkdir('/workspace/l')\nprint(sorted(os.listdir('/workspace/.jt')))\n"
    job = submit(peek, {"host": False, "image": docker_image}, workspace, "dotdot")
    assert job.store.home == workspace / ".jt"
    assert job.wait(timeout=60) is Status.COMPLETED and job.logs() == "[]\n", job.logs()


@pytest.fixture
def bind_alias(tmp_path):
    """The workspace seen at a second path through a bind mount, as NFS automounts and /mnt binds do."""
    if os.geteuid() != 0:
        (pytest.fail if IN_CI else pytest.skip)("a bind mount needs root")  # CI runs as root: never skipped there
    workspace, alias = tmp_path / "ws", tmp_path / "alias"
    workspace.mkdir()
    alias.mkdir()
    subprocess.run(["mount", "--bind", str(workspace), str(alias)], check=True)
    yield workspace, alias
    subprocess.run(["umount", "-l", str(alias)])


def test_a_store_named_through_a_bind_mount_of_the_workspace_is_still_covered(docker_image, bind_alias, monkeypatch):
    workspace, alias = bind_alias
    home = alias / ".jt"
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(home))
    peek = "import os\nprint(sorted(os.listdir('/workspace/.jt')))\ntry:\n    open('/workspace/.jt/x', 'w')\nexcept OSError:\n    print('read-only')\n"
    job = submit(peek, {"host": False, "image": docker_image}, workspace, "aliased")
    try:
        assert job.wait(timeout=60) is Status.COMPLETED, job.logs()
        assert job.logs() == "[]\nread-only\n"
    finally:
        import docker

        for container in docker.from_env().containers.list(all=True, filters={"label": "jupyter_trainer"}, ignore_removed=True):
            if container.labels.get("jupyter_trainer.jobs_dir") == str(home / "jobs"):
                container.remove(force=True)


FORGE_AND_KILL = """
import os, signal, time
run_dir = os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode())
with open(os.path.join(run_dir, "exit_code"), "r+") as code:
    code.write("0 exited\\n")
os.kill(int(open(os.path.join(run_dir, "pid")).read().split()[0]), signal.SIGKILL)
print("forged", flush=True)
time.sleep(600)
"""


def test_a_job_that_forges_its_exit_code_and_kills_its_supervisor_is_still_followed_and_stopped(where, workdir, home):
    job = submit(FORGE_AND_KILL, where, workdir, "forge-and-kill")
    wait_for(lambda: "forged" in job.logs(), what="the job to forge and kill")
    time.sleep(0.5)
    assert get_job("forge-and-kill").status is Status.RUNNING  # found by what it runs, not by its files
    assert cli("stop", "forge-and-kill").returncode == 0
    # it is gone; with no supervisor left, how it ended is what it wrote itself
    assert get_job("forge-and-kill").status.is_final
    script = f"{job.record.runtime['run_dir']}/script.py" if not where["host"] else str(job.run_dir / "script.py")
    if where["host"]:
        assert subprocess.run(["pgrep", "-f", script], capture_output=True).returncode == 1
    else:
        import docker

        from jupyter_trainer.backends.docker.in_container import job_processes

        container = docker.from_env().containers.get(job.record.runtime["container_id"])
        assert job_processes(container, job.record.runtime["run_dir"]) == {"supervisor": [], "job": []}


def test_odd_numbers_in_a_record_are_one_line_and_never_break_the_listing(workdir, home):
    good = submit("print('fine')\n", {"host": True, "image": None}, workdir, "fine")
    assert good.wait(timeout=30) is Status.COMPLETED
    text = (good.run_dir / "record.json").read_text()
    record = json.loads(text)
    for index, odd in enumerate(["NaN", "Infinity", "-Infinity", "1e309", "1e20", "9" * 300]):
        name = f"odd-{index}"
        (home / "jobs" / name / "1").mkdir(parents=True)
        odd_text = json.dumps({**record, "name": name}).replace(json.dumps(record["created_at"]), odd, 1)
        (home / "jobs" / name / "1" / "record.json").write_text(odd_text)
    for words in (["list"], ["list", "--json"]):
        listing = cli(*words)
        assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
        assert "fine" in listing.stdout
    json.loads(cli("list", "--json").stdout)  # standard JSON: no NaN or Infinity
    status = cli("status", "odd-0")
    assert status.returncode == 1 and len(status.stderr.splitlines()) == 1


def test_a_relative_store_path_is_made_absolute(tmp_path, monkeypatch, workdir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", "relative-store")
    job = submit("print(1)\n", {"host": True, "image": None}, workdir, "anchored")
    assert job.store.home == tmp_path / "relative-store"
    elsewhere = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", "list"], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert "anchored" in elsewhere.stdout




def test_a_job_that_replaces_its_exit_code_file_keeps_its_outcome(where, workdir, home):
    """The supervisor holds its pid and exit_code files from before the job starts: a job that puts
    a FIFO in their place (in a container, where its names for them are links to the store's files)
    leaves what we read as it is."""
    script = """
    import os
    run_dir = os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode())
    for name in ("exit_code", "pid"):
        os.remove(os.path.join(run_dir, name))
        os.mkfifo(os.path.join(run_dir, name))
    print("replaced", flush=True)
    raise SystemExit(3)
    """
    job = submit(script, where, workdir, "fifo-exit")
    assert job.wait(timeout=60).is_final
    ended = get_job("fifo-exit")
    if where["host"]:  # the store's own names were replaced: what is read is what the job left
        assert ended.status is Status.LOST and "exit_code file cannot be read" in ended.record.reason
    else:
        assert (ended.status, ended.exit_code) == (Status.FAILED, 3), ended.record.reason
    assert "was it killed" not in ended.record.reason


STOPPER_KILLED_BEFORE_SIGNALLING = """
import os, signal
from jupyter_trainer.jobs.job import get_job
job = get_job("interrupted")
job.backend_impl().stop = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
job.stop()
"""


def test_a_stopper_killed_before_it_signalled_leaves_the_job_running_and_never_stopped_by_the_user(workdir, home):
    from conftest import run_python

    job = submit("import time\nprint('up', flush=True)\ntime.sleep(600)\n", {"host": True, "image": None}, workdir, "interrupted")
    wait_for(lambda: "up" in job.logs(), what="the job to start")
    killed = run_python(STOPPER_KILLED_BEFORE_SIGNALLING)
    assert killed.returncode == -9, killed.stderr
    seen = get_job("interrupted")
    assert seen.record.stop_requested and seen.record.stop_sent is False and seen.status is Status.RUNNING
    # the job then vanishes (its supervisor and itself killed, as a reboot would): lost, not stopped
    pids = (job.run_dir / "pid").read_text().split()
    for pid in pids:
        os.kill(int(pid), 9)
    wait_for(lambda: get_job("interrupted").status.is_final, what="the job to be seen gone")
    ended = get_job("interrupted")
    assert ended.status is Status.LOST and "a stop had been asked for but never reached it" in ended.record.reason


def test_a_stop_asked_again_after_a_killed_stopper_stops_the_job(workdir, home):
    from conftest import run_python

    job = submit("import time\nprint('up', flush=True)\ntime.sleep(600)\n", {"host": True, "image": None}, workdir, "interrupted")
    wait_for(lambda: "up" in job.logs(), what="the job to start")
    assert run_python(STOPPER_KILLED_BEFORE_SIGNALLING).returncode == -9
    stopped = get_job("interrupted").stop()
    assert stopped.status is Status.STOPPED and stopped.record.reason == "stopped by the user"
    assert stopped.record.stop_sent is True
