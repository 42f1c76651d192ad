"""What a hostile job and an unlucky user do to a Slurm job's token, linked scripts, interpreter
wrappers, direction controls, runs made half-way, sparse logs and metrics --json: each test here
shows one way the product breaks its promises."""

import json
import os
import subprocess
import sys

import pytest
import slurm_cluster
from conftest import wait_for
from small_store import end_processes_under, processes_under
from small_store import small_store as mounted_small_store

from jupyter_trainer.backends.slurm.queue import QUEUE
from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.housekeeping import remove_runs
from jupyter_trainer.jobs.job import Job

LONG = "import time\nprint('up', flush=True)\ntime.sleep(300)\n"


def cli(*args, timeout=60, **options):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=timeout, **options)


# -- Slurm: the token is only as good as the record that names it -------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from slurm_cluster.for_the_session(tmp_path_factory, accounting=False)


@pytest.fixture
def slurm(cluster, monkeypatch, home):
    yield from slurm_cluster.following(cluster, monkeypatch, set())


def _earlier_run_removed(name, workdir):
    earlier = slurm_cluster.submit("print('never')\n", workdir, name, sbatch_args=["--hold"])
    earlier.stop()
    assert earlier.record.status is Status.STOPPED
    remove_runs(name)
    return earlier.record.runtime["job_id"]


def _rewrite_runtime(job, **changes):
    """What the job can do: it writes into its run directory, its record included."""
    record_file = job.run_dir / "record.json"
    data = json.loads(record_file.read_text())
    for key, value in changes.items():
        if value is None:
            data["runtime"].pop(key, None)
        else:
            data["runtime"][key] = value
    record_file.write_text(json.dumps(data))
    QUEUE.forget()


@pytest.mark.slurm
@pytest.mark.parametrize("pointed_at_earlier", [False, True], ids=["token", "token-and-id"])
def test_a_job_that_rewrites_its_token_is_neither_lost_nor_hidden(slurm, workdir, pointed_at_earlier):
    """The token that tells a run's Slurm job from the earlier run's is looked for in squeue's
    Command, which nobody can change, but which token to look for is read from the record, which
    the job can: any 32 hex digits there and the running job is `lost` (and a stop no longer
    cancels it)."""
    earlier = _earlier_run_removed("retoken", workdir)
    job = slurm_cluster.submit(LONG, workdir, "retoken")  # run 1 again: the same name and log
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=60, what="running")
    real = job.record.runtime["job_id"]
    bystander = slurm_cluster.submit(LONG, workdir, "retoken-bystander")
    _rewrite_runtime(job, token="0" * 32, **({"job_id": earlier} if pointed_at_earlier else {}))
    try:
        record = Job.load("retoken").refresh().record
        if not pointed_at_earlier:
            assert record.status is Status.RUNNING, (record.status, record.reason)
            return
        # Both forged to the earlier run's job, still listed as cancelled: nothing the submitting
        # side holds tells the two apart, and the run may read as that job ended (docs/slurm.md).
        # What holds: no other job is taken for the run's, and what is said is one line.
        said = cli("stop", "retoken")
        lines = (said.stdout + said.stderr).strip().splitlines()
        assert len(lines) <= 1 and "Traceback" not in said.stderr, said.stdout + said.stderr
        running = slurm.run("squeue", "--me", "-h", "-t", "PD,R", "-o", "%i").stdout.split()
        assert bystander.record.runtime["job_id"] in running
    finally:
        slurm.run("scancel", real, bystander.record.runtime["job_id"])



@pytest.mark.slurm
def test_a_running_job_that_writes_an_exit_code_while_the_controller_is_down_is_not_completed(slurm, workdir):
    """While the controller cannot be reached, a job's outcome is taken from its supervisor's
    exit_code file, which the job can write as the supervisor does: a job still running in Slurm is
    recorded `completed` for good, and once the controller is back neither `list` nor a stop sees
    it (it runs on, hidden)."""
    job = slurm_cluster.submit(LONG, workdir, "forged-end")
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=60, what="running")
    real = job.record.runtime["job_id"]
    # what the supervisor writes when a script exits 0, written by the job itself
    (job.run_dir / "exit_code").write_bytes(b"0 exited\n".ljust(64, b" "))
    slurm.stop_controller()
    try:
        QUEUE.forget()
        seen = Job.load("forged-end").refresh().record
    finally:
        slurm.start_controller()
    QUEUE.forget()
    try:
        assert real in slurm.run("squeue", "--me", "-h", "-t", "R", "-o", "%i").stdout.split()  # it runs on
        assert seen.status is Status.RUNNING, (seen.status, seen.reason)
        assert Job.load("forged-end").refresh().record.status is Status.RUNNING
    finally:
        slurm.run("scancel", real)



