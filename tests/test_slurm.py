"""The --slurm backend against a real one-node Slurm cluster of the tests' own (tests/slurm_cluster.py):
submit, follow (pending with Slurm's reason, running, the outcome), stop, and what Slurm ends itself."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import slurm_cluster
from conftest import ipython_submitting, wait_for
from slurm_cluster import submit

from jupyter_trainer.backends import DEFAULT, build_spec
from jupyter_trainer.backends.slurm import backend as slurm_backend
from jupyter_trainer.backends.slurm import commands
from jupyter_trainer.backends.slurm.queue import QUEUE
from jupyter_trainer.core.record import Status
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.errors import BackendUnavailable, InvalidOption, TrainerError, Unreachable
from jupyter_trainer.jobs.housekeeping import remove_runs
from jupyter_trainer.jobs.job import Job, get_job, refreshed_records
from jupyter_trainer.jobs.submit import submit_detached

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """The one-node cluster without accounting, started once per session."""
    yield from slurm_cluster.for_the_session(tmp_path_factory, accounting=False)


KEEP = set()  # Slurm job ids that outlive the test that submitted them (the time-limit job)


@pytest.fixture
def slurm(cluster, monkeypatch, home):
    yield from slurm_cluster.following(cluster, monkeypatch, KEEP)


@pytest.fixture(scope="module")
def timed_out(cluster, tmp_path_factory):
    """A job past its one-minute --time, submitted as the module's first test starts (Slurm ends
    it a minute or more later; the test that checks it runs last)."""
    from jupyter_trainer.core.store import JobStore

    os.environ["SLURM_CONF"] = str(cluster.conf)
    workdir = tmp_path_factory.mktemp("timeout-work")
    spec = build_spec("import time\nprint('long', flush=True)\ntime.sleep(600)\n", workdir=str(workdir), slurm=True, time="1")
    job = submit_detached(spec, name="too-long", store=JobStore(tmp_path_factory.mktemp("timeout-home"))).job
    KEEP.add(job.record.runtime["job_id"])
    yield job
    KEEP.discard(job.record.runtime["job_id"])


def slurm_id(job):
    return job.record.runtime["job_id"]


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=timeout)


def test_a_cell_runs_as_a_file_of_its_workdir_with_its_secret_environment(slurm, workdir, home, timed_out):
    script = """\
    import os, sys
    print("cwd", os.getcwd(), "file", __file__, "path0", sys.path[0])
    print("secret", os.environ["TOKEN"], "unbuffered", os.environ["PYTHONUNBUFFERED"], "args", sys.argv[1:])
    """
    job = submit(script, workdir, "hello", env=["TOKEN=s3cr3t-value"], args=["--epochs", "2"])
    assert job.wait(timeout=60) is Status.COMPLETED and job.exit_code == 0
    lines = job.logs().splitlines()
    assert lines == [
        f"cwd {workdir} file {workdir}/hello.cell.py path0 {workdir}",
        "secret s3cr3t-value unbuffered 1 args ['--epochs', '2']",
    ]
    assert sorted(os.listdir(workdir)) == []  # nothing left in the working directory
    # the secret is nowhere but in the job: not the record, the run's files, Slurm's view of the job
    run_dir = job.run_dir
    for name in os.listdir(run_dir):
        if name != "output.log":
            assert b"s3cr3t-value" not in (run_dir / name).read_bytes(), name
    shown = slurm.run("scontrol", "show", "job", "-dd", slurm_id(job)).stdout
    assert "s3cr3t" not in shown and shown
    batch = slurm.run("scontrol", "write", "batch_script", slurm_id(job), "-").stdout
    assert "s3cr3t" not in batch and "slurm_start.py" in batch
    status = json.loads(cli("status", "hello", "--json").stdout)
    assert status["backend"] == "slurm" and status["slurm_job_id"] == slurm_id(job) and status["restarts"] == 0
    assert status["host"] == slurm_cluster.NODE
    assert slurm_cluster.NODE in cli("list").stdout


def test_a_failure_keeps_its_exit_code_and_exception(slurm, workdir):
    job = submit("raise ValueError('bad batch')\n", workdir, "crash")
    assert job.wait(timeout=60) is Status.FAILED and job.exit_code == 1
    assert "ValueError: bad batch" in job.reason
    three = submit("import sys\nsys.exit(3)\n", workdir, "three")
    assert three.wait(timeout=60) is Status.FAILED and three.exit_code == 3


def test_a_linked_script_through_a_wrapper_runs_as_the_wrapper_runs_it(slurm, workdir):
    """A script run in place that is a link keeps the link's name and imports beside its target, as
    `python3 train.py` does; a shell that wraps the interpreter adds words of its own before the
    line's, and the script gets them all."""
    (workdir / "real").mkdir()
    (workdir / "real" / "helper.py").write_text("VALUE = 'beside the target'\n")
    (workdir / "real" / "impl.py").write_text("import sys, helper\nprint('file', __file__, 'path0', sys.path[0], 'args', sys.argv[1:], helper.VALUE)\n")
    (workdir / "train.py").symlink_to("real/impl.py")
    wrapper = "sh -c 'exec python3 \"$0\" --steps 1 \"$@\"'"
    done = cli("submit", "train.py", "--slurm", "--workdir", str(workdir), "--name", "wrapped", "--interpreter", wrapper, "--", "--lr", "0.1")
    assert done.returncode == 0, done.stderr
    job = get_job("wrapped")
    assert job.wait(timeout=60) is Status.COMPLETED, job.logs()
    assert job.logs() == f"file {workdir}/train.py path0 {workdir}/real args ['--steps', '1', '--lr', '0.1'] beside the target\n"


