"""What a running job uses (CPU, memory, GPUs), read from the real engine and the real processes."""

import json
import os
import subprocess
import sys

import pytest
from conftest import IN_CI, wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.resources import Usage, UsageHistory, parse_nvidia_smi
from jupyter_trainer.jobs.job import get_job
from jupyter_trainer.jobs.submit import submit_detached

MIB = 1 << 20

# holds 120 MiB and keeps one core busy until told to stop
HUNGRY = """import os, time
block = bytearray(120 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("holding", flush=True)
while not os.path.exists("enough"):
    sum(range(10000))
"""

# An nvidia-smi stand-in: answers the one query jupyter_trainer asks, as nvidia-smi would
# (one CSV line per GPU, MiB and %), and fails on any other.
NVIDIA_SMI = """#!/bin/sh
[ "$1" = "--query-gpu=index,utilization.gpu,memory.used,memory.total" ] && [ "$2" = "--format=csv,noheader,nounits" ] || exit 6
printf '0, 87, 10240, 24576\\n1, [N/A], 512, 24576\\n'
"""


def cli(*args):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=60)


def test_a_container_jobs_memory_against_its_limit_its_cpu_and_its_gpus(docker_client, docker_image, workdir, home):
    limited = docker_client.containers.run(
        docker_image, ["sleep", "infinity"], detach=True, init=True, mem_limit="256m", memswap_limit="256m",
        volumes={str(workdir): {"bind": "/workspace", "mode": "rw"}}, working_dir="/workspace",
    )  # fmt: skip
    try:
        limited.exec_run(["sh", "-c", f"cat > /usr/local/bin/nvidia-smi <<'EOF'\n{NVIDIA_SMI}EOF\nchmod +x /usr/local/bin/nvidia-smi"])
        spec = build_spec(HUNGRY, host=False, image=None, container=limited.name, workdir=str(workdir), gpus=None)
        job = submit_detached(spec, name="hungry").job
        wait_for(lambda: "holding" in job.logs(), timeout=60, what="the job to hold its memory")
        status = cli("status", "hungry", "--json")
        assert status.returncode == 0, status.stderr
        resources = json.loads(status.stdout)["resources"]
        assert resources["scope"] == "container"
        assert resources["memory_limit_bytes"] == 256 * MIB
        assert 120 * MIB <= resources["memory_bytes"] < 256 * MIB
        assert 10 <= resources["cpu_percent"] <= 200  # one busy core (of two here, shared with whatever else runs)
        assert resources["gpus"] == [
            {"index": 0, "utilization_percent": 87.0, "memory_bytes": 10240 * MIB, "memory_total_bytes": 24576 * MIB},
            {"index": 1, "utilization_percent": None, "memory_bytes": 512 * MIB, "memory_total_bytes": 24576 * MIB},
        ]
        text = cli("status", "hungry").stdout
        assert "of 256.0 MiB" in text and "gpu 0" in text and "87% · 10.0 GiB of 24.0 GiB" in text
        (workdir / "enough").write_text("")
        job.wait(timeout=60)
        assert "resources" not in json.loads(cli("status", "hungry", "--json").stdout)  # nothing once it has ended
    finally:
        limited.remove(force=True)


def test_a_host_jobs_processes(home, workdir):
    job = submit_detached(build_spec(HUNGRY, host=True, image=None, container=None, workdir=str(workdir), gpus=None), name="host-hungry").job
    try:
        wait_for(lambda: "holding" in job.logs(), timeout=60, what="the job to hold its memory")
        usage = get_job("host-hungry").usage(interval=1.0)
        assert usage.scope == "processes" and usage.memory_bytes >= 120 * MIB
        assert 10 <= usage.cpu_percent <= 200 and usage.memory_limit_bytes > usage.memory_bytes
    finally:
        (workdir / "enough").write_text("")
        job.wait(timeout=60)


def test_the_view_shows_usage_with_sparklines(store, fake_backend, backends, monkeypatch):
    import os

    import comm
    from comm.base_comm import BaseComm

    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.view import monitor
    from jupyter_trainer.view.job_widget import JobWidget

    class Quiet(BaseComm):
        def publish_msg(self, *args, **kwargs):
            pass

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: Quiet(*a, **k))
    monkeypatch.setattr(monitor, "USAGE_INTERVAL", 0)
    job = submit_detached(DetachedSpec(script="x", backend="fake", workdir=os.getcwd()), name="u", store=store, backends=backends).job
    fake_backend.observations["u"] = __import__("jupyter_trainer.core.record", fromlist=["Observation"]).Observation(alive=True, started=True)
    view = JobWidget(job)
    for second, (cpu, memory) in enumerate([(0.0, 100), (1.0, 200), (2.5, 300)]):
        fake_backend.usages["u"] = Usage("container", taken_at=float(second), cpu_seconds=cpu, memory_bytes=memory * MIB, memory_limit_bytes=1 << 30)
        view.poll(float(second))  # the look is taken on a thread of its own...
        wait_for(lambda: not view.monitor.looking_at_usage, what="the look")
    view.poll(3.0)  # ...and its reading shown at the next poll
    view.push()
    header = view.header.value
    assert "CPU 150%" in header and "memory 300.0 MiB of 1.0 GiB" in header
    assert header.count('class="jt-spark"') == 2  # cpu (two readings) and memory (three)


