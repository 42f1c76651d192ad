"""jupyter_trainer benchmarks: `python benchmarks/run.py` prints a table of ratios against baselines run side by side.

Each comparison interleaves our code and its baseline in the same run and
reports medians, so a noisy machine moves both alike. Targets are checked here,
never by timed assertions in the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the checkout these benchmarks are in, not whichever one the environment installed
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import Comparison, interleaved, table, timed  # noqa: E402

IMAGE = os.environ.get("JUPYTER_TRAINER_TEST_IMAGE", "jupyter-trainer-test:bookworm-pip")


def fresh_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="jt-bench-"))
    os.environ["JUPYTER_TRAINER_HOME"] = str(home)
    return home


def shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    if "TrainerMagics" not in ip.magics_manager.registry:
        ip.run_line_magic("load_ext", "jupyter_trainer")
    return ip


# 1 -------------------------------------------------------------------------------


def bench_submit(rounds: int) -> Comparison:
    import contextlib
    import io

    import docker

    home = fresh_home()
    work = Path(tempfile.mkdtemp(prefix="jt-bench-work-"))
    (work / "script.py").write_text("print('hello')\n")
    ip = shell()
    counter = iter(range(10**6))

    def ours():
        with contextlib.redirect_stdout(io.StringIO()):
            ip.run_cell(f"%%train_detached --image {IMAGE} --workdir {work} --name b{next(counter)} --no-widget\nprint('hello')\n")

    ours()  # warm: the container exists from here on
    container = docker.from_env().containers.list(filters={"label": f"jupyter_trainer.jobs_dir={home / 'jobs'}"})[0]

    def manual():
        subprocess.run(
            ["docker", "exec", "-d", container.name, "sh", "-c", "nohup python3 /workspace/script.py > /workspace/log 2>&1 &"],
            check=True,
        )

    try:
        mine, theirs = interleaved(timed(ours), timed(manual), rounds)
    finally:
        container.remove(force=True)
    return Comparison("submit into a warm container vs docker exec -d", mine, theirs, "<= 1.0x", 1.0)


# 2 -------------------------------------------------------------------------------


# what the reader pulls out of the benchmarks' logs (the step, the loss, the learning rate), in
# grep's dialect (ERE has no \d and no \s)
GREP_VALUES = r"\b(step|loss|lr)\b[[:space:]]*[:=]?[[:space:]]*[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?"


def dense(step: int) -> bytes:
    """A training loop's line: the step moves on and the loss changes, as in a real log."""
    return b"step %06d loss: %.6f lr: %.5f some more text to make a realistic line\n" % (step, 1 / (1 + step % 9973), 0.001 * (1 - step % 100000 / 1e5))


def sparse(step: int) -> bytes:
    """A metric line in a hundred: the rest is what a training script also prints (warnings,
    progress, data loading)."""
    if step % 100 == 99:
        return dense(step)
    return b"step %06d lr: %.5f some more text to make a realistic line, no metric in it\n" % (step, 0.001 * (1 - step % 100000 / 1e5))


DENSE, SPARSE = dense(0), b"".join(sparse(step) for step in range(100))


