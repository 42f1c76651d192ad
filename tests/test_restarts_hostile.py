"""--restarts against unlucky timing and hostile jobs: looks racing a container's restart, jobs
that kill their own container or tamper with the keeper's files, odd names and values.

On the private Docker engine (conftest's `private_docker`), as tests/test_restarts.py, whose
checkpointing script and helpers these tests share.
"""

import json
import os
import signal
import subprocess
import threading
import time

import pytest
from conftest import TEST_IMAGE, wait_for
from test_restarts import STEPS, assert_every_step_once, container_of, status_json, step_lines, submit, wait_for_step

from jupyter_trainer.backends.docker import restart_looks
from jupyter_trainer.backends.docker import restarts as keeper_side
from jupyter_trainer.backends.docker.in_container import job_processes
from jupyter_trainer.backends.docker.runtime import DockerRuntime
from jupyter_trainer.core.record import Status
from jupyter_trainer.errors import BackendUnavailable, TrainerError
from jupyter_trainer.jobs.job import get_job

# -- a look while the container is down for a moment ---------------------------------------


def test_a_look_while_docker_restart_has_the_container_down_loses_nothing(private_docker, workdir, home):
    """`docker restart` is a stop, then a start: a look in between (a widget polls every 2 s) sees
    the container stopped. The job is not lost then, and its keeper starts it again."""
    engine = private_docker
    job = submit(STEPS, workdir, "between", args=("14",), restarts=2)
    wait_for_step(job, 2)
    container = container_of(engine, job)
    container.stop(timeout=2)  # as the first half of `docker restart`
    assert get_job("between").status is Status.RUNNING, get_job("between").reason
    container.start()
    assert job.wait(timeout=90) is Status.COMPLETED, job.reason
    assert_every_step_once(job, workdir, 14)
    assert status_json("between")["restarts"] == 1


def test_a_container_stopped_by_hand_is_lost_once_it_stays_down(private_docker, workdir, home, monkeypatch):
    monkeypatch.setattr(keeper_side, "RESTART_GAP_SECONDS", 1.0)
    engine = private_docker
    job = submit(STEPS, workdir, "left-down", args=("40",), restarts=2)
    wait_for_step(job, 1)
    container_of(engine, job).stop(timeout=2)
    time.sleep(1.5)
    lost = get_job("left-down")
    assert lost.status is Status.LOST and "was stopped at" in lost.reason and "exit code 143" in lost.reason, lost.reason


def test_status_looks_during_docker_restarts_never_lose_the_job_nor_fail(private_docker, workdir, home):
    """Two lookers (kernels, CLIs) asking all the time while the container is restarted again and
    again: every look answers, and the job completes, every step once."""
    engine = private_docker
    job = submit(STEPS, workdir, "looked", args=("30",), restarts=10)
    wait_for_step(job, 2)
    failures, statuses, reasons = [], set(), []
    done = threading.Event()

    def look():
        while not done.is_set():
            try:
                seen = get_job("looked")
                statuses.add(seen.status)
                if seen.status is not Status.RUNNING:
                    reasons.append(seen.reason)
            except Exception as exc:  # what `status` would print as an error
                failures.append(repr(exc))

    lookers = [threading.Thread(target=look) for _ in range(2)]
    for looker in lookers:
        looker.start()
    try:
        for _ in range(5):
            container_of(engine, job).restart(timeout=2)
            time.sleep(0.7)
    finally:
        done.set()
        for looker in lookers:
            looker.join()
    assert not failures, failures[:3]
    assert statuses == {Status.RUNNING}, (statuses, reasons[:3])
    assert job.wait(timeout=90) is Status.COMPLETED, job.reason
    assert_every_step_once(job, workdir, 30)
    assert status_json("looked")["restarts"] == 5


# -- jobs that bring their own container down ----------------------------------------------