def test_an_sbatch_arg_missing_its_value_never_takes_the_batch_file(slurm, workdir):
    job = submit("print('ran')\n", workdir, "dangling", sbatch_args=["--comment"])
    assert job.wait(timeout=60) is Status.COMPLETED and job.logs() == "ran\n"


def test_a_held_job_is_pending_with_slurms_reason_then_runs(slurm, workdir):
    job = submit("import time\ntime.sleep(3)\nprint('ran')\n", workdir, "held", sbatch_args=["--hold"], partition="second")
    wait_for(lambda: job.refresh().record.reason == "JobHeldUser", timeout=30, what="Slurm's pending reason")
    assert job.record.status is Status.PENDING and job.record.started_at is None  # waiting is not running
    where = DEFAULT.get("slurm").describe_where(job.record)
    assert f"Slurm job {slurm_id(job)}" in where and "partition second" in where and "pending: JobHeldUser" in where
    from jupyter_trainer.view.job_widget import JobWidget

    view = JobWidget(job)  # the view's header says it, as a notebook shows it
    view.poll(time.time())
    assert f"Slurm job {slurm_id(job)}" in view.header.value and "pending: JobHeldUser" in view.header.value
    assert json.loads(cli("status", "held", "--json").stdout)["reason"] == "JobHeldUser"
    slurm.run("scontrol", "release", slurm_id(job), check=True)
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=30, what="running")
    assert job.record.reason == "" and job.record.runtime["node_list"] == slurm_cluster.NODE
    assert job.wait(timeout=60) is Status.COMPLETED and job.logs() == "ran\n"
    assert job.record.created_at <= job.record.started_at <= job.record.ended_at


def test_a_job_stopped_while_it_waited_never_started(slurm, workdir):
    job = submit("print('never')\n", workdir, "never-started", sbatch_args=["--hold"])
    wait_for(lambda: job.refresh().record.reason == "JobHeldUser", timeout=30, what="Slurm's pending reason")
    job.stop()
    assert job.record.status is Status.STOPPED and job.record.started_at is None and job.record.duration is None
    shown = json.loads(cli("status", "never-started", "--json").stdout)
    assert shown["status"] == "stopped" and shown["started_at"] is None


def test_stop_cancels_a_pending_job_and_terms_a_running_one(slurm, workdir):
    pending = submit("print('never')\n", workdir, "waiting", sbatch_args=["--hold"])
    started = time.monotonic()
    pending.stop()
    assert pending.record.status is Status.STOPPED and pending.record.reason == "stopped by the user"
    script = """\
    import signal, sys, time
    def term(*_):
        print("checkpoint saved", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, term)
    print("training", flush=True)
    time.sleep(600)
    """
    running = submit(script, workdir, "running")
    wait_for(lambda: "training" in running.logs(), timeout=60, what="the job to start")
    running.stop()
    assert running.record.status is Status.STOPPED and running.record.reason == "stopped by the user"
    assert "checkpoint saved" in running.logs()
    assert time.monotonic() - started < 60


def test_a_cancel_from_the_shell_is_stopped_and_says_so(slurm, workdir):
    job = submit("import time\nprint('up', flush=True)\ntime.sleep(600)\n", workdir, "cancelled")
    wait_for(lambda: "up" in job.logs(), timeout=60, what="the job to start")
    slurm.run("scancel", slurm_id(job), check=True)
    assert job.wait(timeout=60) is Status.STOPPED
    assert "cancelled" in job.reason and "outside jupyter_trainer" in job.reason


def test_out_of_memory_is_a_failure_that_says_so(slurm, workdir):
    script = "import time\nblock = bytearray(600 << 20)\nfor i in range(0, len(block), 4096): block[i] = 1\ntime.sleep(30)\n"
    job = submit(script, workdir, "hungry", sbatch_args=["--mem=150M"])
    assert job.wait(timeout=60) is Status.FAILED
    assert "out of memory" in job.reason and "--mem" in job.reason


