"""Faults, concurrency and attacks: a submitted job is never lost, never misreported, and nothing gets in.

Run against the --host backend and a real Docker engine.
"""

import argparse
import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import IN_CI, TEST_IMAGE, ipython_submitting, placement_flags, run_python, wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.processes import session_id
from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import Job, get_job, list_jobs
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.view.job_html import header_html, log_html

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"


def submit(script, where, workdir, name, **options):
    spec = build_spec(textwrap.dedent(script), container=None, workdir=str(workdir), gpus=None, **where, **options)
    return submit_detached(spec, name=name).job


# -- faults ----------------------------------------------------------------------


def test_ten_kernels_killed_mid_job(where, workdir, home):
    script = "import time\nfor i in range(20):\n    print('line', i)\n    time.sleep(0.1)\nraise SystemExit(7)\n"
    for round in range(10):
        kernel = ipython_submitting(f"{placement_flags(where)} --name k{round} --workdir {workdir}", script)
        kernel.kill()
        kernel.wait()
    for round in range(10):
        job = Job.load(f"k{round}")
        assert job.wait(timeout=120) is Status.FAILED and job.exit_code == 7
        assert job.logs() == "".join(f"line {i}\n" for i in range(20))


def test_reboot_leaves_no_job_running(where, workdir, home, request):
    job = submit(SLEEPER, where, workdir, "before-reboot")
    wait_for(lambda: job.status is Status.RUNNING, what="the job to run")
    if where["host"]:
        # a new boot: the recorded boot id no longer matches (and the process is really gone)
        path = job.run_dir / "record.json"
        record = json.loads(path.read_text())
        record["runtime"]["supervisor"]["boot_id"] = "00000000-0000-0000-0000-000000000000"
        path.write_text(json.dumps(record))
        _, job_pid = map(int, (job.run_dir / "pid").read_text().split())
        os.kill(record["runtime"]["supervisor"]["pid"], 9)
        os.killpg(job_pid, 9)  # a reboot ends the job too
        expected = "the machine restarted"
    else:
        # after a reboot the engine comes back with the container restarted (or stopped) and no exec
        request.getfixturevalue("docker_client").containers.get(job.record.runtime["container_id"]).restart(timeout=1)
        expected = "the container was restarted (docker restart) at"
    result = run_python("import jupyter_trainer as jt; j = jt.get_job('before-reboot'); print(j.status); print(j.reason)")
    status, reason = result.stdout.splitlines()
    assert status == "lost" and expected in reason, result.stderr


def _kill_supervisor(job):
    wait_for(lambda: job.status is Status.RUNNING and "up" in job.logs(), what="the job to run")
    supervisor_pid, job_pid = map(int, (job.run_dir / "pid").read_text().split())
    os.kill(supervisor_pid, 9)
    wait_for(lambda: session_id(supervisor_pid) is None, what="the supervisor to end")
    return job_pid


def test_a_job_outlives_its_killed_supervisor_and_can_still_be_stopped(workdir, home):
    job = submit(SLEEPER, {"host": True, "image": None}, workdir, "orphan")
    job_pid = _kill_supervisor(job)
    assert get_job("orphan").status is Status.RUNNING
    get_job("orphan").stop()
    wait_for(lambda: session_id(job_pid) is None, what="the job to end")
    ended = get_job("orphan")
    assert ended.status is Status.STOPPED


def test_a_pid_taken_over_by_a_later_process_is_not_the_job(workdir, home):
    job = submit(SLEEPER, {"host": True, "image": None}, workdir, "impostor")
    job_pid = _kill_supervisor(job)
    try:
        # as if this process had got the job's pid an hour after the job began: move the
        # supervisor's recorded start an hour back
        path = job.run_dir / "record.json"
        record = json.loads(path.read_text())
        record["runtime"]["supervisor"]["start_time"] -= 3600 * os.sysconf("SC_CLK_TCK")
        path.write_text(json.dumps(record))
        seen = get_job("impostor")
        assert seen.status is Status.LOST and "supervisor" in seen.reason
        seen.stop()  # must not signal a process that is not the job
        time.sleep(0.5)
        assert session_id(job_pid) == job_pid
    finally:
        os.killpg(job_pid, 9)


