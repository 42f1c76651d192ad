"""Log lag: the time from a line written by a job to the view's model holding it, against `tail -F`
of the same file, side by side.

The job prints numbered lines stamped with the time they were written, a random pause apart (a
quiet job: the poller is idle between two lines). The view is a JobWidget served by a real
Poller thread; a line counts as held once the log pane's model value has it (seen by a traitlets
observer, so no look of ours adds to the lag). `tail -F -n +1` of the job's log runs meanwhile,
and a line counts as its once it is on tail's stdout. Both clocks are this machine's (a local
container shares its kernel's clock).
"""

from __future__ import annotations

import re
import statistics
import subprocess
import tempfile
import threading
import time

from common import Comparison

LAG_JOB = """
import random, time
time.sleep({settle})
for i in range({lines}):
    print(f"lag {{i}} {{time.time():.6f}}", flush=True)
    time.sleep(random.uniform({pause_min}, {pause_max}))
"""
LINE = re.compile(r"lag (\d+) (\d+\.\d+)")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


class HeldLines:
    """When each stamped line first reached some text (a model value, tail's output): {number: lag}."""

    def __init__(self):
        self.lags: dict[int, float] = {}
        self._lock = threading.Lock()

    def saw(self, text: str) -> None:
        now = time.time()
        with self._lock:
            for number, written in LINE.findall(text):
                self.lags.setdefault(int(number), now - float(written))


def follow_with_tail(path, held: HeldLines) -> subprocess.Popen:
    tail = subprocess.Popen(["tail", "-F", "-n", "+1", str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def read() -> None:
        for line in tail.stdout:
            held.saw(line)

    threading.Thread(target=read, name="lag-tail", daemon=True).start()
    return tail


class RemoteTail:
    """`tail -F` of a remote job's log, run in its container through the remote engine (over SSH,
    a client of its own), as one would follow the file by hand; it ends with its connection."""

    def __init__(self, client, job, held: HeldLines):
        source = job.log_source()
        source = getattr(source, "fallback", source)  # a streamed log reads through its container's source
        container = client.containers.get(source.container_id)
        self._client = client
        self._output = container.exec_run(["tail", "-F", "-n", "+1", source.path], stream=True).output
        threading.Thread(target=self._read, args=(held,), name="lag-remote-tail", daemon=True).start()

    def _read(self, held: HeldLines) -> None:
        pending = b""
        try:
            for chunk in self._output:
                pending += chunk
                whole, _, pending = pending.rpartition(b"\n")
                if whole:
                    held.saw(whole.decode("utf-8", "replace"))
        except Exception:  # the connection closed under it: the measurement is over
            pass

    def terminate(self) -> None:
        self._client.close()

    def wait(self) -> None:
        pass


def measure_lag(spec, name: str, lines: int, follow=None) -> tuple[HeldLines, HeldLines]:
    """Run the lag job from `spec` (a DetachedSpec of LAG_JOB), followed by a view and by tail
    (`follow(job, held)`: another tail than the local `tail -F` of the store's log)."""
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.view.job_widget import JobWidget
    from jupyter_trainer.view.poller import Poller

    job = submit_detached(spec, name=name).job
    ours, theirs = HeldLines(), HeldLines()
    view = JobWidget(job)
    view.log.observe(lambda change: ours.saw(change["new"]), names="value")
    poller = Poller()
    tail = follow(job, theirs) if follow else follow_with_tail(job.run_dir / "output.log", theirs)
    try:
        poller.watch(view)
        deadline = time.monotonic() + 120 + lines * 2
        while (len(ours.lags) < lines or len(theirs.lags) < lines) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        tail.terminate()
        tail.wait()
        job.stop(wait=0)
        with poller._lock:
            poller.widgets = []
    return ours, theirs


def lag_rows(label: str, ours: HeldLines, theirs: HeldLines) -> list[Comparison]:
    both = sorted(set(ours.lags) & set(theirs.lags))
    if not both:
        raise RuntimeError(f"{label}: no line reached both the view and tail")
    mine, tails = [ours.lags[n] for n in both], [theirs.lags[n] for n in both]
    return [
        Comparison(f"log lag p50, {label} ({len(both)} lines): view's model vs tail -F", statistics.median(mine), statistics.median(tails), "for scale", None),
        Comparison(f"log lag p99, {label}: view's model vs tail -F", percentile(mine, 0.99), percentile(tails, 0.99), "for scale", None),
    ]


def bench_lag(lines: int, image: str, docker: bool = True) -> list[Comparison]:
    """The lag of a host job, and of a job in a local Docker container (its log mounted from the
    store); a remote engine's: bench_remote_lag."""
    import comm

    from jupyter_trainer.backends import build_spec

    comm.create_comm = lambda *a, **k: comm.DummyComm(*a, **k)
    script = LAG_JOB.format(settle=2, lines=lines, pause_min=0.1, pause_max=0.6)
    work = tempfile.mkdtemp(prefix="jt-bench-work-")
    rows = []
    host = build_spec(script, host=True, image=None, container=None, workdir=work, gpus=None)
    rows += lag_rows("host job", *measure_lag(host, f"lag-host-{time.monotonic_ns()}", lines))
    if docker:
        local = build_spec(script, host=False, image=image, container=None, workdir=work, gpus=None)
        rows += lag_rows("local Docker job", *measure_lag(local, f"lag-docker-{time.monotonic_ns()}", lines))
    return rows


def bench_remote_lag(lines: int, image: str) -> list[Comparison]:
    """The lag of a job on a remote engine over SSH (tests/remote_host.py: a second real engine,
    its sshd on this machine's loopback, so both clocks are this machine's), against `tail -F` of
    the job's log in its container through the same engine."""
    import os
    import sys
    from pathlib import Path

    import comm

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from remote_host import RemoteHost

    from jupyter_trainer.backends import build_spec

    comm.create_comm = lambda *a, **k: comm.DummyComm(*a, **k)
    script = LAG_JOB.format(settle=8, lines=lines, pause_min=0.1, pause_max=0.6)  # the view's stream opens first
    remote = RemoteHost()
    try:
        remote.start()
        remote.load_image(image)
        os.environ.update(remote.environ())  # the laptop's SSH setup: the host's key and known_hosts
        spec = build_spec(script, host=False, image=image, container=None, workdir=tempfile.mkdtemp(prefix="jt-bench-work-"),
                          gpus=None, docker_host=remote.url)  # fmt: skip
        return lag_rows("remote Docker job over SSH", *measure_lag(spec, f"lag-remote-{time.monotonic_ns()}", lines,
                                                                    follow=lambda job, held: RemoteTail(remote.client(), job, held)))  # fmt: skip
    finally:
        remote.close()