def test_one_squeue_answers_for_every_job_of_a_poll(slurm, workdir, monkeypatch):
    jobs = [submit(f"print({i})\n", workdir, f"many-{i}", sbatch_args=["--hold"]) for i in range(6)]
    wait_for(lambda: all(job.refresh().record.reason == "JobHeldUser" for job in jobs), timeout=30, what="all held")
    # however long the poll takes: its answers never go stale within it (here: at once)
    monkeypatch.setattr(QUEUE, "ttl", 0.0)
    before = dict(commands.CALLS)
    records = refreshed_records()
    assert len(records) == 6 and all(record.status is Status.PENDING for record in records)
    assert commands.CALLS["squeue"] - before.get("squeue", 0) == 1
    assert commands.CALLS["sacct"] == before.get("sacct", 0) and commands.CALLS["scontrol"] == before.get("scontrol", 0)


def test_without_accounting_a_job_slurm_forgot_ends_from_its_supervisors_files(slurm, workdir):
    job = submit("print('quick')\n", workdir, "forgotten")
    # not looked at until the controller has forgotten the job (MinJobAge) and accounting cannot be asked
    wait_for(lambda: slurm.run("squeue", "--me", "--states=all", "-h", "-j", slurm_id(job)).stdout.strip() == "", timeout=90, interval=1, what="Slurm to forget the job")
    time.sleep(QUEUE.ttl + 0.1)
    assert job.refresh().record.status is Status.COMPLETED and job.logs() == "quick\n"
    assert QUEUE.accounting is False  # sacct said so, once


def test_the_job_outlives_the_kernel_that_submitted_it(slurm, workdir):
    script = "import time\nfor i in range(6):\n    print('step', i, flush=True)\n    time.sleep(0.5)\n"
    kernel = ipython_submitting(f"--slurm --name orphan --workdir {workdir} --no-widget", script)
    kernel.kill()
    kernel.wait()
    job = Job.load("orphan")
    assert job.wait(timeout=60) is Status.COMPLETED
    assert job.logs().splitlines() == [f"step {i}" for i in range(6)]


def test_user_errors_are_one_line_and_leave_the_store_as_it_was(slurm, workdir, home, monkeypatch):
    for options, words in (
        ({"partition": "no such"}, "not a Slurm name"),
        ({"time": "soon"}, "not a Slurm time limit"),
        ({"nodes": 0}, "out of range"),
        ({"sbatch_args": ["--output=/tmp/x"]}, "not allowed"),
        ({"sbatch_args": ["mem=1G"]}, "not an sbatch option"),
        ({"gpus": "all"}, "GPUs per node"),
        ({"image": "python:3"}, "--image"),
    ):
        with pytest.raises(InvalidOption, match=words):
            submit("print(1)\n", workdir, "bad", **options)
    with pytest.raises(InvalidOption, match="Slurm refused job 'bad'.*partition"):
        submit("print(1)\n", workdir, "bad", partition="nosuchpartition")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BackendUnavailable, match="sbatch.*not on PATH"):
        submit("print(1)\n", workdir, "bad")
    assert not (home / "jobs" / "bad").exists() or not os.listdir(home / "jobs" / "bad")
    message = str(TrainerError("x"))
    assert "\n" not in message


def test_the_time_limit_ends_a_job_failed_naming_the_limit(slurm, timed_out):
    """After the module's first tests: the job was submitted as its first test started."""
    job = timed_out
    assert job.wait(timeout=150) is Status.FAILED
    assert "time limit reached (1:00)" in job.reason
    assert "long" in job.logs()


# after the time limit's test, which must come while Slurm still holds its job (MinJobAge)
LONG = "import time\nprint('up', flush=True)\ntime.sleep(300)\n"

# squeue and sbatch as a broken or odd site may have them: the real one's answer, changed
FAKE_SQUEUE = """#!/bin/sh
case "$FAKE_SQUEUE" in
  empty) exit 0 ;;
  garbage) echo "lorem ipsum"; echo "|||||||||||"; exit 0 ;;
  partial) "{real}" "$@" | cut -c1-20; exit 0 ;;
  nonutf8) "{real}" "$@" | sed 's/RUNNING/RUNN\\xffING/'; exit 0 ;;
  completed) "{real}" "$@" | sed 's/|RUNNING|/|COMPLETED|/'; exit 0 ;;
  newstate) "{real}" "$@" | sed 's/|RUNNING|/|HIBERNATING|/'; exit 0 ;;
  munge) echo "squeue: error: slurm_load_jobs error: Protocol authentication error" >&2; exit 1 ;;
  crash) kill -SEGV $$ ;;
  *) exec "{real}" "$@" ;;
esac
"""
FAKE_SBATCH = """#!/bin/sh
case "$FAKE_SBATCH" in
  errafter) "{real}" "$@"; echo "sbatch: error: site plugin hiccup" >&2; exit 1 ;;
  slowafter) out=$("{real}" "$@"); sleep 30; echo "$out" ;;
  hangafter) "{real}" "$@"; exec sleep 120 ;;
  otherid) echo "$FAKE_OTHER_ID"; echo "sbatch: error: site plugin hiccup" >&2; exit 1 ;;
  *) exec "{real}" "$@" ;;
esac
"""


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """FAKE_SQUEUE / FAKE_SBATCH choose what the commands found first on PATH do."""
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    for name, text in (("squeue", FAKE_SQUEUE), ("sbatch", FAKE_SBATCH)):
        (fakebin / name).write_text(text.format(real=shutil.which(name)))
        (fakebin / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakebin}:{os.environ['PATH']}")

    def answering(variable, mode):
        monkeypatch.setenv(variable, mode)
        QUEUE.forget()

    return answering


