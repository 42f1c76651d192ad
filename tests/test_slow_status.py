"""A slow or hung status check of one job never freezes the other views of a kernel.

Real parts: a stand-in `squeue` on PATH (a small script in a tmp dir) that answers for a Slurm
job of the store's own once it is let go, a real `--host` job printing lines, the real poller.
While squeue hangs, the host job's view goes on, and the Slurm views say they are asking."""

import json
import os
import re
import sys
import time
from pathlib import Path

import comm
import pytest
from comm.base_comm import BaseComm
from conftest import wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.backends.slurm.backend import output_option
from jupyter_trainer.backends.slurm.queue import QUEUE
from jupyter_trainer.core.record import JobRecord, Status
from jupyter_trainer.jobs import status_checks
from jupyter_trainer.jobs.job import Job
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.view.job_widget import JobWidget
from jupyter_trainer.view.poller import Poller

# The stand-in squeue: it notes each call, waits until the test lets it go (never past HANG_LIMIT,
# so that code that waits for it still ends) and for `delay` seconds if that file says so, then
# lists the job of `job.json` as running on its node, in the format it was asked for.
HANG_LIMIT = 40.0
SQUEUE = """\
#!{python}
import json, os, sys, time
from pathlib import Path

here = Path(__file__).parent
with open(here / "calls", "a") as calls:
    calls.write("start\\n")
with open(here / "argv", "a") as argv:
    argv.write(" ".join(sys.argv[1:]) + "\\n")
deadline = time.monotonic() + {limit}
while not (here / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.02)
if (here / "delay").exists():
    time.sleep(float((here / "delay").read_text()))
fields = sys.argv[sys.argv.index("-O") + 1]
separator = fields[len("JobArrayID:") : fields.index(",State:")]
job = json.loads((here / "job.json").read_text())
submitted = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job["submitted_at"]))
values = [job["id"], "RUNNING", "None", job["node"], "debug", submitted, "0", "UNLIMITED", str(os.getuid()), job["log"], "slurm_batch.sh", job["name"]]
sys.stdout.write(separator.join(values) + separator + "\\n")
with open(here / "calls", "a") as calls:
    calls.write("done\\n")
"""


class QuietComm(BaseComm):
    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        pass


@pytest.fixture(autouse=True)
def quiet_widgets(monkeypatch):
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: QuietComm(*a, **k))


class StandIn:
    """The stand-in squeue's directory: whether it is held, and its calls."""

    def __init__(self, path: Path):
        self.path = path

    def hold(self) -> None:
        """Its calls wait from now on, and the next question asks it (not the answer kept for a moment)."""
        (self.path / "go").unlink(missing_ok=True)
        QUEUE.forget()

    def let_go(self) -> None:
        (self.path / "go").write_text("")

    def calls(self) -> list[str]:
        try:
            return (self.path / "calls").read_text().split()
        except FileNotFoundError:
            return []

    def started(self) -> int:
        return self.calls().count("start")

    def out(self) -> bool:
        """Whether a call is under way."""
        calls = self.calls()
        return calls.count("start") > calls.count("done")

    def answer_for(self, job: Job, node: str = "node1") -> None:
        runtime = job.record.runtime
        job_file = {"id": runtime["job_id"], "submitted_at": runtime["submitted_at"], "log": output_option(job.run_dir), "name": job.name, "node": node}
        (self.path / "job.json").write_text(json.dumps(job_file))


@pytest.fixture
def squeue(tmp_path, monkeypatch):
    """The stand-in, first on PATH; let go at the end, so that no call outlives the test."""
    path = tmp_path / "slurm-bin"
    path.mkdir()
    script = path / "squeue"
    script.write_text(SQUEUE.format(python=sys.executable, limit=HANG_LIMIT))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{path}:{os.environ['PATH']}")
    QUEUE.reset()
    stand_in = StandIn(path)
    stand_in.let_go()
    yield stand_in
    stand_in.let_go()
    # every question sent is answered: one still waiting for the place's thread would call the
    # next test's stand-in (the thread is the kernel's, shared by every test of this process)
    wait_for(lambda: not status_checks.questions_under_way(), timeout=HANG_LIMIT + 10, what="every status question to be answered")
    wait_for(lambda: not stand_in.out(), timeout=HANG_LIMIT + 10, what="the stand-in squeue's last call to end")
    QUEUE.reset()