# These tests stop and restart an engine: a private one (conftest's `private_docker`), never the machine's.


def test_engine_restart_mid_job(private_docker, workdir, home):
    engine, placement = private_docker, {"host": False, "image": TEST_IMAGE}
    job = submit(SLEEPER, placement, workdir, "engine")
    wait_for(lambda: job.status is Status.RUNNING, what="the job to run")
    engine.stop()
    try:
        down = get_job("engine")
        assert down.status is Status.RUNNING and "no Docker engine reachable at" in down.reason
    finally:
        engine.start()
    back = get_job("engine")
    assert back.status is Status.LOST and "stopped" in back.reason
    again = submit("print('after the restart')\n", placement, workdir, "after")
    assert again.wait(timeout=60) is Status.COMPLETED and again.logs() == "after the restart\n"


def test_engine_restart_with_live_restore_keeps_the_job(private_docker, workdir, home):
    # with live-restore the containers, and the jobs in them, outlive the engine
    engine, placement = private_docker, {"host": False, "image": TEST_IMAGE}
    script = "import time\nfor i in range(30):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\nraise SystemExit(3)\n"
    engine.restart("--live-restore")  # private_docker restarts it plain afterwards
    job = submit(script, placement, workdir, "live")
    stopped = submit(SLEEPER, placement, workdir, "live-stopped")
    wait_for(lambda: "tick 1" in job.logs() and "up" in stopped.logs(), what="the jobs to print")
    assert job.status is Status.RUNNING and stopped.status is Status.RUNNING
    engine.stop()
    try:
        assert get_job("live").status is Status.RUNNING
    finally:
        engine.start("--live-restore")
    back = get_job("live")
    assert back.status is Status.RUNNING and not back.reason  # the engine forgot the exec, not the job
    assert back.wait(timeout=60) is Status.FAILED and back.exit_code == 3
    assert back.logs() == "".join(f"tick {i}\n" for i in range(30))
    get_job("live-stopped").stop()  # its supervisor is found without the exec the engine forgot
    assert get_job("live-stopped").status is Status.STOPPED


def test_out_of_memory_is_diagnosed(docker_client, docker_image, workdir, home):
    limited = docker_client.containers.run(docker_image, ["sleep", "infinity"], detach=True, init=True, mem_limit="64m", memswap_limit="64m")
    try:
        spec = build_spec(
            "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))\n",
            host=False, image=None, container=limited.name, workdir=str(workdir), gpus=None,
        )  # fmt: skip
        job = submit_detached(spec, name="oom").job
        assert job.wait(timeout=120) is Status.FAILED and job.exit_code == 137
        assert "out of memory" in job.reason
    finally:
        limited.remove(force=True)


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """JUPYTER_TRAINER_HOME on a 2 MB tmpfs."""
    path = tmp_path / "small-disk"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)], capture_output=True, text=True)
    if mounted.returncode != 0:
        if IN_CI:
            pytest.fail(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(path))
    yield path
    subprocess.run(["umount", "-l", str(path)])


def test_full_disk_under_the_log(where, workdir, small_disk, request):
    if not where["host"]:
        request.getfixturevalue("docker_image")
    # the log fills the disk: the job fails, its exit code is still recorded, the record stays intact
    job = submit("import sys\nwhile True:\n    print('x' * 1000)\n", where, workdir, "filler")
    assert job.wait(timeout=120) is Status.FAILED and job.exit_code != 0
    assert "is full" in job.reason
    json.loads((job.run_dir / "record.json").read_text())  # intact: whole and readable
    seen = run_python("import jupyter_trainer as jt; j = jt.get_job('filler'); print(j.status, j.exit_code)")
    assert seen.stdout.split() == ["failed", str(job.exit_code)], seen.stderr  # and every reader tells the truth
    # a new submission onto the full disk is one clear line and claims nothing
    from jupyter_trainer.errors import StoreError

    before = sorted(os.listdir(small_disk / "jobs"))
    with pytest.raises(StoreError) as info:
        submit("print(1)\n", where, workdir, "no-room")
    assert "\n" not in str(info.value) and "cannot write the job store" in str(info.value)
    assert sorted(os.listdir(small_disk / "jobs")) == before and get_job("filler").status is Status.FAILED