def active_ids(slurm, name):
    return slurm.run("squeue", "--me", "-h", "-t", "PD,R", "--name", name, "-o", "%i").stdout.split()


def test_a_job_squeue_leaves_out_or_cannot_answer_for_is_never_lost(slurm, workdir, fake_slurm, monkeypatch):
    job = submit(LONG, workdir, "steady")
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=60, what="running")
    # a user's own squeue settings (a .bashrc's) neither hide it nor change how squeue prints
    for variable, value in (("SQUEUE_PARTITION", "second"), ("SQUEUE_NAMES", "other"), ("SQUEUE_STATES", "PD"), ("SLURM_TIME_FORMAT", "relative")):
        fake_slurm(variable, value)
        assert job.refresh().record.status is Status.RUNNING, (variable, job.record.reason)
        assert json.loads(cli("status", "steady", "--json").stdout)["status"] == "running"
        monkeypatch.delenv(variable)
    # an answer without it, or one that cannot be read: asked again by id, or kept as it was
    for mode, words in (("empty", ""), ("completed", ""), ("garbage", "cannot be read"), ("partial", "cannot be read"), ("nonutf8", "cannot be read"),
                        ("newstate", ""), ("munge", "Protocol authentication error"), ("crash", "signal 11")):  # fmt: skip
        fake_slurm("FAKE_SQUEUE", mode)
        record = job.refresh().record
        assert record.status is Status.RUNNING and words in record.reason and "\n" not in record.reason, (mode, record.reason)
        shown = cli("status", "steady")
        assert shown.returncode == 0 and "Traceback" not in shown.stderr and "running" in shown.stdout, (mode, shown.stderr)
        assert get_job("steady").status is Status.RUNNING
    fake_slurm("FAKE_SQUEUE", "munge")
    stopped = cli("stop", "steady")
    assert stopped.returncode == 1 and "Traceback" not in stopped.stderr and len(stopped.stderr.splitlines()) == 1, stopped.stderr
    assert active_ids(slurm, "steady") == [slurm_id(job)]  # nothing was cancelled on an answer it could not read
    assert Job.load("steady").record.stop_requested is False  # a cancel by someone else later is not this stop
    fake_slurm("FAKE_SQUEUE", "")
    job.stop()
    assert job.record.status is Status.STOPPED


def test_another_jobs_name_cannot_forge_the_answer_for_a_job(slurm, workdir):
    job = submit(LONG, workdir, "target")
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=60, what="running")
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    # a line of squeue's in a name, sorted after the real one (partition second)
    forged = f"x\n{slurm_id(job)}|COMPLETED|None|{slurm_cluster.NODE}|debug|{now}|0|UNLIMITED|target"
    slurm.run("sbatch", "--parsable", "-o", "/dev/null", "--hold", "-p", "second", f"--job-name={forged}", "--wrap", "sleep 100", check=True)
    QUEUE.forget()
    assert job.refresh().record.status is Status.RUNNING, job.record.reason
    assert job.record.runtime["job_id"] == slurm_id(job)


def test_a_rewritten_record_never_makes_another_jobs_cancel(slurm, workdir):
    # a job of the same name the user has elsewhere (another store, an earlier run)
    victim = slurm.run("sbatch", "--parsable", "-o", "/dev/null", "--hold", "--job-name=forger", "--wrap", "sleep 100", check=True).stdout.strip()
    job = submit(LONG, workdir, "forger")
    wait_for(lambda: "up" in job.logs(), timeout=60, what="the job to start")
    real = slurm_id(job)
    record_file = job.run_dir / "record.json"

    def forge():  # what the job can do: it writes into its run directory
        data = json.loads(record_file.read_text())
        data["runtime"]["job_id"] = victim
        record_file.write_text(json.dumps(data))
        QUEUE.forget()

    forge()
    job = Job.load("forger")
    assert job.refresh().record.status is Status.RUNNING and slurm_id(job) == real  # found by its name and log
    forge()
    Job.load("forger").stop()
    assert active_ids(slurm, "forger") == [victim]  # the victim still waits, the job itself was cancelled
    assert Job.load("forger").refresh().record.status is Status.STOPPED