def slurm_job(store, squeue, name="on-slurm") -> Job:
    """A running Slurm job of the store's, as sbatch would have left its record (no cluster runs it:
    the stand-in squeue says it runs)."""
    record = JobRecord(name=name, backend="slurm")
    store.create(record)

    def launched(changed):
        changed.runtime = {"job_id": "4242", "submitted_at": time.time(), "state": "PENDING"}
        changed.status = Status.RUNNING
        changed.started_at = time.time()

    job = Job(store.update(name, record.run, launched), store)
    squeue.answer_for(job)
    return job


PRINTS = """
import time
for i in range(100000):
    print(f"line {i}", flush=True)
    time.sleep(0.1)
"""


def host_job(workdir):
    spec = build_spec(PRINTS, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    return submit_detached(spec, name="on-host").job


def last_line(view) -> int:
    """The number of the last line the view shows (-1 before the first)."""
    numbers = re.findall(r"line (\d+)", view.log.value)
    return int(numbers[-1]) if numbers else -1


def shown(view) -> str:
    return view.header.value


def stop_polling(poller: Poller) -> None:
    poller.forget_all()


def test_a_hung_squeue_holds_neither_the_host_jobs_view_nor_the_slurm_view(store, squeue, workdir):
    slurm = JobWidget(slurm_job(store, squeue))  # opened while squeue answers at once
    host = host_job(workdir)
    poller = Poller()
    try:
        wait_for(lambda: "line 3" in host.logs(), timeout=60, what="the host job's first lines")
        view = JobWidget(host)
        squeue.answer_for(slurm.job, node="node2")
        squeue.hold()
        slurm.last_status_check = float("-inf")  # its next check is due at once
        poller.watch(slurm, view)
        wait_for(squeue.out, timeout=10, what="the Slurm view's check to call squeue")
        before = last_line(view)
        wait_for(lambda: last_line(view) >= before + 10, timeout=15, what="the host view's log to advance while squeue hangs")
        wait_for(lambda: "asking Slurm…" in shown(slurm), timeout=10, what="the Slurm view to say it is asking")
        assert squeue.out() and squeue.started() == 2  # the one call the view opened with, and the one under way
        assert "running" in shown(slurm)  # the last known status stays shown
        squeue.let_go()
        wait_for(lambda: "node node2" in shown(slurm) and "asking" not in shown(slurm), timeout=10, what="Slurm's answer in its view")
    finally:
        stop_polling(poller)
        host.stop(wait=10)


def test_opening_the_views_of_a_slurm_job_whose_squeue_hangs_does_not_wait_for_it(store, squeue, workdir):
    from jupyter_trainer.view.compare_runs import load_runs
    from jupyter_trainer.view.compare_view import CompareWidget
    from jupyter_trainer.view.fields import ROW_COLUMNS
    from jupyter_trainer.view.jobs_table import JobsTable

    keys = [key for key, _title in ROW_COLUMNS]
    row_cell = lambda key: table.body.children[0].children[1 + keys.index(key)].value  # noqa: E731  (after the tick box)
    job = slurm_job(store, squeue)
    squeue.hold()
    view = JobWidget(job)
    assert squeue.out() and "running" in shown(view)  # opened before squeue answered, with the recorded status
    table = JobsTable(store)
    comparison = CompareWidget(load_runs([job.name], store=store, refresh=False))
    assert squeue.out() and squeue.started() == 1  # one call, for all three views' checks
    poller = Poller()
    try:
        poller.watch(view, table, comparison)
        wait_for(lambda: "asking Slurm…" in shown(view), timeout=10, what="the job's view to say it is asking")
        wait_for(lambda: "asking Slurm…" in row_cell("status"), timeout=10, what="the table's row to say it")
        wait_for(lambda: "asking Slurm…" in comparison.body.value, timeout=10, what="the comparison to say it")
        squeue.let_go()
        wait_for(lambda: "node node1" in shown(view) and "asking" not in shown(view), timeout=10, what="Slurm's answer in the job's view")
        wait_for(lambda: "asking" not in row_cell("status"), timeout=10, what="the answer in the table")
        assert "node1" in row_cell("host")
        wait_for(lambda: "asking" not in comparison.body.value, timeout=10, what="the answer in the comparison")
    finally:
        stop_polling(poller)


def test_a_check_past_its_deadline_is_given_up_its_answer_dropped_and_asked_again_once_it_returned(store, squeue, monkeypatch):
    monkeypatch.setattr(status_checks, "DEADLINE", 1.0)
    monkeypatch.setattr(status_checks, "SHOWN_AFTER", 0.0)
    job = slurm_job(store, squeue)
    check = status_checks.StatusCheck(job)
    squeue.hold()
    assert check.ask()
    wait_for(squeue.out, timeout=10, what="the check's squeue")
    assert check.words() == "asking Slurm…" and check.awaiting
    assert not check.ask() and check.take() is None  # one check of the job under way at a time
    time.sleep(1.2)
    assert check.take() is None and not check.awaiting  # given up: nothing waits for it any more
    assert check.words().startswith("asking Slurm… no answer since ")
    for _ in range(5):
        assert not check.ask()  # its call has not returned: no second one
    assert squeue.started() == 1
    squeue.let_go()
    wait_for(lambda: not squeue.out(), timeout=10, what="the given-up call to return")
    assert check.take() is None and "node_list" not in job.record.runtime  # its answer is dropped
    QUEUE.forget()  # the queue keeps squeue's answers a moment for every job: this check asks it
    # asked again once the call has returned (its thread hands the answer over just after squeue ends)
    wait_for(check.ask, timeout=10, what="a new check once the given-up call returned")
    wait_for(lambda: check.answered, timeout=10, what="the new check's answer")
    assert check.take() is True and job.record.runtime["node_list"] == "node1"
    assert check.words() == "", check.words()
    assert squeue.started() == 2, (squeue.path / "argv").read_text()  # what asked a third time, if one did
    assert Job.load(job.name, store).record.runtime["node_list"] == "node1"  # and recorded


def test_an_answer_that_comes_after_its_run_was_replaced_writes_nothing_of_it(store, squeue):
    from jupyter_trainer.jobs.housekeeping import remove_runs

    job = slurm_job(store, squeue)
    view = JobWidget(job)
    squeue.hold()
    view.last_status_check = float("-inf")
    view.poll(time.monotonic())  # the check goes out, and hangs
    wait_for(squeue.out, timeout=10, what="the check's squeue")
    store.update(job.name, job.run, lambda record: setattr(record, "status", Status.COMPLETED))  # ended, then removed
    remove_runs(job.name, store=store)
    new = slurm_job(store, squeue)  # a new job of the same name, in the same place
    assert new.run_dir == job.run_dir
    squeue.let_go()
    wait_for(lambda: view.monitor.status_check.answered, timeout=10, what="the answer")
    assert view.poll(time.monotonic()) is False  # taking it finds the new job's record
    assert view.removed and "a new job of its name has taken its place" in shown(view)
    stored = Job.load(new.name, store).record
    assert stored.created_at == new.record.created_at and "node_list" not in stored.runtime  # nothing of the old job's answer


def test_the_questions_that_wait_for_a_slow_squeue_are_asked_together_by_one_thread(store, squeue, monkeypatch):
    """Each squeue takes longer than its answer is kept for: without one poll for the questions
    that waited, each job would cost an squeue of its own."""
    monkeypatch.setattr(status_checks, "IDLE_SECONDS", 0.5)
    (squeue.path / "delay").write_text("2.5")
    jobs = [slurm_job(store, squeue, name=f"many-{index}") for index in range(5)]
    checks = [status_checks.StatusCheck(job) for job in jobs]
    assert checks[0].ask()
    wait_for(squeue.out, timeout=10, what="the first check's squeue")
    assert all(check.ask() for check in checks[1:])
    assert status_checks.asking_threads() == 1
    wait_for(lambda: all(check.answered for check in checks), timeout=30, what="every answer")
    assert all(check.take() is not None for check in checks)
    assert squeue.started() == 2  # the first check's, and one for the four that waited
    wait_for(lambda: status_checks.asking_threads() == 0, timeout=10, what="the idle thread to end")


def test_a_quiet_view_awaiting_an_answer_lets_the_poller_sleep_and_the_answer_wakes_it(store, squeue):
    """While its check is under way, a quiet Slurm view sleeps with the others (the poller is not
    kept ticking for it); the answer, which comes from another thread, wakes the poller at once,
    not at the next beat a minute later."""
    job = slurm_job(store, squeue)
    (job.run_dir / "output.log").write_text("started on node1\n")  # a running Slurm job's log: watched
    view = JobWidget(job)
    polls = []
    poll = view.poll
    view.poll = lambda now: polls.append(now) or poll(now)
    squeue.answer_for(job, node="node2")
    squeue.hold()
    poller = Poller(interval=0.05, quiet_interval=60)
    try:
        poller.watch(view)
        wait_for(lambda: squeue.out() and view.quiet and view.watched, timeout=10, what="the view to settle with its check under way")
        settled = len(polls)
        time.sleep(1.0)
        assert len(polls) - settled <= 2  # asleep, not polled 20 times
        squeue.let_go()
        wait_for(lambda: "node node2" in shown(view), timeout=15, what="the answer, well before the next beat")
    finally:
        stop_polling(poller)


def test_the_queue_is_forgotten_and_polled_without_waiting_for_a_hanging_squeue(store, squeue):
    """A poll's start, forget and reset never wait for a command under way (the kernel's poller and
    a submission call them); an answer asked before a forget serves its own question, not the next."""
    import threading

    from jupyter_trainer.backends.slurm.backend import SlurmRuntime, _identity

    job = slurm_job(store, squeue)
    identity = _identity(job.record, SlurmRuntime.of(job.record), job.run_dir)
    squeue.hold()
    answers = []
    asking = threading.Thread(target=lambda: answers.append(QUEUE.job("4242", identity)), daemon=True)
    asking.start()
    wait_for(squeue.out, timeout=10, what="squeue under way")
    done = threading.Event()

    def poll_and_forget():
        with QUEUE.one_poll():
            QUEUE.forget()
        done.set()

    threading.Thread(target=poll_and_forget, daemon=True).start()
    wait_for(done.is_set, timeout=10, what="forget and a poll's start, while squeue hangs")
    assert squeue.out()
    squeue.let_go()
    asking.join(timeout=10)
    assert answers and answers[0].node_list == "node1"
    QUEUE.job("4242", identity)  # a moment later, within the answer's two seconds: asked again
    assert squeue.started() == 2


def test_the_views_of_one_job_share_its_check_under_way(store, squeue):
    """A job's own view, its row in the jobs table and a comparison each check its status: while
    one check of the job is under way, the others wait for its answer rather than ask again."""
    job = slurm_job(store, squeue)
    own, row = status_checks.StatusCheck(job), status_checks.StatusCheck(Job.load(job.name, store))
    squeue.hold()
    assert own.ask()
    wait_for(squeue.out, timeout=10, what="the first check's squeue")
    assert row.ask()
    time.sleep(2.5)  # longer than squeue's answer is kept for: a second question would ask again
    squeue.let_go()
    wait_for(lambda: own.answered and row.answered, timeout=10, what="both answers")
    assert own.take() is True and row.take() is True  # each view's handle records it
    assert squeue.started() == 1
    assert Job.load(job.name, store).record.runtime["node_list"] == "node1"


def test_each_backend_says_whether_its_check_may_take_long_and_how_a_view_words_the_wait():
    from jupyter_trainer.backends import DEFAULT

    def words(backend, runtime=None, options=None):
        return DEFAULT.get(backend).asking(JobRecord(name="x", backend=backend, runtime=runtime or {}, options=options or {}))

    assert words("host", {"supervisor": {}}) == ""  # its own files and processes: asked in the poller's thread
    assert words("slurm", {"job_id": "1"}) == "asking Slurm…"
    assert words("sagemaker", {"mode": "remote"}) == "asking SageMaker…"
    assert words("sagemaker", {"mode": "local"}) == ""  # the local runner's files and processes
    # a remote engine: asked on the thread of its host (within the SSH sessions its sshd allows)
    assert words("docker", {"engine": {"url": "ssh://me@gpu1"}}) == "asking the Docker engine on gpu1…"
    assert words("docker", {"engine": {"url": "ssh://me@10.0.0.7", "name": "lab"}}) == "asking the Docker engine on lab…"
    assert words("docker", {"engine": {"url": "unix:///var/run/docker.sock"}}) == "asking the Docker engine…"
    assert words("docker", {}, {"engine": {"url": "tcp://build:2376"}}) == "asking the Docker engine on build…"  # not launched yet
