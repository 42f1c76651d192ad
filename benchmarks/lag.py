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


def measure_lag(spec, name: str, lines: int) -> tuple[HeldLines, HeldLines]:
    """Run the lag job from `spec` (a DetachedSpec of LAG_JOB), followed by a view and by tail."""
    from jupyter_trainer.submit import submit_detached
    from jupyter_trainer.widget import JobWidget, Poller

    job = submit_detached(spec, name=name).job
    ours, theirs = HeldLines(), HeldLines()
    view = JobWidget(job)
    view.log.observe(lambda change: ours.saw(change["new"]), names="value")
    poller = Poller()
    tail = follow_with_tail(job.run_dir / "output.log", theirs)
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
    store). A remote engine (bench_remote_follow's SSH host) is not measured here."""
    import comm

    from jupyter_trainer.spec import build_spec

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