def test_nvidia_smi_answers_are_read_and_garbage_is_left_out():
    assert parse_nvidia_smi("0, 87, 100, 200\nNVIDIA-SMI has failed\n1, nan, [N/A], 200\n") == (
        parse_nvidia_smi("0, 87, 100, 200")[0],
        parse_nvidia_smi("1, [N/A], [N/A], 200")[0],
    )
    assert parse_nvidia_smi("") == () and parse_nvidia_smi("x, 1, 2, 3") == ()


def test_cpu_percent_is_between_looks_and_a_restart_gives_none():
    history = UsageHistory(size=3)
    assert history.add(Usage("processes", taken_at=0.0, cpu_seconds=5.0)).cpu_percent is None
    assert history.add(Usage("processes", taken_at=2.0, cpu_seconds=6.0)).cpu_percent == pytest.approx(50.0)
    assert history.add(Usage("processes", taken_at=3.0, cpu_seconds=0.5)).cpu_percent is None  # counted from zero again
    history.add(Usage("processes", taken_at=4.0, cpu_seconds=1.5))
    assert history.series()["cpu"] == [50.0, None, 100.0]  # the oldest dropped


HANGING_NVIDIA_SMI = "#!/bin/sh\nsleep 100000\n"
FLOODING_NVIDIA_SMI = "#!/bin/sh\nseq 0 6000 | sed 's/$/, 50, 1000, 2000/'\necho '1e308, 1e308, 1e308, 1e308'\n"


@pytest.mark.parametrize("program", [HANGING_NVIDIA_SMI, FLOODING_NVIDIA_SMI], ids=["hanging", "flooding"])
def test_a_jobs_own_nvidia_smi_can_neither_hang_nor_flood_us(docker_client, docker_image, workdir, home, program):
    container = docker_client.containers.run(
        docker_image, ["sleep", "infinity"], detach=True, init=True,
        volumes={str(workdir): {"bind": "/workspace", "mode": "rw"}}, working_dir="/workspace",
    )  # fmt: skip
    try:
        spec = build_spec(
            f"import os, time\nopen('/usr/local/bin/nvidia-smi', 'w').write({program!r})\nos.chmod('/usr/local/bin/nvidia-smi', 0o755)\n"
            "print('planted', flush=True)\nwhile not os.path.exists('enough'):\n    time.sleep(0.2)\n",
            host=False, image=None, container=container.name, workdir=str(workdir), gpus=None,
        )  # fmt: skip
        job = submit_detached(spec, name="planted").job
        wait_for(lambda: "planted" in job.logs(), timeout=60, what="the job to plant its nvidia-smi")
        status = subprocess.run([sys.executable, "-m", "jupyter_trainer", "status", "planted", "--json"], capture_output=True, text=True, timeout=25)
        assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
        gpus = json.loads(status.stdout)["resources"]["gpus"]
        if program is HANGING_NVIDIA_SMI:
            assert gpus == []
            # the hung nvidia-smi was killed in the container, not left behind
            wait_for(lambda: "sleep 100000" not in str(container.top()), timeout=10, what="the hung nvidia-smi to be killed")
        else:
            assert [gpu["index"] for gpu in gpus] == list(range(16))  # at most 16, each once, the absurd line left out
        (workdir / "enough").write_text("")
        job.wait(timeout=60)
    finally:
        container.remove(force=True)


def test_a_slow_look_at_usage_never_holds_up_the_views(store, fake_backend, backends, monkeypatch):
    import os
    import threading

    import comm
    from comm.base_comm import BaseComm

    from jupyter_trainer.core.record import Observation
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.view import monitor
    from jupyter_trainer.view.job_widget import JobWidget

    class Quiet(BaseComm):
        def publish_msg(self, *args, **kwargs):
            pass

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: Quiet(*a, **k))
    monkeypatch.setattr(monitor, "USAGE_INTERVAL", 0)
    released = threading.Event()
    monkeypatch.setattr(type(fake_backend), "usage", lambda self, record, run_dir: released.wait(30) and None)
    job = submit_detached(DetachedSpec(script="x", backend="fake", workdir=os.getcwd()), name="slow", store=store, backends=backends).job
    fake_backend.observations["slow"] = Observation(alive=True, started=True)
    view = JobWidget(job)
    try:
        view.poll(0.0)  # asks for a look, which does not return
        with open(job.run_dir / "output.log", "a") as log:
            log.write("still shown\n")
        view.poll(1.0)  # the view goes on meanwhile
        assert "still shown" in view.log.value and view.monitor.looking_at_usage
    finally:
        released.set()