def write_log(path: Path, size: int, lines: bytes | None = None, make=dense) -> None:
    """`size` bytes of `lines` over and over, or of `make(step)` for each step."""
    with open(path, "wb") as handle:
        written, step = 0, 0
        while written < size:
            if lines is not None:
                block = lines * ((1 << 20) // len(lines) + 1)
            else:
                block = b"".join(make(step + index) for index in range(10000))
                step += 10000
            chunk = block[: size - written]
            handle.write(chunk)
            written += len(chunk)


def fake_job(home: Path, name: str, log_size: int, make=dense):
    from jupyter_trainer.backends import Backends
    from jupyter_trainer.backends.fake import FakeBackend
    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.spec.job_spec import DetachedSpec

    backends = Backends(fake=FakeBackend())
    store = JobStore(home)
    job = submit_detached(DetachedSpec(script="x", backend="fake", workdir="/"), name=name, store=store, backends=backends).job
    write_log(job.run_dir / "output.log", log_size, make=make)
    return Job.load(name, store, backends)


def bench_logs(rounds: int, big: int) -> list[Comparison]:
    from jupyter_trainer.view.monitor import JobMonitor

    home = fresh_home()
    # the small log holds more lines than a tail shows and replays (20, and 24 before them for the
    # bars a terminal would have drawn over): the comparison is of size alone
    large, small = fake_job(home, "large", big), fake_job(home, "small", 8 << 10)
    tail = interleaved(timed(lambda: large.logs(tail=20)), timed(lambda: small.logs(tail=20)), rounds)

    def steady_poll(job):
        monitor = JobMonitor(job)
        monitor.start()
        while not monitor.caught_up:  # the metrics' catch-up is measured below, not here
            monitor.read_log()

        def poll():
            with open(job.run_dir / "output.log", "ab") as log:
                log.write(b"step 999999 loss: 0.01\n" * 20)
            start = time.perf_counter()
            monitor.read_log()
            return time.perf_counter() - start

        return poll

    poll = interleaved(steady_poll(large), steady_poll(small), rounds)

    def catch_up(job):
        def run():
            monitor = JobMonitor(job)
            monitor.history_end = 0  # read everything, as a widget does for its metrics
            start = time.perf_counter()
            while not monitor.caught_up:
                monitor.read_log()
            return job.run_dir.joinpath("output.log").stat().st_size / (time.perf_counter() - start)

        return run

    def cat(job):
        def run():
            start = time.perf_counter()
            subprocess.run(["cat", str(job.run_dir / "output.log")], stdout=subprocess.DEVNULL, check=True)
            return job.run_dir.joinpath("output.log").stat().st_size / (time.perf_counter() - start)

        return run

    def grep(job):
        """The same metric pulled out of the log by hand, in the C locale (grep's fastest)."""

        def run():
            start = time.perf_counter()
            subprocess.run(
                ["sh", "-c", 'grep -oE "$1" "$2" | wc -l', "sh", GREP_VALUES, str(job.run_dir / "output.log")],
                env={**os.environ, "LC_ALL": "C"},
                stdout=subprocess.DEVNULL,
                check=True,
            )
            return job.run_dir.joinpath("output.log").stat().st_size / (time.perf_counter() - start)

        return run

    def whole_log_metrics(job):
        """`jupyter-trainer metrics` / `job.metrics()`: every value of the whole log."""

        def run():
            start = time.perf_counter()
            job.metrics()
            return job.run_dir.joinpath("output.log").stat().st_size / (time.perf_counter() - start)

        return run

    sparse_job = fake_job(home, "sparse", big, sparse)
    catch_up_rounds = max(3, rounds // 5)
    dense_throughput = interleaved(catch_up(large), cat(large), catch_up_rounds)
    sparse_throughput = interleaved(catch_up(sparse_job), cat(sparse_job), catch_up_rounds)
    dense_grep = interleaved(catch_up(large), grep(large), catch_up_rounds)
    sparse_grep = interleaved(catch_up(sparse_job), grep(sparse_job), catch_up_rounds)
    dense_metrics = interleaved(whole_log_metrics(large), grep(large), catch_up_rounds)
    sparse_metrics = interleaved(whole_log_metrics(sparse_job), grep(sparse_job), catch_up_rounds)
    gb = f"{big / 2**30:.3g} GB"
    return [
        Comparison(f"Job.logs(tail=20): {gb} log vs 8 KB", *tail, "<= 1.2x", 1.2),
        Comparison(f"widget poll (20 new lines): {gb} log vs 8 KB", *poll, "<= 1.2x", 1.2),
        Comparison("widget catch-up vs cat, a loss on every line", *dense_throughput, "for scale", None, unit="B/s", higher_is_better=True),
        Comparison("widget catch-up vs cat, a loss every 100 lines", *sparse_throughput, "for scale", None, unit="B/s", higher_is_better=True),
        Comparison("widget catch-up vs grep -oE, a loss on every line", *dense_grep, ">= 1x", 1.0, unit="B/s", higher_is_better=True),
        Comparison("widget catch-up vs grep -oE, a loss every 100 lines", *sparse_grep, ">= 1x", 1.0, unit="B/s", higher_is_better=True),
        Comparison("whole-log metrics vs grep -oE, a loss on every line", *dense_metrics, ">= 1x", 1.0, unit="B/s", higher_is_better=True),
        Comparison("whole-log metrics vs grep -oE, a loss every 100 lines", *sparse_metrics, ">= 1x", 1.0, unit="B/s", higher_is_better=True),
    ]


# 3 -------------------------------------------------------------------------------
# %load_ext in a fresh kernel: load_time.py


# 4 and 5 ---------------------------------------------------------------------------

POLLER_SECONDS = 30.0  # how long the poller's share of a core is measured (six lines of each job)
QUIET_JOB = "import time\nfor i in range(100000):\n    print('step', i, 'loss:', 1 / (i + 1), flush=True)\n    time.sleep(5)\n"


def start_watching(count: int, script: str, interval: float | None = None):
    import comm

    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.view.job_widget import JobWidget
    from jupyter_trainer.view.poller import Poller

    comm.create_comm = lambda *a, **k: comm.DummyComm(*a, **k)
    poller = Poller()
    jobs = []
    work = tempfile.mkdtemp(prefix="jt-bench-work-")
    for index in range(count):
        spec = build_spec(script, host=True, image=None, container=None, workdir=work, gpus=None)
        job = submit_detached(spec, name=f"w{index}-{time.monotonic_ns()}").job
        jobs.append(job)
        poller.watch(JobWidget(job))
    return poller, jobs


def bench_cell_while_watching(rounds: int) -> list[Comparison]:
    """The same 20 running jobs in both arms; only whether their widgets are being polled differs."""
    fresh_home()
    ip = shell()
    poller, jobs = start_watching(20, QUIET_JOB)
    widgets = list(poller.widgets)

    def cells(watching: bool):
        def run():
            if watching:
                poller.watch(*widgets)
            else:
                with poller._lock:
                    poller.widgets = []  # its thread ends at its next tick
            time.sleep(0.5)  # let the poller settle into its rhythm (or stop)
            count, start = 0, time.perf_counter()
            while time.perf_counter() - start < 1.0:
                ip.run_cell("x = 1", store_history=False, silent=True)
                count += 1
            return (time.perf_counter() - start) / count

        return run

    try:
        watched, quiet = interleaved(cells(True), cells(False), rounds)
        poller.watch(*widgets)
        # the views just watched again first catch up with what their jobs printed meanwhile: the
        # share is that of the quiet polling after it
        time.sleep(5)
        cpu_start, wall_start = time.process_time(), time.monotonic()
        time.sleep(POLLER_SECONDS)  # the jobs print a line every 5 s: mostly quiet
        cpu = (time.process_time() - cpu_start) / (time.monotonic() - wall_start)
    finally:
        for job in jobs:
            job.stop()
    return [
        Comparison("trivial cell: 20 watched jobs vs none", watched, quiet, "<= 1.05x", 1.05),
        Comparison("poller CPU, 20 quiet jobs (share of a core)", cpu, 0.01, "< 1% of a core", 1.0, unit="core"),
    ]


def rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def bench_memory(lines: int) -> Comparison:
    fresh_home()
    script = f"import sys\nw = sys.stdout.write\nfor i in range({lines}):\n    w(f'step {{i}} loss: {{1 / (i + 1):.6f}}\\n')\n"
    import gc

    gc.collect()
    before = rss()
    poller, (job,) = start_watching(1, script)
    peak = before
    while poller.widgets:
        peak = max(peak, rss())
        time.sleep(0.2)
    peak = max(peak, rss())
    growth = peak - before
    return Comparison(f"kernel memory growth, watched job printing {lines:,} lines", growth / 2**20, 20.0, "< 20 MB", 1.0, unit="MB")


# 6 -------------------------------------------------------------------------------


def bench_sagemaker_follow(seconds: float) -> list[Comparison]:
    """Two identical training jobs on a moto server: one followed by our widget, one by the SDK's
    logs_for_job(wait=True), side by side; API calls counted per follower thread."""
    import collections
    import contextlib
    import datetime as dt
    import io

    import boto3
    import botocore.client
    import comm

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from moto_sagemaker import REGION, MotoSageMaker

    from jupyter_trainer.backends.sagemaker.sdk import TELEMETRY_OFF, quiet_sdk
    from jupyter_trainer.core.record import JobRecord, Status
    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.view.job_widget import JobWidget

    home = fresh_home()
    server = MotoSageMaker()
    os.environ.update(
        AWS_ENDPOINT_URL=server.start(), AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true",
    )  # fmt: skip
    comm.create_comm = lambda *a, **k: comm.DummyComm(*a, **k)
    calls: collections.Counter = collections.Counter()
    original = botocore.client.BaseClient._make_api_call

    def counting(client, operation, params):
        calls[threading.current_thread().name] += 1
        return original(client, operation, params)

    botocore.client.BaseClient._make_api_call = counting
    sm, logs = boto3.client("sagemaker"), boto3.client("logs")
    logs.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    for name in ("ours-job", "sdk-job"):
        sm.create_training_job(
            TrainingJobName=name, RoleArn="arn:aws:iam::123456789012:role/R",
            AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": "s3://b/out"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 10},
            StoppingCondition={"MaxRuntimeInSeconds": 3600},
        )  # fmt: skip
        server.set_status(name, "InProgress", "Training")
        for host in ("algo-1", "algo-2"):
            logs.create_log_stream(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=f"{name}/{host}")
    JobStore(home).create(JobRecord(name="ours", backend="sagemaker", status=Status.RUNNING,
                                    runtime={"training_job_name": "ours-job", "region": REGION, "mode": "remote"}))  # fmt: skip
    expected = []

    def writer():
        start, step = time.time(), 0
        while time.time() - start < seconds:
            stamp = int(time.time() * 1000)
            for offset, host in enumerate(("algo-1", "algo-2")):
                message = f"{host} step {step} loss: {1 / (step + 1):.4f}"
                expected.append(message)
                for name in ("ours-job", "sdk-job"):
                    logs.put_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=f"{name}/{host}",
                                        logEvents=[{"timestamp": stamp + offset, "message": message}])  # fmt: skip
            step += 1
            time.sleep(0.5)
        for name in ("ours-job", "sdk-job"):
            server.set_status(name, "Completed", training_end_time=dt.datetime.now(dt.timezone.utc))

    sdk_output = io.StringIO()

    def sdk():
        with quiet_sdk():
            import sagemaker

            session = sagemaker.Session(boto_session=boto3.Session(), sagemaker_config=TELEMETRY_OFF)
            session.logs_for_job("sdk-job", wait=True, poll=10)

    def ours():
        view = JobWidget(Job.load("ours"))
        while view.poll(time.monotonic()):
            time.sleep(0.25)

    threads = [threading.Thread(target=target, name=target.__name__) for target in (writer, sdk, ours)]
    started = time.monotonic()
    with contextlib.redirect_stdout(sdk_output):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    minutes = (time.monotonic() - started) / 60
    botocore.client.BaseClient._make_api_call = original
    ours_lines = Job.load("ours").logs().splitlines()
    server.stop()
    sdk_lines = [line for line in sdk_output.getvalue().splitlines() if " step " in line]
    ours_ok = ours_lines == expected
    sdk_ok = len(sdk_lines) == len(expected)
    label = f"SageMaker follow: API calls/min vs logs_for_job (lines exact: ours {ours_ok}, SDK {sdk_ok})"
    return [Comparison(label, calls["ours"] / minutes, calls["sdk"] / minutes, "<= 1.0x, no line lost", 1.0, unit="calls/min")]


# prints 1,000 lines a second for the given seconds, then "done N"
PRINTER = """
import time
start, step = time.time(), 0
while time.time() - start < {seconds}:
    for _ in range(100):
        print(f"step {{step}} loss: {{1 / (step + 1):.6f}}")
        step += 1
    time.sleep(0.1)
print("done", step)
"""


def complete(lines: list[str]) -> bool:
    """Whether PRINTER's output is all there, each line once and in order."""
    if not lines or not lines[-1].startswith("done "):
        return False
    count = int(lines[-1].split()[1])
    return lines[:-1] == [f"step {step} loss: {1 / (step + 1):.6f}" for step in range(count)]


def bench_remote_follow(seconds: float) -> list[Comparison]:
    """A job on a remote host (a real second engine over real SSH: tests/remote_host.py) that prints
    1,000 lines a second, followed by our widget at its four polls a second, against `docker logs -f` of
    a container printing the same; then a quiet job's polls. Counted on the wire, by a TcpMeter in front
    of the host's sshd for each arm: bytes both ways, and round trips."""
    import contextlib
    import io

    import comm
    import docker

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from remote_host import RemoteHost
    from tcp_meter import TcpMeter

    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.view.job_widget import JobWidget

    comm.create_comm = lambda *a, **k: comm.DummyComm(*a, **k)
    fresh_home()
    remote = RemoteHost()
    meters: list[TcpMeter] = []
    try:
        remote.start()
        remote.load_image(IMAGE)
        os.environ.update(remote.environ())  # the laptop's SSH setup: the host's key and known_hosts
        ours, theirs = TcpMeter(remote.port), TcpMeter(remote.port)
        meters += [ours, theirs]
        known_hosts = remote.home / ".ssh" / "known_hosts"
        keys = known_hosts.read_text().splitlines()
        known_hosts.write_text("\n".join(keys + [key.replace(f"[127.0.0.1]:{remote.port} ", f"[127.0.0.1]:{m.port} ") for m in meters for key in keys]) + "\n")
        ip = shell()

        def submit(name: str, script: str) -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                ip.run_cell(f"%%train_detached --docker-host ssh://root@127.0.0.1:{ours.port} --image {IMAGE} --name {name} --no-widget\n{script}")

        def follow(name: str) -> int:
            view, polls = JobWidget(Job.load(name)), 0
            while view.poll(time.monotonic()):
                polls += 1
                time.sleep(0.25)
            return polls

        # warm: the container exists, and each arm's client has connected, before anything is counted
        submit("warm", "print('warm')\n")
        follow("warm")
        theirs_client = docker.DockerClient(base_url=f"ssh://root@127.0.0.1:{theirs.port}", timeout=60)
        script = PRINTER.format(seconds=seconds)
        submit("loud", script)
        ours.reset()
        container = theirs_client.containers.run(IMAGE, ["python3", "-u", "-c", script], detach=True)
        theirs.reset()
        streamed: list[bytes] = []
        results: dict[str, object] = {}
        threads = [
            threading.Thread(target=lambda: results.update(polls=follow("loud"))),
            threading.Thread(target=lambda: streamed.extend(container.logs(stream=True, follow=True))),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ours_up, ours_down, ours_trips = ours.snapshot()
        theirs_up, theirs_down, theirs_trips = theirs.snapshot()
        polls = results["polls"]
        ours_lines, theirs_lines = Job.load("loud").logs().splitlines(), b"".join(streamed).decode().splitlines()
        exact = complete(ours_lines) and complete(theirs_lines)
        container.remove(force=True)

        submit("quiet", f"import time\nprint('started', flush=True)\ntime.sleep({seconds})\n")
        ours.reset()
        quiet_polls = follow("quiet")
        _, quiet_down, quiet_trips = ours.snapshot()
        theirs_client.close()
    finally:
        for meter in meters:
            meter.close()
        remote.close()
    label = f"remote follow, 1,000 lines/s over SSH: bytes on the wire vs docker logs -f (lines exact: {exact})"
    return [
        Comparison(label, ours_up + ours_down, theirs_up + theirs_down, "<= 1.5x", 1.5, unit="B"),
        Comparison(f"  same: round trips per poll ({polls} polls; docker logs -f made {theirs_trips})", ours_trips / polls, 1.0, "<= 1 per poll", 1.0, unit="RT"),
        Comparison(f"quiet remote job: round trips per poll ({quiet_polls} polls, {quiet_down} B down)", quiet_trips / quiet_polls, 1.0, "<= 1 per poll", 1.0, unit="RT"),
    ]


def bench_table(rounds: int, jobs: int = 200) -> Comparison:
    """One refresh of the live jobs table (a scan of the store, rows brought up to date) against what
    the text table (`--no-widget`) does: read every record and bring the running ones up to date."""
    import comm
    from comm.base_comm import BaseComm

    from jupyter_trainer.backends import Backends
    from jupyter_trainer.backends.fake import FakeBackend
    from jupyter_trainer.core.record import Observation
    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.jobs.job import refreshed_records
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.view.jobs_table import JobsTable

    class Quiet(BaseComm):
        def publish_msg(self, *args, **kwargs):
            pass

    comm.create_comm = lambda *a, **k: Quiet(*a, **k)
    home = fresh_home()
    fake = FakeBackend()
    backends, store = Backends(fake=fake), JobStore(home)
    for index in range(jobs):
        job = submit_detached(DetachedSpec(script=f"print({index})", backend="fake", workdir="/"), name=f"j{index}", store=store, backends=backends).job
        write_log(job.run_dir / "output.log", 64 << 10)
        running = index % 20 == 0  # 10 of 200 still running
        fake.observations[job.name] = Observation(alive=True, started=True) if running else Observation(alive=False, exit_code=0)
    refreshed_records(store, backends=backends)
    table = JobsTable(store, backends=backends)

    def ours():
        for row in table.rows.values():
            row.checked_at = float("-inf")  # every running job is due
        table.scan(time.time())

    candidate, baseline = interleaved(timed(ours), timed(lambda: refreshed_records(store, backends=backends)), rounds)
    return Comparison(f"%train_jobs live table: one refresh of {jobs} jobs (10 running) vs the text table's reading", candidate, baseline, "<= 1.5x", 1.5)


# 9 -------------------------------------------------------------------------------

# A run that prints per-class metrics: each epoch its steps' losses, then one accuracy per class (a
# name each: METRIC is class_{k}_acc; class_00000_acc gives a log as long with one name), then the
# validation's; "ready" once it is all written, then it waits to be watched.
FLOOD_JOB = """
import sys, time
w = sys.stdout.write
step = 0
for epoch in range({epochs}):
    lines = []
    for _ in range({steps}):
        step += 1
        lines.append(f"epoch {{epoch}} step {{step}} loss: {{1 / step:.5f}}\\n")
    lines += [f"{metric}: {{(k * 7 + epoch) % 100 / 100}}\\n" for k in range({names})]
    lines.append(f"val_loss: {{1 / (epoch + 1):.5f}} val_acc: {{epoch / {epochs}}}\\n")
    w("".join(lines))
w("ready\\n")
sys.stdout.flush()
time.sleep(600)
"""

# what the kernel runs to time one drawing of the view's charts (what each chart update costs the
# poller), and to say how far it has read the log
TIME_A_DRAWING = """
import contextlib, time
from jupyter_trainer.view.poller import poller
_view = poller().widgets[0]
with getattr(_view, "_lock", contextlib.nullcontext()):
    _start = time.perf_counter()
    _view.render_plot(_view.monitor.snapshot(time.time()))
    print(time.perf_counter() - _start, _view.monitor.cursor.offset / max(1, _view.monitor.history_end))
"""
WATCHED = "from jupyter_trainer.view.poller import poller; print(len(poller().widgets))"


def log_ends_with(path: Path, end: bytes) -> bool:
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - len(end)))
        return handle.read() == end