# Counts its starts in its working directory, then does what `sys.argv[1]` says to its run's files
# (found through its supervisor's command line) and brings its container down by signalling its
# PID 1; after 9 starts it ends by itself, so that a test of a job started again forever ends.
CRASHER = """
import os, signal, sys, time
starts = int(open("starts").read()) + 1 if os.path.exists("starts") else 1
open("starts", "w").write(str(starts))
print("start", starts, flush=True)
run = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")[2].decode()
if starts > 9:
    sys.exit(0)
if sys.argv[1] == "forget":
    open(f"{run}/restarts", "w").close()
if sys.argv[1] == "raise":
    text = open(f"{run}/restart").read().replace("restarts 1\\n", "restarts 50\\n")
    open(f"{run}/restart", "w").write(text)
time.sleep(2)  # running long enough for a look (a few docker execs on a loaded machine) to see it
os.kill(1, signal.SIGTERM)
time.sleep(30)
"""


def test_a_look_after_another_stopped_a_job_beyond_its_limit_says_so_while_its_container_is_down(private_docker, workdir, home):
    """One look stops a job started again beyond its --restarts (the run's `no_restart` says so),
    and its container goes down; another look, which did not make that stop, finds the job down:
    it is lost beyond its limit, as the first look said, not `stopped` as if its user had asked."""
    engine = private_docker
    job = submit(STEPS, workdir, "beyond-seen", args=("40",), restarts=1)
    wait_for_step(job, 1)
    container_of(engine, job).restart(timeout=2)  # unseen by any look of this test's: it reads the log alone
    wait_for(lambda: "(restart 1 of 1)" in job.logs(), what="the keeper's start again")
    run_dir = job.store.run_dir(job.name, job.record.run)
    (run_dir / "no_restart").write_text("beyond\n")  # as DockerBackend._end_uncounted leaves it
    container_of(engine, job).stop(timeout=2)
    ended = get_job("beyond-seen")
    assert ended.status is Status.LOST and "beyond its --restarts 1" in ended.reason, (ended.status, ended.reason)


def test_a_job_that_kills_its_container_is_started_again_only_n_times(private_docker, workdir, home):
    """The job signals its container's PID 1 at each start: the restart policy starts the container
    again each time (on-failure), and the keeper starts the job again twice, then leaves it."""
    job = submit(CRASHER, workdir, "crasher", args=("plain",), restarts=2)
    wait_for(lambda: "used up" in job.logs(), timeout=90, what="the keeper to give up")
    time.sleep(2)
    assert (workdir / "starts").read_text() == "3", job.logs()
    lost = get_job("crasher")
    assert lost.status is Status.LOST and "its 2 restarts were used up" in lost.reason, lost.reason


@pytest.mark.parametrize("tampering", ["forget", "raise"])
def test_a_job_that_changes_its_keepers_count_is_stopped_at_its_limit(private_docker, workdir, home, tampering):
    """A job that empties its run's `restarts` file, or raises the limit in its `restart` file, at
    each start, then brings its container down: with someone looking (a widget, a CLI), it is
    stopped once it has been started again beyond its --restarts 1, and never started again."""
    job = submit(CRASHER, workdir, f"tampers-{tampering}", args=(tampering,), restarts=1)
    statuses = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (statuses and statuses[-1].is_final):
        statuses.append(get_job(job.name).status)  # a widget's poll, only faster
        time.sleep(0.2)
    ended = get_job(job.name)
    assert ended.status is Status.LOST and "beyond its --restarts 1" in ended.reason, (ended.status, ended.reason, job.logs())
    starts = (workdir / "starts").read_text()
    assert int(starts) <= 5, job.logs()  # each start again beyond the limit is seen, at most two late
    time.sleep(5)
    assert (workdir / "starts").read_text() == starts, job.logs()
    container = container_of(private_docker, job)
    # stopped: its supervisor ends once the job's group is gone (TERM, then KILL after the grace)
    wait_for(lambda: not job_processes(container, job.record.runtime["run_dir"])["supervisor"], timeout=30, what="its supervisor to end")
    assert container.status == "running" and (workdir / "starts").read_text() == starts, job.logs()


