"""A remote Docker host's status checks, over real SSH (tests/remote_host.py): asked on a thread of
their own, so that a hung engine holds no other view of the kernel, and within the SSH sessions the
host's sshd allows, whatever else asks the host at the same time (the poller's log reads, the log
streams, the usage looks, a stop or a listing from the notebook)."""

import re
import subprocess
import sys
import threading
import time

import pytest
from conftest import TEST_IMAGE, wait_for
from remote_host import SSHD_LOG

pytestmark = pytest.mark.docker

PRINTS = "import time\nfor i in range(100000):\n    print(f'line {i}', flush=True)\n    time.sleep(0.1)\n"
ASKING = "asking the Docker engine on jt-remote-test…"


def cli(*words, timeout=120):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *words], check=False, capture_output=True, text=True, timeout=timeout)


def submit_remote(laptop, tmp_path, name):
    script = tmp_path / f"{name}.py"
    script.write_text(PRINTS)
    result = cli("submit", str(script), "--name", name, "--docker-host", laptop.alias_url, "--image", TEST_IMAGE)
    assert result.returncode == 0, result.stderr
    wait_for(lambda: "line 3" in cli("logs", name, "-n", "3").stdout, timeout=90, what=f"{name} to print on the remote host")


def last_line(view) -> int:
    numbers = re.findall(r"line (\d+)", view.log.value)
    return int(numbers[-1]) if numbers else -1


def stop_polling(poller) -> None:
    poller.forget_all()


def refusals(remote) -> int:
    """How many sessions the host's sshd has refused so far ("no more sessions")."""
    return int(remote.exec(f"grep -c 'no more sessions' {SSHD_LOG} || true").output.strip() or 0)


def test_a_hung_remote_engine_holds_no_other_view_and_its_own_says_it_is_asking(laptop, tmp_path, workdir, quiet_comm, monkeypatch):
    """The remote engine stops answering (its dockerd frozen: every call waits) while a view of one
    of its jobs and a view of a host job are polled by one poller: the remote job's status check
    waits on its own thread, the host job's lines go on at their pace, and the remote view keeps
    its last status and says it is asking until the engine answers."""
    from jupyter_trainer.backends import Backends, build_spec
    from jupyter_trainer.backends.docker import streamed_log
    from jupyter_trainer.jobs.job import get_job
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.view.job_widget import JobWidget
    from jupyter_trainer.view.poller import Poller

    # the streamed log's bytes are not checked through the engine meanwhile (a log read, not a status check)
    monkeypatch.setattr(streamed_log, "VERIFY_SECONDS", 3600.0)
    submit_remote(laptop, tmp_path, "far")
    near = submit_detached(build_spec(PRINTS, host=True, image=None, container=None, workdir=str(workdir), gpus=None), name="near").job
    far_view, near_view = JobWidget(get_job("far", backends=Backends())), JobWidget(near)
    polled = []  # when the host job's view was polled
    poll = near_view.poll
    near_view.poll = lambda now: polled.append(time.monotonic()) or poll(now)
    poller = Poller()
    poller.watch(far_view, near_view)
    try:
        wait_for(lambda: far_view.watched and last_line(far_view) >= 0, timeout=30, what="the remote view's stream")
        wait_for(lambda: last_line(near_view) >= 3, timeout=30, what="the host job's lines")
        laptop.exec("pkill -STOP -x dockerd", check=True)
        try:
            hung_at = time.monotonic()
            far_view.last_status_check = float("-inf")  # its next check is due at once
            before = last_line(near_view)
            time.sleep(6)
            gaps = [later - earlier for earlier, later in zip(polled, polled[1:]) if later > hung_at]
            assert gaps and max(gaps) < 2.0, f"the host view was held {max(gaps, default=0):.1f} s"
            assert last_line(near_view) >= before + 30, "the host view's lines went on"  # 60 printed
            assert ASKING in far_view.header.value, far_view.header.value
            assert "running" in far_view.header.value  # its last known status, kept
        finally:
            laptop.exec("pkill -CONT -x dockerd", check=True)
        wait_for(lambda: ASKING not in far_view.header.value, timeout=30, what="the engine's answer in the remote view")
        assert "running" in far_view.header.value and "cannot reach" not in far_view.header.value, far_view.header.value
        shown = last_line(far_view)
        wait_for(lambda: last_line(far_view) > shown + 5, timeout=30, what="the remote log going on")
    finally:
        stop_polling(poller)
        near.stop(wait=10)
        cli("stop", "far")


