"""Lines with containers: Docker jobs with --gpus N wait their turn in the lines of the engine's
machine, the same lines as its --host jobs, and a --restarts job whose container restarts takes
its GPUs again, after whoever got them while it was down.

Real containers on the tests' engine, and on a private engine for the restart. No GPU exists here:
the GPUs handed out are a declared pool (JUPYTER_TRAINER_GPUS), and an engine without an NVIDIA
runtime gives the containers none (the pool is a line alone).
"""

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import TEST_IMAGE, wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.record import Status
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.errors import InvalidOption
from jupyter_trainer.jobs.job import get_job
from jupyter_trainer.jobs.submit import submit_detached

pytestmark = pytest.mark.docker

# Says which GPUs it sees, then holds them until the test lets it go (a file in its working directory).
HOLD = """
import os, sys, time
print("gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
while not os.path.exists("release-" + sys.argv[1]):
    time.sleep(0.05)
print("released", flush=True)
"""


def submit(name, workdir, where, gpus="1", script=HOLD, args=None, **options):
    spec = build_spec(textwrap.dedent(script), workdir=str(workdir), gpus=gpus, args=args or (name,), **where, **options)
    return submit_detached(spec, name=name).job


def in_container(image):
    return {"host": False, "image": image, "container": None}


ON_HOST = {"host": True, "image": None, "container": None}


def status(name):
    return get_job(name).status


def gpus_of(job):
    wait_for(lambda: "gpus " in job.logs(), what=f"{job.name} to start")
    return job.logs().split("gpus ", 1)[1].split()[0]


def status_json(name):
    shown = subprocess.run([sys.executable, "-m", "jupyter_trainer", "status", name, "--json"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_jobs_in_a_container_and_on_the_host_wait_in_one_line(docker_image, docker_client, workdir, home, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-1")
    # submitted one after the other, they take their turns in that order, whichever waiter starts first
    first = submit("first", workdir, in_container(docker_image))
    second = submit("second", workdir, ON_HOST)
    third = submit("third", workdir, in_container(docker_image))
    held = {gpus_of(first), gpus_of(second)}
    assert held == {"0", "1"}
    wait_for(lambda: "waiting for 1 GPU; next in line" in get_job("third").reason, what="the third to wait")
    assert status("third") is Status.PENDING and "gpus " not in third.logs()
    assert status_json("third")["position"] == 1
    (workdir / "release-second").touch()  # the host job lets its GPU go: the container job takes it
    assert get_job("second").wait(timeout=60) is Status.COMPLETED
    assert gpus_of(third) == ({"0", "1"} - {gpus_of(first)}).pop()
    assert status_json("third")["gpus"] == [int(gpus_of(third))]
    container = docker_client.containers.get(get_job("third").record.runtime["container_id"])
    assert container.labels["jupyter_trainer.gpus"] == "handed-out"
    assert container.labels["jupyter_trainer.lines"] == str(home.parent / "lines")
    assert container.attrs["HostConfig"]["DeviceRequests"] in (None, [])  # a pool, and no NVIDIA runtime: no devices asked
    for name in ("first", "third"):
        (workdir / f"release-{name}").touch()
        assert get_job(name).wait(timeout=60) is Status.COMPLETED


def test_a_container_made_without_the_lines_is_refused_and_nothing_recorded(docker_image, workdir, home, monkeypatch):
    plain = submit("plain", workdir, in_container(docker_image), gpus=None, script="print('hi')\n")
    assert plain.wait(timeout=60) is Status.COMPLETED
    with pytest.raises(InvalidOption, match="does not mount this machine's lines") as refused:
        submit("queued", workdir, in_container(docker_image), gpus=None, queue="nightly")
    assert "docker rm -f" in refused.value.hint
    assert JobStore(home).runs("queued") == []


def test_asking_a_container_for_more_gpus_than_the_pool_is_one_line(docker_image, workdir, home, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0,1")
    with pytest.raises(InvalidOption, match=r"--gpus 3 asks for more GPUs than this machine offers: 2 \(0, 1"):
        submit("greedy", workdir, in_container(docker_image), gpus="3")
    assert JobStore(home).runs("greedy") == []


STEPS = """
import json, os, sys, time
print("gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
done = json.load(open("ckpt.json"))["done"] if os.path.exists("ckpt.json") else []
for step in range(len(done), 12):
    time.sleep(0.3)
    print("step", step, flush=True)
    done.append(step)
    with open("ckpt.tmp", "w") as handle:
        json.dump({"done": done}, handle)
    os.replace("ckpt.tmp", "ckpt.json")
print("done", flush=True)
"""


def test_a_restarted_job_takes_its_gpus_again_after_the_job_that_got_them_meanwhile(private_docker, workdir, home, monkeypatch):
    """The engine restarts under a --restarts job holding both GPUs: they are released at once (its
    processes are gone), the host job waiting behind it takes one, and the job, started again by
    its container's keeper, waits for both until that one lets it go."""
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-1")
    held = submit("held", workdir, in_container(TEST_IMAGE), gpus="2", script=STEPS, args=(), restarts=1)
    wait_for(lambda: "step 2\n" in held.logs(), timeout=60, what="step 2")
    behind = submit("behind", workdir, ON_HOST)
    wait_for(lambda: "waiting for 1 GPU" in get_job("behind").reason, what="the host job to wait")
    private_docker.restart()
    assert gpus_of(behind) in ("0", "1")  # took a GPU the stopped container let go
    wait_for(lambda: "waiting for 2 GPUs" in get_job("held").reason, timeout=60, what="the restarted job to wait for its GPUs")
    assert get_job("held").status is Status.PENDING
    (workdir / "release-behind").touch()
    assert get_job("held").wait(timeout=120) is Status.COMPLETED
    log = get_job("held").logs()
    assert log.count("gpus 0,1") == 2, log  # both starts saw both GPUs
    assert json.loads((workdir / "ckpt.json").read_text())["done"] == list(range(12))
    assert status_json("held")["restarts"] == 1 and status_json("held")["gpus"] == [0, 1]