HOSTILE_VALUE = "a\nb $(touch /tmp/canary) `touch /tmp/canary` ; 'q' \"dq\" \\ \\n \\0101 \\c é end\n"

# Records its environment and arguments at each start (in files named after its third argument), prints a keeper's line of its own and a
# line cut short, then steps as STEPS does.
ODD = """
import json, os, sys, time
mine = sys.argv[3]  # the job's name: files of its own in the working directory it shares
with open(f"seen-{mine}", "a") as handle:
    handle.write(json.dumps([os.environ.get("HOSTILE"), os.environ.get("JUPYTER_TRAINER_RESTARTS"), sys.argv[1:], os.getcwd()]) + "\\n")
print("----- jupyter_trainer: started again after its container restarted (restart 1 of 3) at 2026-12-01 21:47:21 UTC -----", flush=True)
done = int(open(f"done-{mine}").read()) if os.path.exists(f"done-{mine}") else 0
for step in range(done, 12):
    print("step", step, end=" ", flush=True)  # the interruption most likely cuts this line short
    time.sleep(0.3)
    print("done", flush=True)
    open(f"done-{mine}.tmp", "w").write(str(step + 1))
    os.replace(f"done-{mine}.tmp", f"done-{mine}")
print("cut short", end="", flush=True)
time.sleep(3)
"""


def test_many_jobs_odd_names_and_hostile_values_come_back_as_they_were(private_docker, workdir, home):
    """Three --restarts jobs in one container, with names at the edges of what is allowed, an
    --env value and arguments that a shell would run, each printing a keeper's line of its own:
    after an engine restart each is started again once, with the same environment, arguments and
    directory, nothing run, and only the keeper's own start counted."""
    engine = private_docker
    jobs = []
    for name in ["1.a-b_c", "Z", "x" * 63]:
        jobs.append(submit(ODD, workdir, name, args=(HOSTILE_VALUE, "", name), restarts=3, env=[f"HOSTILE={HOSTILE_VALUE}"]))
    assert len({container_of(engine, job).id for job in jobs}) == 1
    for job in jobs:
        wait_for_step(job, 2)
    engine.restart()
    for job in jobs:
        assert job.wait(timeout=60) is Status.COMPLETED, job.reason
        seen = [json.loads(line) for line in (workdir / f"seen-{job.name}").read_text().splitlines()]
        assert seen == [[HOSTILE_VALUE, None, [HOSTILE_VALUE, "", job.name], "/workspace"]] * 2, seen
        log = (job.run_dir / "output.log").read_text()
        done = [line for line in log.splitlines() if line.endswith(" done")]
        # a step whose "done" was printed just before the restart, and not yet noted in its file,
        # is done again once: never skipped, never more
        assert [line for index, line in enumerate(done) if index == 0 or line != done[index - 1]] == [f"step {i} done" for i in range(12)], log
        marks = [line for line in log.splitlines() if "----- jupyter_trainer:" in line]
        assert len(marks) == 3 and all(line.startswith("-----") for line in marks), log  # 2 printed by the job
        assert log.endswith("cut short")
        assert status_json(job.name)["restarts"] == 1
    assert container_of(engine, jobs[0]).exec_run(["test", "-e", "/tmp/canary"]).exit_code == 1



# -- stops that race a restart ---------------------------------------------------------------


def test_a_stop_while_the_engine_is_down_is_kept_when_it_comes_back(private_docker, workdir, home):
    """The stop cannot reach the job (the engine is down) and says so; but the engine starting the
    container again does not start the job again either."""
    engine = private_docker
    job = submit(STEPS, workdir, "stop-down", args=("40",), restarts=2)
    wait_for_step(job, 1)
    engine.stop()
    with pytest.raises(BackendUnavailable):
        get_job("stop-down").stop(wait=1)
    engine.start()
    time.sleep(4)  # the keeper would have started it again by now
    assert "started again" not in job.logs()
    stopped = get_job("stop-down")
    assert stopped.status is Status.STOPPED and "a stop was asked while its container was down" in stopped.reason, stopped.reason