@pytest.fixture
def max_sessions(laptop, request):
    """sshd on the remote host allowing `request.param` sessions per connection (None: its default, 10)."""
    if request.param is not None:
        laptop.exec(f"echo 'MaxSessions {request.param}' >> /etc/ssh/sshd_config", check=True)
        laptop.stop_sshd()
        laptop.start_sshd()
    yield request.param
    if request.param is not None:
        laptop.exec("sed -i '/^MaxSessions /d' /etc/ssh/sshd_config", check=True)
        laptop.stop_sshd()
        laptop.start_sshd()


@pytest.mark.parametrize("max_sessions", [None, 3], indirect=True, ids=["sshd-default", "sshd-max-sessions-3"])
def test_many_calls_at_once_to_one_host_stay_within_its_ssh_sessions(laptop, tmp_path, quiet_comm, max_sessions):
    """One kernel asks one host from every side at once: the views' status checks (their thread),
    the poller's reads of two followed logs (their streams), more status checks, log reads through
    the engine, usage looks and listings from other threads. No call fails for want of an SSH
    session: past what the host allows they wait their turn (and a host that allows fewer than
    sshd's default is learned from its first refusal)."""
    from jupyter_trainer.backends import Backends
    from jupyter_trainer.backends.docker.errors import LIST
    from jupyter_trainer.jobs.job import get_job
    from jupyter_trainer.view.job_widget import JobWidget
    from jupyter_trainer.view.poller import Poller

    for name in ("one", "two"):
        submit_remote(laptop, tmp_path, name)
    refused_before = refusals(laptop)
    registry = Backends()  # a kernel's: its own SSH connections
    backend = registry.get("docker")
    jobs = [get_job(name, backends=registry) for name in ("one", "two")]
    engine = backend.engine_of(jobs[0].record)
    failures: list[str] = []
    calls = {"status": 0, "log": 0, "usage": 0, "list": 0}
    done = threading.Event()

    def keep_calling(kind, call):
        while not done.is_set():
            try:
                call()
                calls[kind] += 1
            except Exception as exc:  # noqa: BLE001  every failure is the test's
                failures.append(f"{kind}: {exc.__class__.__name__}: {exc} (from {exc.__cause__!r})")
            time.sleep(0.02)

    def listing():
        with backend.clients.calling(engine, LIST) as client:
            client.containers.list(filters={"label": "jupyter_trainer=1"})

    through_the_engine = [backend.log_source(job.record, job.run_dir).fallback for job in jobs]
    threads = [
        *(threading.Thread(target=keep_calling, args=("status", lambda job=job: backend.observe(job.record, job.run_dir))) for job in jobs),
        *(threading.Thread(target=keep_calling, args=("log", lambda source=source: source.read(max(0, source.size() - 200), 200))) for source in through_the_engine),
        threading.Thread(target=keep_calling, args=("usage", lambda: backend.usage(jobs[0].record, jobs[0].run_dir))),
        threading.Thread(target=keep_calling, args=("list", listing)),
    ]
    views = [JobWidget(job) for job in jobs]
    poller = Poller()
    poller.watch(*views)
    said = set()
    try:
        wait_for(lambda: all(view.watched for view in views), timeout=30, what="the views' streams")
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            said.update(shown for view in views if re.search("session|cannot reach", shown := view.header.value + view.error))
            for view in views:
                view.last_status_check = float("-inf")  # a check as often as the poller can
            time.sleep(0.2)
        lines = [last_line(view) for view in views]
        wait_for(lambda: all(last_line(view) > shown + 5 for view, shown in zip(views, lines)), timeout=30, what="the views' logs going on")
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)
        stop_polling(poller)
        for name in ("one", "two"):
            cli("stop", name)
    assert not failures, f"{len(failures)} calls failed, e.g. {failures[:3]}"
    assert not said, said
    assert min(calls.values()) >= 3, calls  # every kind of call was made, again and again
    refused = refusals(laptop) - refused_before
    if max_sessions is None:
        assert refused == 0, f"sshd refused {refused} sessions"
    else:
        assert backend.clients.host_sessions(engine).limit <= max_sessions
        assert refused <= 30, f"sshd refused {refused} sessions: the host's limit is learned at the first ones"