def test_a_limit_set_above_the_jobs_own_cgroup_is_its_limit(tmp_path):
    """As under SLURM or a systemd slice: the limit is on a parent, the process in a child."""
    import os
    import pathlib

    from jupyter_trainer.core.processes import memory_limit

    v1 = pathlib.Path("/sys/fs/cgroup/memory")
    parent = (v1 if v1.is_dir() else pathlib.Path("/sys/fs/cgroup")) / f"jt-test-{os.getpid()}"
    child = parent / "step"
    try:
        child.mkdir(parents=True)
        if v1.is_dir():
            (parent / "memory.limit_in_bytes").write_text(str(512 * MIB))
        else:
            (parent.parent / "cgroup.subtree_control").write_text("+memory")
            (parent / "cgroup.subtree_control").write_text("+memory")
            (parent / "memory.max").write_text(str(512 * MIB))
    except OSError as exc:
        (pytest.fail if IN_CI else pytest.skip)(f"cannot make cgroups here: {exc}")  # CI can: never skipped there
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (child / "cgroup.procs").write_text(str(sleeper.pid))
        assert memory_limit(sleeper.pid) == 512 * MIB
    finally:
        sleeper.kill()
        sleeper.wait()
        for path in (child, parent):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except OSError:
                    __import__("time").sleep(0.1)


def test_memory_forked_workers_share_is_counted_once(home, workdir):
    script = (
        "import os, time\nblock = bytearray(100 << 20)\nfor i in range(0, len(block), 4096):\n    block[i] = 1\n"
        "for _ in range(15):\n    if os.fork() == 0:\n        time.sleep(600)\n"
        "print('forked', flush=True)\ntime.sleep(600)\n"
    )
    job = submit_detached(build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None), name="forker").job
    try:
        wait_for(lambda: "forked" in job.logs(), timeout=60, what="the workers")
        usage = get_job("forker").usage(interval=0)
        assert 100 * MIB <= usage.memory_bytes < 300 * MIB  # 16 processes of 100 MiB resident each, shared
    finally:
        job.stop()


def test_proportional_memory_is_read_now_and_then_and_moves_with_the_resident_set():
    """Reading a process's PSS makes the kernel walk its memory: it is read every PSS_SECONDS, and
    in between what the process gained (its resident set, from the stat already read) is added."""
    from jupyter_trainer.core.processes import PSS_SECONDS, ProportionalMemory

    reads = []
    clock = [1000.0]
    pss = ProportionalMemory(read=lambda pid: reads.append(pid) or 10 << 20, clock=lambda: clock[0])
    page = os.sysconf("SC_PAGE_SIZE")
    assert pss.of(4242, 7, 3000) == 10 << 20
    assert pss.of(4242, 7, 3100) == (10 << 20) + 100 * page  # grown: not read again
    assert pss.of(4242, 7, 1000) == (10 << 20) - 2000 * page  # shrunk
    assert reads == [4242]
    assert pss.of(4242, 8, 3000) == 10 << 20  # the pid reused by another process
    clock[0] += PSS_SECONDS
    assert pss.of(4242, 7, 3000) == 10 << 20  # read again
    assert pss.of(4242, 7, 3000, fresh=True) == 10 << 20  # asked fresh: read again at once
    assert reads == [4242, 4242, 4242, 4242]
    silent = ProportionalMemory(read=lambda pid: None, clock=lambda: clock[0])  # the kernel does not say: the resident set
    assert silent.of(99, 1, 5) == 5 * page


class SlowToAnswer:
    """A container whose engine read its counters a second apart, but whose answers came at once
    one after the other (or late): the CPU % is over the engine's time between its readings."""

    status = "running"
    id = "slow"

    def __init__(self):
        self.readings = iter([("2026-12-03T10:00:00.000000000Z", 5.0), ("2026-12-03T10:00:01.000000000Z", 5.5)])

    def stats(self, stream, one_shot):
        read, cpu_seconds = next(self.readings)
        return {"read": read, "cpu_stats": {"cpu_usage": {"total_usage": int(cpu_seconds * 1e9)}}, "memory_stats": {}}


def test_a_containers_cpu_is_over_the_engines_time_between_its_readings():
    from jupyter_trainer.backends.docker.usage import ContainerUsage
    from jupyter_trainer.core.resources import cpu_between

    usage, container = ContainerUsage(), SlowToAnswer()
    usage._without_gpus.add(container.id)  # no nvidia-smi asked
    first, second = usage.of(container), usage.of(container)
    assert cpu_between(first, second).cpu_percent == pytest.approx(50.0)