def watch_a_metric_flood(names: int, seconds: float, finish: float, metric: str = "class_{k}_acc", epochs: int = 10, steps: int = 100) -> dict:
    """A host job whose log holds `names` metric names (see FLOOD_JOB), attached to in a real kernel
    (`%train_attach`): what the kernel sends in the view's first `seconds`, counted on the wire; then,
    the job stopped, the view's copy saved in the notebook and its metrics.json once it has read the
    whole log (waiting `finish` seconds at most), and the kernel's peak memory."""
    from kernel_meter import KernelMeter, displayed_html

    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.jobs.submit import submit_detached

    fresh_home()
    work = tempfile.mkdtemp(prefix="jt-bench-work-")
    script = FLOOD_JOB.format(names=names, epochs=epochs, steps=steps, metric=metric)
    spec = build_spec(script, host=True, image=None, container=None, workdir=work, gpus=None)
    job = submit_detached(spec, name=f"flood{names}").job
    log, cache = job.run_dir / "output.log", job.run_dir / "metrics.json"
    deadline = time.monotonic() + 300
    while not (log.exists() and log_ends_with(log, b"ready\n")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the flood job never wrote its log ({log})")
        time.sleep(0.2)
    meter = KernelMeter()
    try:
        meter.run("%load_ext jupyter_trainer")
        where = meter.run("import jupyter_trainer; print(jupyter_trainer.__file__)").strip()
        before, _ = meter.memory()
        start = time.monotonic()
        meter.execute(f"%train_attach {job.name}")
        time.sleep(seconds)
        first = [m for m in list(meter.messages) if start <= m.at <= start + seconds]
        drawing, read = map(float, meter.run(TIME_A_DRAWING).split()[-2:])
        Job.load(job.name).stop()
        deadline, finished = time.monotonic() + finish, False
        while not finished and time.monotonic() < deadline:
            time.sleep(1)
            finished = meter.run(WATCHED).strip() == "0"  # the poller let the view go: all is read
        time.sleep(1)  # its last messages
        _, peak = meter.memory()
        saved = max((len(displayed_html(m).encode()) for m in list(meter.messages) if "jt-saved" in displayed_html(m)), default=0)
    finally:
        meter.close()
        with contextlib.suppress(Exception):
            Job.load(job.name).stop()
    return {
        "code": where,
        "log": log.stat().st_size,
        "traffic": sum(m.size for m in first),
        "messages": len(first),
        "largest": max((m.size for m in first), default=0),
        "read at 12 s": read,
        "drawing": drawing,
        "finished": finished,
        "saved": saved,
        "cache": cache.stat().st_size if cache.exists() else 0,
        "memory": peak - before,
    }


def bench_metric_flood(seconds: float, counts: list[int], finish: float) -> list[Comparison]:
    """Views of runs that print thousands of metric names: bounded traffic, copy, cache and memory;
    and the kernel's memory against a log as long with a single name in their place."""
    results, found = [], {}
    for names in counts:
        found[names] = seen = watch_a_metric_flood(names, seconds, finish)
        print(f"flood of {names:,} names: {seen}", file=sys.stderr)
        label = f"{names:,} metric names ({seen['log'] / 2**20:.1f} MB log, {seen['read at 12 s']:.0%} read at {seconds:g} s)"
        end = "once it has read the whole log" if seen["finished"] else f"NOT done reading after {finish:g} s"
        results += [
            Comparison(f"{label}: view traffic in its first {seconds:g} s ({seen['messages']} messages)", seen["traffic"] / 2**20, 2.0, "<= 2 MB", 1.0, unit="MB"),
            Comparison("  same: the largest single message", seen["largest"] / 2**10, 512.0, "<= 512 KB", 1.0, unit="KB"),
            Comparison("  same: drawing one update of the charts", seen["drawing"], 0.05, "<= 50 ms", 1.0),
            Comparison(f"  same: the view's copy saved in the notebook, {end}", seen["saved"] / 2**20, 1.0, "< 1 MB", 1.0, unit="MB"),
            Comparison("  same: metrics.json", seen["cache"] / 2**10, 256.0, "<= 256 KB", 1.0, unit="KB"),
            Comparison("  same: the kernel's memory growth (peak)", seen["memory"] / 2**20, 20.0, "for scale", None, unit="MB"),
        ]
    most = max(counts)
    single = watch_a_metric_flood(most, seconds, finish, metric="class_00000_acc")
    print(f"the same log with one name: {single}", file=sys.stderr)
    results.append(
        Comparison(
            f"kernel memory growth: {most:,} names vs one name in a log as long", found[most]["memory"] / 2**20,
            single["memory"] / 2**20, "<= 1.5x (flat)", 1.5, unit="MB",
        )  # fmt: skip
    )
    return results


# the tail as a terminal shows it -------------------------------------------------------------------


def previous_tail_lines(source, count: int) -> list[str]:
    """The tail before it was replayed on a terminal's screen: the last lines, each by its last \r
    redraw, escapes removed (the baseline of bench_terminal_tail)."""
    from jupyter_trainer.logs.reading import _last_raw_lines, clean_line

    lines, _, _, _ = _last_raw_lines(source, count, 4096, 1 << 20)
    text = b"\n".join(lines).decode("utf-8", errors="replace")
    return [clean_line(line) for line in text.split("\n")] if lines else []


def bench_terminal_tail(rounds: int, size: int) -> list[Comparison]:
    """`tail_lines` (replayed on a screen) vs the tail before it, on a log of one endless tqdm bar
    (\r redraws, never a newline) and on a log of nested bars (an inner bar that steps down with
    \n and back up with ESC[A at every stroke)."""
    from jupyter_trainer.backends.base import FileLogSource
    from jupyter_trainer.logs.reading import tail_lines

    home = fresh_home()
    one_line = home / "one-line.log"
    redraw = "".join(f"\r{i:3d}%|{'█' * (i // 10)}{' ' * (10 - i // 10)}| {i}/100 [00:01<00:02, 9.87it/s]" for i in range(100))
    write_log(one_line, size, redraw.encode())
    nested = home / "nested.log"
    stroke = "".join(f"\n\rbatch: {i:3d}%|{'█' * (i // 10)}| {i}/100 [00:00<00:00, 99.9it/s]\x1b[A" for i in range(100))
    epoch = "\repoch:  50%|█████     | 5/10 [00:10<00:10, 1.00s/it]" + stroke + "\n\r" + " " * 60 + "\x1b[A\repoch 5 loss=0.1\n"
    write_log(nested, size, epoch.encode())
    results = []
    for what, path in ((f"one-line {size / 2**20:.0f} MB log", one_line), (f"nested-bar {size / 2**20:.0f} MB log", nested)):
        source = FileLogSource(path)
        for count in (20, 200):
            timing = interleaved(timed(lambda: tail_lines(source, count)), timed(lambda: previous_tail_lines(source, count)), rounds)
            results.append(Comparison(f"tail_lines({count}) on a terminal's screen vs before: {what}", *timing, "<= 1.2x" if what.startswith("one") else "for scale", 1.2 if what.startswith("one") else None))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--log-size", type=int, default=1 << 30, help="bytes in the big log (default 1 GiB)")
    parser.add_argument("--lines", type=int, default=10_000_000, help="lines the memory benchmark's job prints")
    parser.add_argument("--sagemaker-seconds", type=float, default=60, help="how long the followed jobs print")
    parser.add_argument("--remote-seconds", type=float, default=30, help="how long the remote jobs print or wait")
    parser.add_argument("--flood-seconds", type=float, default=12, help="how long the metric-flood views are watched")
    parser.add_argument("--flood-names", type=int, nargs="*", default=[5_000, 50_000], help="metric names in each flood log")
    parser.add_argument("--flood-finish", type=float, default=300, help="seconds a flood view may take to read its whole log")
    parser.add_argument("--lag-lines", type=int, default=60, help="lines the log-lag benchmark's jobs print (a random 0.1-0.6 s apart)")
    parser.add_argument("--only", nargs="*", default=["submit", "logs", "terminal", "load", "cell", "lag", "memory", "sagemaker", "table", "remote", "flood", "slurm"])
    parser.add_argument("--terminal-log-size", type=int, default=200 << 20, help="bytes in the terminal tail's logs (default 200 MiB)")
    args = parser.parse_args()
    results: list[Comparison] = []
    if "load" in args.only:
        from load_time import bench_load

        results += bench_load(args.rounds)
    if "submit" in args.only:
        results.append(bench_submit(args.rounds))
    if "logs" in args.only:
        results += bench_logs(args.rounds, args.log_size)
    if "terminal" in args.only:
        results += bench_terminal_tail(args.rounds, args.terminal_log_size)
    if "cell" in args.only:
        results += bench_cell_while_watching(max(5, args.rounds // 3))
    if "lag" in args.only:
        from lag import bench_lag, bench_remote_lag

        fresh_home()
        results += bench_lag(args.lag_lines, IMAGE)
        fresh_home()
        results += bench_remote_lag(args.lag_lines, IMAGE)
    if "memory" in args.only:
        results.append(bench_memory(args.lines))
    if "sagemaker" in args.only:
        results += bench_sagemaker_follow(args.sagemaker_seconds)
    if "table" in args.only:
        results.append(bench_table(args.rounds))
    if "remote" in args.only:
        results += bench_remote_follow(args.remote_seconds)
    if "flood" in args.only:
        results += bench_metric_flood(args.flood_seconds, args.flood_names, args.flood_finish)
    if "slurm" in args.only:
        from slurm_bench import bench_slurm

        results += bench_slurm(args.rounds)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