def test_a_stop_while_its_container_is_down_ends_it_stopped(private_docker, workdir, home):
    """Stopped between the stop and the start of a `docker restart`: `stopped` at once, and its
    keeper does not start it again."""
    engine = private_docker
    job = submit(STEPS, workdir, "stop-gap", args=("40",), restarts=2)
    wait_for_step(job, 1)
    container = container_of(engine, job)
    container.stop(timeout=2)
    assert get_job("stop-gap").stop(wait=3).status is Status.STOPPED
    container.start()
    time.sleep(4)
    assert "started again" not in job.logs() and get_job("stop-gap").status is Status.STOPPED


def test_a_stop_of_a_job_whose_supervisor_is_gone_holds_across_an_engine_restart(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "no-supervisor", args=("40",), restarts=2)
    wait_for_step(job, 1)
    container = container_of(engine, job)
    container.exec_run(["kill", "-KILL", *job_processes(container, job.record.runtime["run_dir"])["supervisor"]])
    assert get_job("no-supervisor").status is Status.RUNNING  # the job goes on
    assert get_job("no-supervisor").stop(wait=5).status is Status.STOPPED
    engine.restart()
    time.sleep(3)
    assert "started again" not in job.logs() and get_job("no-supervisor").status is Status.STOPPED


def test_a_stop_racing_an_engine_restart_is_never_undone(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "stop-race", args=("60",), restarts=2)
    wait_for_step(job, 1)
    outcome = []

    def stop():
        try:
            outcome.append(get_job("stop-race").stop(wait=10).status)
        except TrainerError as error:  # the engine went away under it: said, and the job stays stopped
            outcome.append(error)

    stopping = threading.Thread(target=stop)
    stopping.start()
    time.sleep(0.3)
    engine.restart()
    stopping.join()
    time.sleep(4)
    assert "started again" not in job.logs(), (outcome, job.logs())
    assert get_job("stop-race").wait(timeout=35) is Status.STOPPED, (outcome, get_job("stop-race").reason)



# -- the engine stopped while the keeper starts the job again ----------------------------------


@pytest.mark.parametrize("when", ["as-the-engine-answers", "as-the-keeper-says-so"])
def test_an_engine_stopped_during_the_keepers_start_again_brings_the_job_back_once(private_docker, workdir, home, when):
    """The engine restarts, and stops again while the container's keeper is starting the job again
    (as the engine answers again, or just after the keeper wrote its line in the log): when the
    engine comes back, the job goes on from its checkpoint, every step once, and each start again
    is counted once, in the log and in `status --json`, within its --restarts."""
    engine = private_docker
    name = f"keeper-{when}"
    job = submit(STEPS, workdir, name, args=("24",), restarts=3)
    wait_for_step(job, 2)
    engine.restart()
    if when == "as-the-keeper-says-so":
        wait_for(lambda: "(restart 1 of 3)" in job.logs(), timeout=60, interval=0.02, what="the keeper's start again")
    engine.stop()
    assert get_job(name).status is not Status.LOST  # the engine is down: not a verdict
    engine.start()
    back = get_job(name)
    assert back.wait(timeout=180) is Status.COMPLETED, back.reason
    assert_every_step_once(back, workdir, 24)
    log = back.logs()
    started_again = log.count("----- jupyter_trainer: started again after its container restarted")
    assert 1 <= started_again <= 3 and status_json(name)["restarts"] == started_again, log
    assert f"(restart {started_again} of 3)" in log, log


# -- two starts at once --------------------------------------------------------------------