# -- concurrency -----------------------------------------------------------------

WRITER = """
import os, sys, time
from jupyter_trainer.backends import build_spec
from jupyter_trainer.jobs.submit import submit_detached
prefix, go, host, image, workdir = sys.argv[1:6]
while not os.path.exists(go):
    time.sleep(0.005)
for k in range(25):
    spec = build_spec(f"print('{prefix}-{k}')\\n", host=host == "1", image=image or None, container=None, workdir=workdir, gpus=None)
    submit_detached(spec, name=f"{prefix}-{k}")
"""

READER = """
import json, os, sys, time
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.core.record import JobRecord
go, stop = sys.argv[1:3]
store, reads, torn = JobStore(), 0, []
while not os.path.exists(go):
    time.sleep(0.005)
while not os.path.exists(stop):
    for item in store.records():
        reads += 1
        if not isinstance(item, JobRecord):
            torn.append(str(item))
print(json.dumps({"reads": reads, "torn": torn}))
"""


def test_four_processes_submitting_25_jobs_each(where, workdir, home, tmp_path):
    go, stop = tmp_path / "go", tmp_path / "stop"
    host, image = ("1", "") if where["host"] else ("0", where["image"])
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, prefix, str(go), host, image, str(workdir)], stderr=subprocess.PIPE, text=True)
        for prefix in "abcd"
    ]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(go), str(stop)], stdout=subprocess.PIPE, text=True)
    go.touch()
    for writer in writers:
        assert writer.wait(timeout=300) == 0, writer.stderr.read()
    stop.touch()
    seen = json.loads(reader.communicate(timeout=60)[0])
    assert seen["torn"] == [] and seen["reads"] > 0
    jobs = list_jobs()
    names = sorted(job.name for job in jobs)
    assert names == sorted(f"{p}-{k}" for p in "abcd" for k in range(25))
    for job in jobs:
        assert job.wait(timeout=300) is Status.COMPLETED
        assert job.logs() == f"{job.name}\n"


# -- security --------------------------------------------------------------------


def test_secrets_never_leave_the_job(where, workdir, home, monkeypatch, capsys):
    secret, aws_secret = "hunter2-very-secret", "AKIA-fake-secret-key-value"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", aws_secret)
    script = "import os\nassert os.environ['API_TOKEN'][::-1] == 'terces-yrev-2retnuh'\nprint('token ok')\n"
    job = submit(script, where, workdir, "secretive", env=[f"API_TOKEN={secret}"])
    assert job.wait(timeout=60) is Status.COMPLETED, job.logs()
    assert job.logs() == "token ok\n"  # the job had it
    shown = []
    for args in (["list"], ["list", "--json"], ["status", "secretive"], ["status", "secretive", "--json"]):
        shown.append(subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True).stdout)
    from jupyter_trainer.view.monitor import JobMonitor
    from jupyter_trainer.view.summary import one_line

    monitor = JobMonitor(Job.load("secretive"))
    monitor.start()
    snapshot = monitor.snapshot(time.time())
    shown += [header_html(snapshot), log_html(snapshot), one_line(job.record, job.backends)]
    for root, _, files in os.walk(home):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                shown.append(handle.read().decode(errors="replace"))
    everything = "\n".join(shown)
    assert "API_TOKEN" in everything  # the key is shown
    assert secret not in everything and aws_secret not in everything


def test_store_permissions(where, workdir, home):
    job = submit("print('x')\n", where, workdir, "private")
    assert job.wait(timeout=60) is Status.COMPLETED
    for root, dirs, files in os.walk(home):
        for name in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o700, name
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700