def listed(slurm, job_id):
    """Whether squeue still lists the job, whatever its state (an ended one: for MinJobAge and up to a minute more)."""
    return job_id in slurm.run("squeue", "--me", "--states=all", "-h", "-o", "%i").stdout.split()


def a_run_removed(name, workdir):
    """Run 1 of job `name`, stopped while it waited and removed: its cancelled Slurm job, of the
    name and log the next run 1 gets, is still listed. Its Slurm job id."""
    earlier = submit("print('never')\n", workdir, name, sbatch_args=["--hold"])
    earlier.stop()
    assert earlier.record.status is Status.STOPPED
    remove_runs(name)
    return slurm_id(earlier)


def test_a_run_submitted_again_that_forges_its_job_id_is_neither_lost_nor_hidden(slurm, workdir):
    earlier = a_run_removed("again", workdir)
    job = submit(LONG, workdir, "again")  # run 1 again: the same name and log as the earlier's
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=60, what="running")
    real = slurm_id(job)
    record_file = job.run_dir / "record.json"

    def forge(job_id):  # what the job can do: it writes into its run directory
        data = json.loads(record_file.read_text())
        data["runtime"]["job_id"] = job_id
        record_file.write_text(json.dumps(data))
        QUEUE.forget()

    for pointed_at in ("999999", earlier):  # an id no job has, and the earlier run's
        forge(pointed_at)
        record = Job.load("again").refresh().record
        assert record.status is Status.RUNNING and record.runtime["job_id"] == real, (pointed_at, record.reason)
    assert listed(slurm, earlier)  # it was listed all along: both entries had the run's name and log
    forge("999999")
    Job.load("again").stop()
    assert active_ids(slurm, "again") == []
    assert Job.load("again").refresh().record.status is Status.STOPPED


def test_sbatch_settings_of_the_environment_cannot_make_a_job_it_cannot_follow(slurm, workdir, monkeypatch):
    monkeypatch.setenv("SBATCH_WAIT", "1")  # sbatch would block until the job ends
    monkeypatch.setenv("SBATCH_ARRAY_INX", "0-2")  # three copies into one record
    started = time.monotonic()
    job = submit("import time\nprint('once', flush=True)\ntime.sleep(20)\n", workdir, "waity")
    assert time.monotonic() - started < 10
    assert job.wait(timeout=60) is Status.COMPLETED and job.logs() == "once\n"


def test_a_job_sbatch_accepted_before_it_failed_is_cancelled_and_said(slurm, workdir, home, fake_slurm):
    fake_slurm("FAKE_SBATCH", "errafter")
    with pytest.raises(InvalidOption, match=r"site plugin hiccup \(Slurm had accepted it as job \d+, which was cancelled\)"):
        submit(LONG, workdir, "hiccup")
    assert active_ids(slurm, "hiccup") == [] and not (home / "jobs" / "hiccup").exists()
    # Ctrl-C while sbatch has submitted but not yet answered: found by its name and log
    fake_slurm("FAKE_SBATCH", "slowafter")

    def interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 4)
    try:
        with pytest.raises(KeyboardInterrupt):
            submit(LONG, workdir, "interrupted")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert active_ids(slurm, "interrupted") == [] and not (home / "jobs" / "interrupted").exists()


def test_a_failed_sbatch_printing_another_jobs_id_never_cancels_that_job(slurm, workdir, home, fake_slurm, monkeypatch):
    victim = submit("print('never')\n", workdir, "bystander", sbatch_args=["--hold"])
    monkeypatch.setenv("FAKE_OTHER_ID", slurm_id(victim))
    fake_slurm("FAKE_SBATCH", "otherid")
    with pytest.raises(InvalidOption, match="no job of this run is in the queue"):
        submit(LONG, workdir, "liar")
    assert active_ids(slurm, "bystander") == [slurm_id(victim)]
    fake_slurm("FAKE_SBATCH", "")
    victim.stop()


def test_a_job_whose_sbatch_timed_out_is_cancelled_though_an_earlier_runs_job_has_its_name_and_log(slurm, workdir, home, fake_slurm, monkeypatch):
    earlier = a_run_removed("timed-out-again", workdir)

    def sbatch_gets_five_seconds(command, *args, **options):
        return commands.run(command, *args, **{**options, **({"timeout": 5.0} if command == "sbatch" else {})})

    monkeypatch.setattr(slurm_backend, "run", sbatch_gets_five_seconds)
    fake_slurm("FAKE_SBATCH", "hangafter")  # it submits, prints the id, then answers no more
    with pytest.raises(Unreachable, match=r"no answer in 5 s.*\(Slurm had accepted it as job \d+, which was cancelled\)"):
        submit(LONG, workdir, "timed-out-again")
    assert active_ids(slurm, "timed-out-again") == [] and not (home / "jobs" / "timed-out-again").exists()
    assert listed(slurm, earlier)