def test_two_restarts_at_once_never_strand_the_job(private_docker, workdir, home):
    """Two `docker restart`s at once: the second stops the container as the first has just started
    it, while its keeper is starting the job again (before its supervisor has written its pids).
    Each time, the next start of the container starts the job again, and it completes."""
    engine = private_docker
    job = submit(STEPS, workdir, "twice-at-once", args=("30",), restarts=12)
    wait_for_step(job, 1)
    for _ in range(3):
        container = container_of(engine, job)
        restarting = [threading.Thread(target=container.restart, kwargs={"timeout": 1}) for _ in range(2)]
        for thread in restarting:
            thread.start()
        for thread in restarting:
            thread.join()
        container.restart(timeout=1)  # once more, after both
        # a step done since the keeper's last start of it
        wait_for(lambda: "\nstep " in job.logs().rsplit("----- jupyter_trainer:", 1)[-1], timeout=30, what="the job to go on")
    assert job.wait(timeout=90) is Status.COMPLETED, job.reason
    assert_every_step_once(job, workdir, 30)


# -- the largest --restarts ----------------------------------------------------------------


def run_keeper(jobs_dir, boot_file, until):
    keeper = subprocess.Popen(
        ["sh", "-c", keeper_side.keeper_source(), "jupyter-trainer-keeper", str(jobs_dir)],
        env={**os.environ, "JUPYTER_TRAINER_BOOT_ID_FILE": str(boot_file)}, start_new_session=True,
    )
    try:
        wait_for(until, what="the keeper")
    finally:
        os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()


def test_the_last_of_the_largest_restarts_is_counted_and_the_end_seen(tmp_path):
    """--restarts 1000, its 999th restart behind it (the keeper itself, this machine's sh): the
    keeper's 1000th start again is read back as 1000, and so is its giving up at the next."""
    run = tmp_path / "jobs" / "job" / "1"
    run.mkdir(parents=True)
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    (run / "restart").write_bytes(keeper_side.instructions(1000, ["true"], {}, str(tmp_path), b""))
    (run / "restarts").write_text("".join(f"restart {n} {boot} 1796171388 container\n" for n in range(1, 1000)))
    (run / "pid").write_text("999999 999999\n")
    (run / "exit_code").write_text(" " * 64)
    (run / "output.log").write_text("")
    runtime = DockerRuntime("c", "n", "t", "e", "/jupyter_trainer/jobs/job/1", mounted=True, restarts_allowed=1000)
    restarts = run / "restarts"
    run_keeper(tmp_path / "jobs", tmp_path / "boot-id", lambda: b"restart 1000 " in restarts.read_bytes())
    assert keeper_side.read_restart_log(None, runtime, run).count == 1000
    run_keeper(tmp_path / "jobs", tmp_path / "boot-id", lambda: b"used-up " in restarts.read_bytes())
    log = keeper_side.read_restart_log(None, runtime, run)
    assert log.count == 1000 and log.used_up == "container"



def test_a_job_that_breaks_its_keeper_is_lost_not_running_forever(private_docker, workdir, home, monkeypatch):
    """A job that removes its container's keeper: once the container is restarted, its main process
    ends at once, and the restart policy starts it again and again. The job is `lost` once its
    keeper has had the time to start it again, not `running` for ever."""
    monkeypatch.setattr(keeper_side, "KEEPER_GRACE_SECONDS", 5.0)
    monkeypatch.setattr(restart_looks, "KEEPER_GRACE_SECONDS", 5.0)
    engine = private_docker
    job = submit("import os, time\nos.remove('/jupyter_trainer/keeper.sh')\nprint('removed', flush=True)\ntime.sleep(60)\n", workdir, "no-keeper", restarts=2)
    wait_for(lambda: "removed" in job.logs(), what="the keeper's removal")
    container_of(engine, job).restart(timeout=1)
    wait_for(lambda: get_job("no-keeper").status.is_final, timeout=40, what="the job to end")
    lost = get_job("no-keeper")
    assert lost.status is Status.LOST, lost.reason
    assert "keeps restarting" in lost.reason or "its keeper did not start the job again" in lost.reason, lost.reason