def test_metacharacters_never_reach_a_shell(where, workdir, home, tmp_path):
    canary = tmp_path / "canary"
    payloads = [f"$(touch {canary})", f"`touch {canary}`", f"; touch {canary}", f"| touch {canary}", f"&& touch {canary}", f"\n touch {canary}"]
    script = "import sys\nprint(len(sys.argv))\n" + "".join(f"# {payload!r}\nx = {payload!r}\n" for payload in payloads)
    job = submit(script, where, workdir, "canary")
    assert job.wait(timeout=60) is Status.COMPLETED and job.logs() == "1\n"
    # names and env values carrying metacharacters are refused or inert
    env_job = submit("import os\nprint(os.environ['X'])\n", where, workdir, "canary-env", env=[f"X=$(touch {canary})"])
    assert env_job.wait(timeout=60) is Status.COMPLETED and env_job.logs() == f"$(touch {canary})\n"
    assert not canary.exists() and not (workdir / "canary").exists()


# -- bad input -------------------------------------------------------------------

BAD_INPUTS = [
    # (where, input, what the one line says, needs a Docker engine)
    ("magic", "%%train_detached --host --name ../up\nprint(1)", "invalid job name", False),
    ("magic", "%%train_detached --host --name 'has space'\nprint(1)", "invalid job name", False),
    ("magic", "%%train_detached --host --name " + "x" * 200 + "\nprint(1)", "invalid job name", False),
    ("magic", "%%train_detached --host --bogus\nprint(1)", "unrecognized arguments", False),
    ("magic", "%%train_detached --host --name\nprint(1)", "expected one argument", False),
    ("magic", "%%train_detached --host --name 'unclosed\nprint(1)", "check the quotes", False),
    ("magic", "%%train_detached --host --env NOVALUE\nprint(1)", "--env expects KEY=VALUE", False),
    ("magic", "%%train_detached --host --env =value\nprint(1)", "--env expects KEY=VALUE", False),
    ("magic", "%%train_detached --image python:3.11 --gpus lots\nprint(1)", "--gpus expects", False),
    ("magic", "%%train_detached --image python:3.11 --gpus -1\nprint(1)", "--gpus expects", False),
    ("magic", "%%train_detached --host --metric 'loss=([0-9]'\nprint(1)", "bad regular expression", False),
    ("magic", "%%train_detached --host --metric 'loss=no group'\nprint(1)", "exactly one capture group", False),
    ("magic", "%%train_detached --host --interpreter ''\nprint(1)", "--interpreter is empty", False),
    ("magic", "%%train_detached --host --image python:3.11\nprint(1)", "--host runs without a container", False),
    ("magic", "%%train_detached --name x\nprint(1)", "no image or container given", False),
    ("magic", "%%train_detached --host --workdir /no/such/dir\nprint(1)", "is not a directory", False),
    ("magic", "%%train_detached --host\n   \n", "the cell is empty", False),
    ("magic", "%%train_detached --image 'bad image'\nprint(1)", "invalid image reference", False),
    ("magic", "%%train_detached --container ../x\nprint(1)", "invalid container name", False),
    ("magic", "%%train_detached --host --name keep\nprint('another cell')", "is running with a different cell", False),
    ("magic", "%train_logs ghost", "no job named 'ghost'", False),
    ("magic", "%train_stop ghost", "no job named 'ghost'", False),
    ("magic", "%train_attach ghost", "no job named 'ghost'", False),
    ("magic", "%train_logs keep -n -3", "-n expects", False),
    ("magic", "%train_logs keep -n many", "invalid int value", False),
    ("magic", "%train_jobs --bogus", "unrecognized arguments", False),
    ("magic", "%train_stop keep --container", "does not run in a container", False),
    ("magic", "%%train_detached --image jupyter-trainer-no-such-image:1\nprint(1)", "could not be pulled", True),
    ("magic", "%%train_detached --container nobody-here\nprint(1)", "no container named 'nobody-here'", True),
    ("engine down", "%%train_detached --image python:3.11-slim\nprint(1)", "no Docker engine reachable", False),
    ("engine down", "%%sagemaker_fit --instance-type local --role arn:aws:iam::123456789012:role/Trainer --image-uri jupyter-trainer-test:bookworm-pip --output-path file:///tmp/jt-model-out\nprint(1)", "no Docker engine reachable at unix:///nonexistent/docker.sock while trying to run SageMaker local mode", False),
    ("cli", "status ghost", "no job named 'ghost'", False),
    ("cli", "logs ghost", "no job named 'ghost'", False),
    ("cli", "stop ghost", "no job named 'ghost'", False),
    ("cli", "status ../etc", "invalid job name", False),
    ("cli", "bogus", "invalid choice", False),
    ("cli", "logs keep -n many", "invalid int value", False),
    ("cli", "logs keep -n -1", "-n expects", False),
    ("cli", "", "required", False),
    ("magic", "%train_rm ghost", "no job named 'ghost'", False),
    ("magic", "%%sagemaker_fit --instance-count many\nprint(1)", "invalid int value", False),
    ("cli", "list --bogus", "unrecognized arguments", False),
    ("cli", "metrics ghost", "no job named 'ghost'", False),
    ("cli", "prune --older-than soon", "--older-than expects an age", False),
    ("cli", "rm ghost", "no job named 'ghost'", False),
    ("cli", "submit /nonexistent/train.py --host", "cannot read the script", False),
    ("magic", "%train_compare keep ghost", "no job named 'ghost'", False),
    ("cli", "compare keep ghost", "no job named 'ghost'", False),
    ("cli", "compare keep --x sideways", "invalid choice", False),
    ("cli", "queue ../up", "invalid --queue '../up'", False),
    ("cli", "queue --max-running 2", "--max-running needs the queue's NAME", False),
    ("cli", "queue nightly --max-running 0", "--max-running must be between 1 and", False),
    ("magic", "%%train_detached --host --gpus 3\nprint(1)", "--gpus 3 asks for more GPUs than this machine offers", False),
    ("magic", "%%train_detached --host --sweep lr\nprint(1)", "--sweep expects KEY=V1,V2", False),
    ("magic", "%%train_detached --host --max-running 2\nprint(1)", "--trials and --max-running go with --sweep", False),
]


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_trainer")
    return ip