SUBMIT_INTERRUPTED = """
import os, signal, sys
from jupyter_trainer.backends.slurm import backend
from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.jobs.submit import submit_detached

# Ctrl-C as a terminal's Python gets it: a run started in the background of a non-interactive
# shell (a CI script's `pytest &`) inherits SIGINT ignored, and would never see the one sent here
signal.signal(signal.SIGINT, signal.default_int_handler)

def ctrl_c_then(function):  # one Ctrl-C, landing just as this first runs
    pressed = []
    def interrupted(*args, **kwargs):
        if not pressed:
            pressed.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return function(*args, **kwargs)
    return interrupted

if sys.argv[3] == "reading sbatch's answer":
    backend.job_id_in = ctrl_c_then(backend.job_id_in)
else:  # saving the run with its job
    JobStore.update = ctrl_c_then(JobStore.update)
try:
    submit_detached(build_spec("import time\\ntime.sleep(600)\\n", workdir=sys.argv[1], slurm=True), name=sys.argv[2])
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.parametrize("moment", ["reading sbatch's answer", "saving the run"])
def test_a_ctrl_c_just_after_sbatch_answered_never_leaves_a_job_unrecorded(moment, slurm, workdir, home):
    """Either the job is cancelled and the run gone, or the run knows its job: never a job running
    that no run knows (nothing could follow or stop it)."""
    name = "interrupted-" + moment.split()[0]
    said = subprocess.run([sys.executable, "-c", SUBMIT_INTERRUPTED, str(workdir), name, moment], env=os.environ, capture_output=True, text=True, timeout=120)
    assert "interrupted" in said.stdout, said.stdout + said.stderr
    running = active_ids(slurm, name)
    records = [record for record in JobStore(home).records() if getattr(record, "name", None) == name]
    known = {record.runtime.get("job_id") for record in records if record.runtime}
    assert set(running) <= known, f"Slurm runs {running}, the store knows {known}"
    if known:
        get_job(name).stop()


def test_the_users_scancel_settings_never_keep_a_stop_from_cancelling(slurm, workdir, monkeypatch):
    job = submit(LONG, workdir, "filtered-stop")
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=60, what="running")
    monkeypatch.setenv("SCANCEL_STATE", "PENDING")  # scancel would cancel nothing that runs, and exit 0
    monkeypatch.setenv("SCANCEL_NAME", "other")
    job.stop()
    assert job.record.status is Status.STOPPED and active_ids(slurm, "filtered-stop") == []


def test_the_secrets_are_removed_once_the_job_has_ended_however_it_ended(slurm, workdir):
    job = submit("print(1)\n", workdir, "secret-held", env=["API_KEY=hunter2"], notify="http://127.0.0.1:9/hook", sbatch_args=["--hold"])
    assert (job.run_dir / "slurm_env").exists() and (job.run_dir / "slurm_notify").exists()
    job.stop()  # never started: slurm_start.py never read them
    assert job.record.status is Status.STOPPED
    assert not (job.run_dir / "slurm_env").exists() and not (job.run_dir / "slurm_notify").exists()
    kept = submit("print(2)\n", workdir, "secret-requeue", env=["API_KEY=hunter2"], requeue=True)
    assert kept.wait(timeout=60) is Status.COMPLETED
    assert not (kept.run_dir / "slurm_env").exists()


# -- a sweep: one job array ---------------------------------------------------------------------

SWEPT = """\
import sys, time
print("values", sys.argv[1:], flush=True)
time.sleep(4)
print("loss", float(sys.argv[-1]) / 10, flush=True)
"""


def test_a_sweep_is_one_job_array_its_tasks_its_runs_at_most_max_running_at_once(slurm, workdir, home):
    from jupyter_trainer.jobs.sweeps import submit_sweep

    calls = dict(commands.CALLS)
    spec = build_spec(SWEPT, workdir=str(workdir), slurm=True)
    sweep = submit_sweep(spec, ["lr=3,1,2"], name="arr", max_running=2)
    assert commands.CALLS["sbatch"] - calls.get("sbatch", 0) == 1  # the whole sweep, one submission
    jobs = [each.job for each in sweep.submissions]
    ids = [slurm_id(job) for job in jobs]
    array = ids[0].split("_")[0]
    assert ids == [f"{array}_0", f"{array}_1", f"{array}_2"]
    # Slurm itself holds the array's bound: its task limit
    shown = slurm.run("scontrol", "show", "job", "--oneliner", ids[2], check=True).stdout
    assert "ArrayTaskThrottle=2" in shown and "JobName=arr " in shown
    for job in jobs:
        assert job.wait(timeout=120) is Status.COMPLETED, (job.name, job.record.reason, job.logs())
    for job, lr in zip(jobs, ("3", "1", "2")):
        assert f"values ['--lr', '{lr}']" in job.logs() and job.record.options["params"] == [["lr", lr]]
        assert job.record.exit_code == 0 and job.record.started_at is not None
    spans = sorted((job.record.started_at, job.record.ended_at) for job in jobs)
    assert spans[2][0] >= min(spans[0][1], spans[1][1]) - 1  # the third began as one of the first two ended
    status = json.loads(cli("status", "arr", "--json").stdout)
    assert [(run["name"], run["status"], run["best"]) for run in status["sweep"]] == [
        ("arr-1", "completed", 0.3), ("arr-2", "completed", 0.1), ("arr-3", "completed", 0.2),
    ]  # fmt: skip
    assert json.loads(cli("status", "arr-2", "--json").stdout)["slurm_job_id"] == ids[1]

    # the cell run again attaches: no second array
    again = submit_sweep(spec, ["lr=3,1,2"], name="arr", max_running=2)
    assert all(each.attached for each in again.submissions) and commands.CALLS["sbatch"] - calls.get("sbatch", 0) == 1


def test_a_sweep_stopped_midway_is_one_scancel_of_its_array_and_its_waiting_runs_never_start(slurm, workdir, home, monkeypatch):
    from jupyter_trainer.jobs.sweeps import load_sweep, stop_sweep, submit_sweep

    script = "import time\nprint('training', flush=True)\ntime.sleep(600)\n"
    sweep = submit_sweep(build_spec(script, workdir=str(workdir), slurm=True), ["seed=1,2,3"], name="halt", max_running=1)
    first, *waiting = (each.job for each in sweep.submissions)
    wait_for(lambda: "training" in first.logs(), timeout=60, what="the first run to start")
    assert all(job.refresh().record.status is Status.PENDING for job in waiting)
    cancels = []
    real_run = slurm_backend.run
    monkeypatch.setattr(slurm_backend, "run", lambda *args, **keys: (cancels.append(args) if args[0] == "scancel" else None, real_run(*args, **keys))[1])
    stop_sweep(JobStore(), load_sweep(JobStore(), "halt"))
    array = slurm_id(first).split("_")[0]
    assert cancels[0] == ("scancel", array)  # the array, at once; a task's own stop follows only while it still ends
    for job in (first, *waiting):
        assert job.wait(timeout=60) is Status.STOPPED, (job.name, job.record.reason)
    assert all(job.record.started_at is None and "training" not in job.logs() for job in waiting)


# A kernel killed mid-cell, between the array's sbatch and its release: `moment` says when.
DYING_SUBMITTER = """
import os, signal, sys
from jupyter_trainer.backends import build_spec
from jupyter_trainer.backends.slurm import array
from jupyter_trainer.jobs import sweeps

