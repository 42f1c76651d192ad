"""A Docker engine that stops answering mid-way, a full store, and a comparison of hundreds of jobs."""

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from conftest import wait_for
from small_store import processes_under
from small_store import small_store as mounted_small_store

from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import Job

LONG = "import time\nprint('up', flush=True)\ntime.sleep(300)\n"


def cli(*args, timeout=60, **options):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=timeout, **options)


# -- a full store ---------------------------------------------------------------------------------


@pytest.fixture
def small_store(tmp_path, monkeypatch):
    """$JUPYTER_TRAINER_HOME on a 1 MB tmpfs of its own (root only), unmounted afterwards."""
    with mounted_small_store(tmp_path, monkeypatch, "1m") as mount:
        yield mount


def _fill(mount):
    """Leave no room on the mount."""
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\1" * 4096)
    finally:
        os.close(fd)


def test_a_stop_on_a_full_store_still_stops_the_job(small_store, tmp_path):
    """The store's disk is full (another job's log, say): the job the user stops to free it must
    stop. `stop` refused in one line, "cannot write the job store", and left the job running, as
    it could not write `stop_requested` into the record before sending the stop."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "long.py").write_text("import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(1)\n")
    assert cli("submit", "long.py", "--host", "--name", "long", cwd=workdir).returncode == 0
    run_dir = small_store / "home" / "jobs" / "long" / "1"
    wait_for(lambda: "up" in Job.load("long").logs(), what="the job to run")
    _fill(small_store)
    stopped = cli("stop", "long")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert processes_under(run_dir) == []
    (small_store / "filler").unlink()
    shown = cli("status", "long")
    assert "stopped" in shown.stdout.split("reason")[0], shown.stdout
    assert Job.load("long").record.status is Status.STOPPED  # recorded once there is room again


# -- a Docker engine whose answer to the start is lost ---------------------------------------------


class DroppingProxy:
    """A unix socket in front of an engine that relays every call, but drops the connection where
    the engine answers the first exec's start: the engine started the job, the caller never hears so (an
    SSH connection or a network that broke then, a call that timed out on a busy engine)."""

    START = re.compile(rb"POST /[^ ]*exec/[0-9a-f]+/start ")

    def __init__(self, target: str):
        self.root = tempfile.mkdtemp(prefix="jt-proxy-")  # unix socket paths are short
        self.path = os.path.join(self.root, "docker.sock")
        self.target = target
        self.dropped = 0
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(self.path)
        self.server.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:  # closed
                return
            engine = socket.socket(socket.AF_UNIX)
            engine.connect(self.target)
            threading.Thread(target=self._relay, args=(client, engine), daemon=True).start()

    def _relay(self, client, engine):
        starting = threading.Event()

        def up():
            with contextlib.suppress(OSError):
                while data := client.recv(65536):
                    if self.START.search(data) and not self.dropped:  # the job's start: later execs (a stop's) go through
                        starting.set()
                    engine.sendall(data)

        threading.Thread(target=up, daemon=True).start()
        with contextlib.suppress(OSError):
            while data := engine.recv(65536):
                if starting.is_set():
                    self.dropped += 1
                    break
                client.sendall(data)
        for end in (client, engine):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self):
        self.server.close()
        shutil.rmtree(self.root, ignore_errors=True)


def test_a_job_whose_start_the_engine_answered_on_a_dropped_connection_is_recorded(docker_image, workdir, home, monkeypatch):
    """The engine started the job's exec, and the connection dropped before its answer: the
    submission said "no Docker engine reachable ... while trying to start the job" and discarded
    the run, while the job ran on in its container with no record (nothing follows or stops it, and
    a second submission of the name started a second copy). The engine, asked again, says it runs."""
    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.jobs.submit import submit_detached

    proxy = DroppingProxy("/var/run/docker.sock")
    try:
        monkeypatch.setenv("DOCKER_HOST", f"unix://{proxy.path}")
        spec = build_spec(LONG, host=False, image=docker_image, container=None, workdir=str(workdir), gpus=None)
        job = submit_detached(spec, name="dropped").job
        assert proxy.dropped == 1
        wait_for(lambda: "up" in job.logs(), what="the job to run")
        assert Job.load("dropped").status is Status.RUNNING
        assert Job.load("dropped").stop().status is Status.STOPPED
    finally:
        monkeypatch.delenv("DOCKER_HOST")
        proxy.close()


# -- %train_compare of hundreds of jobs ----------------------------------------------------------


def test_a_comparison_of_hundreds_of_long_logs_opens_at_once(store, backends, quiet_comm):
    """%train_compare of 500 jobs of 3000 lines each held the cell 80 s: the view read every log
    whole before it showed (each run's read had a budget, but of 20 ms a run, and was checked only
    after a chunk of up to 1 MB), and each poll then held the kernel's poller as long. The view now
    opens on what a bounded read gives and the poller reads the rest, a bounded time per poll."""
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.view.compare_runs import load_runs
    from jupyter_trainer.view.compare_view import CompareWidget

    names = [f"sweep-{index}" for index in range(300)]
    lines = "".join(f"step {step} loss {1 / (step + 1):.5f}\n" for step in range(1500))
    for name in names:
        job = submit_detached(DetachedSpec(script="x", backend="fake", workdir=os.getcwd()), name=name, store=store, backends=backends).job
        (job.run_dir / "output.log").write_text(lines)
    runs = load_runs(names, None, store, backends, refresh=False)
    began = time.process_time()
    view = CompareWidget(runs)
    assert time.process_time() - began < 2.0
    assert "loss of 300 jobs" in view.body.value
    began = time.process_time()
    view.poll(time.time())
    assert time.process_time() - began < 2.0  # a poll, whatever is left to read
    assert not all(run.caught_up for run in runs)  # the rest comes at later polls


def test_a_chart_of_hundreds_of_curves_stays_small_and_keeps_their_spikes():
    """The chart of 500 jobs drew every point each kept (up to a thousand a job): 4 MB of SVG sent
    at every update of a live view, and a second of the poller's time to make."""
    from jupyter_trainer.metrics import comparison as rules
    from jupyter_trainer.view.compare_runs import Comparison
    from jupyter_trainer.view.compare_view import comparison_html

    curves = []
    for index in range(500):
        points = [(float(step), 1 / (step + 1) + index / 1000) for step in range(1000)]
        if index == 7:
            points[500] = (500.0, 50.0)  # one job's spike
        curves.append((f"job-{index}", points))
    rows = tuple(rules.row(label, "running", "loss", None, ["loss"]) for label, _ in curves)
    shown = comparison_html(Comparison("loss", "step", "x: step", rows, tuple(curves)), [Status.RUNNING] * 500)
    assert len(shown) < 1_000_000
    ticks = re.findall(r'<text class="jt-tick"[^>]*>([^<]*)</text>', shown)
    assert ticks[:5] == ["0.001", "0.01", "0.1", "1", "10"]  # round values of the log scale, up to the spike's decade
    frame = re.search(r'<rect class="jt-frame" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"', shown)
    left, top, width = (float(group) for group in frame.groups())

    def drawn(name):
        points = re.search(r"<title>" + name + r'</title><polyline class="[^"]*" points="([^"]*)"', shown)[1]
        return [tuple(map(float, pair.split(","))) for pair in points.split()]

    assert min(y for _, y in drawn("job-7")) == top  # the spike (the highest value) is still drawn
    assert max(x for x, _ in drawn("job-0")) == left + width  # and the last step