@pytest.mark.parametrize("after", [0.1, 0.4, 0.7])
def test_a_stop_during_the_keepers_start_up_is_never_undone(private_docker, workdir, home, after):
    """`docker restart`, and a stop asked as the container comes back, while its keeper may be
    starting the job again: the job ends stopped, and stays so."""
    engine = private_docker
    job = submit(STEPS, workdir, "stop-start-up", args=("60",), restarts=3)
    wait_for_step(job, 1)
    container = container_of(engine, job)
    restarting = threading.Thread(target=container.restart, kwargs={"timeout": 1})
    restarting.start()
    time.sleep(after)  # the engine stops it, starts it again (about 0.5 s after the restart began here)
    outcome = get_job("stop-start-up").stop(wait=10).status
    restarting.join()
    assert get_job("stop-start-up").wait(timeout=40) is Status.STOPPED, (outcome, get_job("stop-start-up").reason)
    steps = len(step_lines(job.logs()))
    time.sleep(3)
    assert len(step_lines(job.logs())) == steps and not job_processes(container_of(engine, job), job.record.runtime["run_dir"])["supervisor"]


# -- on a remote engine, whose containers have copies of the run's files --------------------


def test_on_a_remote_host_a_look_and_a_stop_while_the_container_is_down(laptop, monkeypatch):
    """Over SSH: `docker stop` there, as the first half of a `docker restart`; a look then sees the
    job running, a stop then ends it `stopped` (written into the stopped container's copy of its
    files), and the container started again does not start it again."""
    from test_remote_jobs import cli, status, submit_from_a_kernel

    # the look and the stop are made here, within what a docker restart may take however loaded the
    # machine (past it, a container left down is the job lost: see the test above)
    monkeypatch.setattr(keeper_side, "RESTART_GAP_SECONDS", 120.0)
    remote = laptop
    submit_from_a_kernel(f"--name remote-down --docker-host {remote.alias_url} --image {TEST_IMAGE} --restarts 2 --no-widget -- 40", STEPS)
    wait_for(lambda: "step 2" in cli("logs", "remote-down").stdout, timeout=60, what="step 2")
    remote.exec("docker ps -q --filter label=jupyter_trainer.keeper=1 | xargs -r docker stop -t 1", check=True)
    assert get_job("remote-down").status is Status.RUNNING
    stopped = get_job("remote-down").stop(wait=10)
    assert stopped.status is Status.STOPPED, stopped.reason
    assert status("remote-down")["status"] == "stopped"
    remote.exec("docker ps -aq --filter label=jupyter_trainer.keeper=1 | xargs -r docker start", check=True)
    time.sleep(4)
    assert "started again" not in cli("logs", "remote-down").stdout and status("remote-down")["status"] == "stopped"



ROTATES = """
import os, sys, time
run = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")[2].decode()
starts = int(open("starts").read()) + 1 if os.path.exists("starts") else 1
open("starts", "w").write(str(starts))
print("start", starts, flush=True)
if starts == 1:  # its log rotated, as logrotate does: renamed, a new one in its place
    os.rename(f"{run}/output.log", f"{run}/output.log.1")
    open(f"{run}/output.log", "w").close()
for i in range(20):
    print("line", starts, i, flush=True)
    time.sleep(0.3)
"""


def test_a_job_that_replaced_its_runs_log_is_not_started_again_unseen(private_docker, workdir, home, monkeypatch):
    """A job that replaced its run's log file in the container (rotated it): the store's log is no
    longer that file, so a start again would write where nobody reads. It is not started again,
    and ends `lost`, rather than training on with its output lost."""
    monkeypatch.setattr(restart_looks, "KEEPER_GRACE_SECONDS", 5.0)
    engine = private_docker
    job = submit(ROTATES, workdir, "rotates", restarts=2)
    wait_for(lambda: "line 1 3" in job.logs(), what="its lines")
    container_of(engine, job).restart(timeout=1)
    wait_for(lambda: get_job("rotates").status.is_final, timeout=30, what="the job to end")
    assert (workdir / "starts").read_text() == "1"
    lost = get_job("rotates")
    assert lost.status is Status.LOST and "did not start the job again" in lost.reason, lost.reason