@pytest.mark.slurm
def test_a_job_that_submits_a_decoy_with_its_token_is_not_hidden_by_it(slurm, workdir, tmp_path):
    """Nobody can change a job's batch command, but anyone can submit a job whose command holds
    the token: a job sees its own (`scontrol show job $SLURM_JOB_ID`, or squeue's Command) and
    submits a decoy of its name and log with it, which ends at once. The newest submission wins,
    so the run follows the decoy: `completed`, while its own job runs on, out of sight of list and
    stop."""
    job = slurm_cluster.submit(LONG, workdir, "decoyed")
    wait_for(lambda: job.refresh().record.status is Status.RUNNING, timeout=60, what="running")
    real = job.record.runtime["job_id"]
    command = slurm.run("squeue", "-h", "-j", real, "-O", "Command:500").stdout.split()
    token = command[2]  # slurm_batch.sh RUN_DIR TOKEN ...: what the job can read of itself
    decoy = tmp_path / "decoy.sh"
    decoy.write_text("#!/bin/sh\nexit 0\n")
    decoy.chmod(0o755)
    submitted = slurm.run("sbatch", "--parsable", "--job-name=decoyed", f"--output={job.run_dir / 'output.log'}", str(decoy), token)
    decoy_id = submitted.stdout.strip().split(";")[0]
    wait_for(lambda: decoy_id in slurm.run("squeue", "--me", "-h", "-t", "CD", "-o", "%i").stdout.split(), timeout=60, what="the decoy done")
    QUEUE.forget()
    try:
        record = Job.load("decoyed").refresh().record
        assert real in slurm.run("squeue", "--me", "-h", "-t", "R", "-o", "%i").stdout.split()  # it runs on
        assert record.status is Status.RUNNING, (record.status, record.reason, record.runtime.get("job_id"))
    finally:
        slurm.run("scancel", real)


# -- a store on a small file system that fills up -----------------------------------------------


@pytest.fixture
def small_store(tmp_path, monkeypatch):
    """$JUPYTER_TRAINER_HOME on a 2 MB tmpfs of its own (root only), unmounted afterwards."""
    with mounted_small_store(tmp_path, monkeypatch, "2m") as mount:
        yield mount


def _fill_to(mount, free_kb):
    """Leave about `free_kb` KB free on the mount."""
    filler = mount / "filler"
    filler.unlink(missing_ok=True)
    stats = os.statvfs(mount)
    available = stats.f_bavail * stats.f_frsize
    with open(filler, "wb") as handle:
        handle.write(b"\1" * max(0, available - free_kb * 1024))