moment, script, workdir = sys.argv[1:]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
if moment == "sbatch answered":  # before the array's id was noted
    noted = array.SlurmArray._note_held
    array.SlurmArray._note_held = lambda self: noted(self) if self.job_id is None else die()
else:  # two runs made, the third not yet
    made = []
    real = sweeps.submit_detached
    sweeps.submit_detached = lambda *a, **k: die() if len(made) == 2 else made.append(real(*a, **k)) or made[-1]
sweeps.submit_sweep(build_spec(script, workdir=workdir, slurm=True), ["lr=3,1,2"], name="orphan", max_running=2)
"""


@pytest.mark.parametrize("moment", ["sbatch answered", "two runs made"])
def test_a_sweep_whose_kernel_died_before_its_array_was_released_runs_when_the_cell_runs_again(slurm, workdir, home, moment):
    from jupyter_trainer.jobs.sweeps import submit_sweep

    died = subprocess.run([sys.executable, "-c", DYING_SUBMITTER, moment, SWEPT, str(workdir)], capture_output=True, text=True, timeout=120)
    assert died.returncode == -signal.SIGKILL, died.stderr
    held = slurm.run("squeue", "--me", "--noheader", "-r", "-O", "JobArrayID:30,Reason:30", check=True).stdout.split("\n")
    held = [line.split() for line in held if line.strip().endswith("JobHeldUser")]
    assert len(held) == 3 and len({task.split("_")[0] for task, _reason in held}) == 1, held  # left held: nothing would ever run
    made = 0 if moment == "sbatch answered" else 2
    assert len([name for name in ("orphan-1", "orphan-2", "orphan-3") if JobStore().runs(name)]) == made

    again = submit_sweep(build_spec(SWEPT, workdir=str(workdir), slurm=True), ["lr=3,1,2"], name="orphan", max_running=2)
    assert again.resumed == [f"job array {held[0][0].split('_')[0]}, left held by an interrupted submission: {made} run(s) released, {3 - made} never made cancelled"]
    assert "left held by an interrupted submission" in again.message
    assert [each.attached for each in again.submissions] == [True] * made + [False] * (3 - made)
    for each in again.submissions:
        assert each.job.wait(timeout=120) is Status.COMPLETED, (each.job.name, each.job.record.reason, each.job.logs())
    for job, lr in zip((each.job for each in again.submissions), ("3", "1", "2")):
        assert f"values ['--lr', '{lr}']" in job.logs()
    # nothing left held, and the cell run once more finds nothing to resume
    assert "JobHeldUser" not in slurm.run("squeue", "--me", "--noheader", "-r", "-O", "JobArrayID:30,Reason:30", check=True).stdout
    assert submit_sweep(build_spec(SWEPT, workdir=str(workdir), slurm=True), ["lr=3,1,2"], name="orphan", max_running=2).resumed == []


def held_tasks(slurm) -> list[str]:
    queue = slurm.run("squeue", "--me", "--noheader", "-r", "-O", "JobArrayID:30,Reason:30", check=True).stdout.split("\n")
    return [line.split()[0] for line in queue if line.strip().endswith("JobHeldUser")]


def test_a_sweep_interrupted_while_its_tree_is_read_leaves_no_array_held(slurm, workdir, home, monkeypatch):
    """The sweep's tree is read (git, seconds on a slow repository) after its array is submitted
    held: an interrupt there cancels the array as one in the making of a run does. Its note names
    this kernel, alive: the cell run again would never resume it, and its tasks stay held."""
    from jupyter_trainer.jobs import sweeps

    def interrupted(directory):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(sweeps, "git_state", interrupted)
        sweeps.submit_sweep(build_spec(SWEPT, workdir=str(workdir), slurm=True), ["lr=3,1"], name="interrupted")
    assert held_tasks(slurm) == []
    again = sweeps.submit_sweep(build_spec(SWEPT, workdir=str(workdir), slurm=True), ["lr=3,1"], name="interrupted")
    assert again.resumed == [] and [each.attached for each in again.submissions] == [False, False]
    for each in again.submissions:
        assert each.job.wait(timeout=120) is Status.COMPLETED, (each.job.name, each.job.record.reason, each.job.logs())
    assert held_tasks(slurm) == []


@pytest.mark.parametrize("by_hand", ["release", "scancel"])
def test_a_held_array_released_or_cancelled_by_hand_is_no_error_when_the_cell_runs_again(slurm, workdir, home, by_hand):
    """The kernel died with the array held; the user, seeing it held in squeue, released it (the
    way the sweep's own messages say) or cancelled it by hand, then ran the cell again: the note
    names an array Slurm still knows but can no longer release. The cell goes on."""
    from jupyter_trainer.jobs.sweeps import submit_sweep

    died = subprocess.run([sys.executable, "-c", DYING_SUBMITTER, "two runs made", SWEPT, str(workdir)], capture_output=True, text=True, timeout=120)
    assert died.returncode == -signal.SIGKILL, died.stderr
    array_id = held_tasks(slurm)[0].split("_")[0]
    if by_hand == "release":
        slurm.run("scontrol", "release", array_id, check=True)
        wait_for(lambda: "RUNNING" in slurm.run("squeue", "--me", "--noheader", "-r", "-O", "State:20", check=True).stdout, timeout=60, what="a task to run")
    else:
        slurm.run("scancel", array_id, check=True)
    again = submit_sweep(build_spec(SWEPT, workdir=str(workdir), slurm=True), ["lr=3,1,2"], name="orphan", max_running=2)
    assert [each.attached for each in again.submissions] == [True, True, False]
    assert again.submissions[2].job.wait(timeout=120) is Status.COMPLETED
    assert held_tasks(slurm) == []


def test_a_held_note_naming_another_array_cancels_and_releases_none_of_it(slurm, workdir, home):
    """A note left long ago (Slurm's ids start again from 1 when its state is reset) or written by
    a job names an array the user holds of their own: the sweep's next submission neither cancels
    its tasks nor releases it. Only the array the queue shows as the note's (its sweep's name, its
    output, its token) is the note's."""
    from jupyter_trainer.backends.slurm.array import HELD_FILE
    from jupyter_trainer.core.processes import ProcessIdentity
    from jupyter_trainer.jobs.sweeps import submit_sweep

    mine = slurm.run("sbatch", "--parsable", "--hold", "--array=0-1", f"--output={workdir}/mine-%a.log", "--wrap", "true", check=True).stdout.strip()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    directory = JobStore().sweep_files("orphan") / "array-0123456789ab"
    directory.mkdir(parents=True)
    note = {
        "submitter": {**ProcessIdentity.current().to_dict(), "pid": int(gone.stdout)}, "host": socket.gethostname(), "job_id": mine,
        "indices": [0, 1], "token": "ab" * 16, "submitted_at": time.time() - 60, "name": "orphan",
    }  # fmt: skip
    (directory / HELD_FILE).write_text(json.dumps(note))
    again = submit_sweep(build_spec(SWEPT, workdir=str(workdir), slurm=True), ["lr=3"], name="orphan")
    assert again.resumed == [] and again.submissions[0].job.wait(timeout=120) is Status.COMPLETED
    assert sorted(held_tasks(slurm)) == [f"{mine}_0", f"{mine}_1"]