def store_snapshot(home):
    """The store's files, but for those a running job's supervisor writes as it goes (its clock)."""
    files = {}
    for root, _, names in os.walk(home):
        for name in names:
            if name not in ("record.lock", "clock"):
                with open(os.path.join(root, name), "rb") as handle:
                    files[os.path.join(root, name)] = handle.read()
    return files


@pytest.mark.parametrize("kind, source, words, needs_docker", BAD_INPUTS, ids=[f"{i:02d}" for i in range(len(BAD_INPUTS))])
def test_bad_input_is_one_line_and_changes_nothing(kind, source, words, needs_docker, shell, home, workdir, monkeypatch, capsys, request):
    if needs_docker:
        request.getfixturevalue("docker_image")
    monkeypatch.chdir(workdir)
    keep = submit("print('kept')\nimport time\ntime.sleep(600)\n", {"host": True, "image": None}, workdir, "keep")
    wait_for(lambda: keep.logs() == "kept\n" and keep.status is Status.RUNNING, what="the running job")
    try:
        before = store_snapshot(home)
        if kind == "cli":
            result = subprocess.run([sys.executable, "-m", "jupyter_trainer", *source.split()], capture_output=True, text=True)
            assert result.returncode == 1
            out = result.stderr
        else:
            if kind == "engine down":
                monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            result = shell.run_cell(source)
            out = "".join(capsys.readouterr())
            assert not result.success
        assert words in out and out.count("\n") == 1 and "Traceback" not in out, out
        assert store_snapshot(home) == before
        assert get_job("keep").status is Status.RUNNING
    finally:
        keep.stop()


def test_bad_input_table_is_broad():
    """Every magic and every command of the CLI has bad input of its own in the table."""
    from jupyter_trainer.surfaces.cli import build_parser
    from jupyter_trainer.surfaces.magics import TrainerMagics

    sources = [source for _, source, _, _ in BAD_INPUTS]
    magics = {*TrainerMagics.magics["line"], *TrainerMagics.magics["cell"]}
    assert sorted(magic for magic in magics if not any(source.lstrip("%").startswith(magic) for source in sources if source.startswith("%"))) == []
    commands = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)).choices
    cli_rows = [source.split()[:1] for kind, source, _, _ in BAD_INPUTS if kind == "cli"]
    assert sorted(command for command in commands if [command] not in cli_rows) == []