def test_a_submission_to_a_full_store_says_one_line_and_never_leaves_a_job_running_unrecorded(small_store, tmp_path):
    """Whatever room is left, a submission that cannot write the store says so in one line, and
    leaves either a job it follows (and can stop) or nothing: never a traceback, never a job
    running that the store calls `lost` ("interrupted before the job started") and whose stop
    does not reach it."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "long.py").write_text("import time\nwhile True:\n    time.sleep(1)\n")
    home = small_store / "home"
    problems = []
    for free_kb in range(4, 132, 4):
        name = f"f{free_kb}"
        _fill_to(small_store, free_kb)
        done = cli("submit", str(workdir / "long.py"), "--host", "--name", name, cwd=workdir)
        (small_store / "filler").unlink()
        running = processes_under(home / "jobs" / name)
        if done.returncode != 0:
            if "Traceback" in done.stderr or len(done.stderr.strip().splitlines()) != 1:
                problems.append((free_kb, "not one line", done.stderr.strip().splitlines()[-1:]))
            if running:
                listed = cli("list").stdout.strip().splitlines()[1:]
                problems.append((free_kb, "failed submission left its job running", listed))
        else:
            stopped = cli("stop", name)
            wait_for(lambda: not processes_under(home / "jobs" / name), timeout=30, what="the job ended by its stop")
            assert stopped.returncode == 0, stopped.stderr
        end_processes_under(home / "jobs" / name)
    assert problems == [], "\n".join(map(repr, problems))


# -- words from the job's side: what `readable` leaves in ---------------------------------------


def test_a_lone_surrogate_a_job_writes_into_its_record_never_breaks_status(home, workdir):
    """A job can rewrite its record (see the Slurm tests above); JSON's "\\ud800" reads as a lone
    surrogate, which `readable` keeps and which no UTF-8 terminal can be written: `status` ends in
    a UnicodeEncodeError traceback where it should show the reason without it."""
    (workdir / "bad.py").write_text("raise SystemExit(3)\n")
    assert cli("submit", "bad.py", "--host", "--name", "surrogate", cwd=workdir).returncode == 0
    job = Job.load("surrogate")
    assert job.wait(timeout=60) is Status.FAILED
    record_file = job.run_dir / "record.json"
    data = json.loads(record_file.read_text())
    data["reason"] = "it \ud800\u202edeliaf"
    record_file.write_text(json.dumps(data))  # what the job can do: it writes into its run directory
    shown = cli("status", "surrogate")
    assert "Traceback" not in shown.stderr and shown.returncode == 0, shown.stderr
    assert "\u202e" not in shown.stdout


# -- %train_compare / compare of a job removed while it is compared -----------------------------


@pytest.mark.parametrize("curves", [True, False], ids=["view", "text table"])
def test_a_job_removed_while_it_is_compared_is_not_said_to_have_no_values(home, workdir, curves):
    """`compare` (and %train_compare) loads the jobs, then reads their logs: a job removed in
    between (`jupyter-trainer rm` from another terminal; seen with 500 jobs, rm landing within the
    comparison's second) is shown as `completed ... 0 points` with the note "no value of loss in
    its log", which its log, when it was there, had fifty of. It should say the job was removed."""
    from jupyter_trainer.metrics.comparison import table_text
    from jupyter_trainer.view.compare_runs import compare, load_runs

    (workdir / "train.py").write_text("for step in range(50):\n    print(f'step {step} loss: {1 / (step + 1):.4f}')\n")
    for name in ("kept", "removed"):
        assert cli("submit", "train.py", "--host", "--name", name, cwd=workdir).returncode == 0
        assert Job.load(name).wait(timeout=60) is Status.COMPLETED
    runs = load_runs(["kept", "removed"], curves=curves)
    assert cli("rm", "removed").returncode == 0  # from another terminal, while the comparison reads
    shown = compare([run.read_all() for run in runs])
    rows = {row.name: row for row in shown.rows}
    assert rows["kept"].points == 50
    assert "no value of loss in its log" not in rows["removed"].note and "removed" in rows["removed"].note, rows["removed"]
    notes = table_text(shown.rows, shown.note).splitlines()[3:]  # under the header and the two rows
    assert notes == ["removed: removed while it was compared", "x: step"]


# -- the metrics cache a job can write ---------------------------------------------------------


@pytest.mark.parametrize("field", ["unread", "offset"])
def test_a_metrics_cache_with_an_infinite_count_is_not_taken(home, workdir, field):
    """The cache beside the record (which a job can write) is checked field by field, and one
    that is not ours is read past; JSON's Infinity (or 1e400) as its `unread` (new in version 7)
    or its `offset` is int()-ed into an OverflowError, which no check catches: the view of the
    job (its widget, %train_logs) fails instead of reading the log."""
    from jupyter_trainer.metrics import cache as metrics_cache
    from jupyter_trainer.view.monitor import JobMonitor

    (workdir / "train.py").write_text("for step in range(1, 101):\n    print(f'step {step} loss: {1 / step}')\n")
    assert cli("submit", "train.py", "--host", "--name", "cached", cwd=workdir).returncode == 0
    job = Job.load("cached")
    assert job.wait(timeout=60) is Status.COMPLETED
    first = JobMonitor(job, read_budget=1 << 30)
    first.start()
    while not first.caught_up:
        first.read_log()
    metrics_cache.save(job.run_dir, first.metric_options, first.cursor.line_start, job.log_source(), first.metrics, first.reader)
    cache = job.run_dir / "metrics.json"
    data = json.loads(cache.read_text())
    data[field] = float("inf")
    cache.write_text(json.dumps(data))  # what the job can do: "unread": Infinity
    again = JobMonitor(job, read_budget=1 << 30)
    again.start()
    while not again.caught_up:
        again.read_log()
    assert again.metrics.counts == {"loss": 100}


# -- interpreter wrappers that run the launcher otherwise -------------------------------------


def test_a_wrapper_that_execs_the_launchers_text_fails_with_a_launch_error(home, workdir):
    """A wrapper that runs the launcher otherwise than as python3 runs a file fails the job with a
    LaunchError as its reason; one that exec()s its text (no __file__) ends in a NameError of the
    launcher's own instead, which says nothing of what to do."""
    (workdir / "t.py").write_text("print('ran')\n")
    wrapper = "sh -c 'exec python3 -c \"import sys; sys.argv.pop(0); exec(open(sys.argv[0]).read())\" \"$0\" \"$@\"'"
    done = cli("submit", "t.py", "--host", "--name", "exec-wrapper", "--interpreter", wrapper, cwd=workdir)
    assert done.returncode == 0, done.stderr
    job = Job.load("exec-wrapper")
    assert job.wait(timeout=60) is Status.FAILED
    assert job.record.reason.startswith("LaunchError:"), job.record.reason


# -- a log truncated while its view passes over a run of NULs -----------------------------------

TRUNCATES_AFTER_NULS = """
import os, sys, time
print('step 0 loss: 9.0', flush=True)
os.write(1, b'\\0' * (1 << 20))  # a MB of zeros written: no hole the file system can tell
while not os.path.exists('go'):
    time.sleep(0.05)
os.ftruncate(1, 0)  # the log starts again, and grows past where the view was
for step in range(1, 6):
    print(f'step {step} loss: {step}.0 ' + 'x' * 300000, flush=True)
open('done', 'w').close()
time.sleep(300)
"""


def test_a_log_truncated_while_its_view_passes_over_nuls_is_said_and_read_from_its_new_start(home, workdir):
    """The view checks the 64 bytes before its offset at each read, so a truncated log is said and
    read again from its start, also when it grew past the old offset between two reads (a text
    log before the truncation: held). After the view left a run of NULs unread (skip_to), it has no
    bytes to check (LogCursor._check is emptied) and learns them from the log as it is at the next
    read: the truncation goes unsaid and steps 1 to 4 are never in its metrics."""
    from jupyter_trainer.view.monitor import JobMonitor

    (workdir / "t.py").write_text(TRUNCATES_AFTER_NULS)
    assert cli("submit", "t.py", "--host", "--name", "nul-cut", cwd=workdir).returncode == 0
    job = Job.load("nul-cut")
    try:
        wait_for(lambda: job.log_source().size() > 1 << 20, timeout=30, what="the NULs written")
        view = JobMonitor(job)
        view.start()
        for _ in range(5):
            view.read_log()
        assert view.cursor.offset > 1 << 20  # the view is past (or over) the NULs
        (workdir / "go").touch()
        wait_for(lambda: (workdir / "done").exists(), timeout=30, what="the log written again")
        for _ in range(50):
            view.read_log()
        shown = "\n".join(view.snapshot(0).lines) if hasattr(view.snapshot(0), "lines") else "\n".join(view.lines)
        assert view.metrics.counts == {"loss": 6} and "truncated" in shown, (view.metrics.counts, shown[-300:])
    finally:
        job.stop()


# -- what looks like a run being created, planted beside the runs --------------------------------


def test_a_planted_creating_link_or_file_never_makes_rm_and_prune_fail_for_good(home, workdir, tmp_path):
    """A job can write beside its run (its job's directory is its run's parent): a `.creating-RUN-TOKEN`
    that is a link (to a directory of the user's) or a plain file is taken for what a killed
    submission left, and its removal fails at every rm and prune, for good (exit 1), said as
    "[Errno None] None: PosixPath(...)" (shutil.rmtree refuses a link) with advice about read-only
    or full file systems. The link's target must stay untouched (it is), and rm and prune should
    finish (before runs were made under hidden names, such entries were left alone)."""
    (workdir / "t.py").write_text("print('ran')\n")
    assert cli("submit", "t.py", "--host", "--name", "planted", cwd=workdir).returncode == 0
    job = Job.load("planted")
    assert job.wait(timeout=60) is Status.COMPLETED
    kept = tmp_path / "users-data"
    kept.mkdir()
    (kept / "precious").write_text("keep me\n")
    job_dir = job.run_dir.parent
    (job_dir / ".creating-7-deadbeef").symlink_to(kept)  # what the job can do
    (job_dir / ".creating-8-deadbeef").write_text("")
    pruned = cli("prune", "--older-than", "1d")  # nothing old enough: nothing to say
    removed = cli("rm", "planted")
    assert (kept / "precious").read_text() == "keep me\n"
    assert "[Errno None]" not in pruned.stderr + removed.stderr, pruned.stderr + removed.stderr
    assert pruned.returncode == 0 and removed.returncode == 0, pruned.stderr + removed.stderr
