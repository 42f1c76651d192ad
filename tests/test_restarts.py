"""--restarts: a job whose container's run is interrupted is started again in its container, by the
container's own keeper, up to N times; one that ends by itself or is stopped never is.

Real restarts on a private Docker engine (conftest's `private_docker`): the engine stopped and
started (live-restore off and on), `docker restart` and `docker kill` of the container, a reboot
(the engine restarted and the boot id the keeper last saw changed). No kernel, CLI or process of
the tests' follows a job while it is interrupted: only what the container does brings it back.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import TEST_IMAGE, wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.backends.docker.in_container import job_processes
from jupyter_trainer.core.record import Status
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.errors import InvalidOption
from jupyter_trainer.jobs.job import Job, get_job
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.view.job_html import header_html
from jupyter_trainer.view.monitor import JobMonitor

PLACEMENT = {"host": False, "image": TEST_IMAGE}

# Each step is checkpointed (atomically) before the next begins, and listed in the checkpoint: a job
# started again goes on from the step after the last one it finished.
STEPS = """
import json, os, sys, time
steps = int(sys.argv[1])
done = json.load(open("ckpt.json"))["done"] if os.path.exists("ckpt.json") else []
print("resuming after", len(done), "steps" if done else "", flush=True)
for step in range(len(done), steps):
    time.sleep(0.4)
    print("step", step, flush=True)
    done.append(step)
    with open("ckpt.tmp", "w") as handle:
        json.dump({"done": done}, handle)
    os.replace("ckpt.tmp", "ckpt.json")
print("done", flush=True)
"""


def submit(script, workdir, name, args=(), **options):
    spec = build_spec(textwrap.dedent(script), container=None, workdir=str(workdir), gpus=None, args=args, **PLACEMENT, **options)
    return submit_detached(spec, name=name).job


def status_json(name):
    shown = subprocess.run([sys.executable, "-m", "jupyter_trainer", "status", name, "--json"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def listed(name):
    shown = subprocess.run([sys.executable, "-m", "jupyter_trainer", "list"], capture_output=True, text=True)
    return next(line for line in shown.stdout.splitlines() if line.startswith(name + " "))


def container_of(engine, job):
    return engine.client.containers.get(job.record.runtime["container_id"])


def step_lines(log):
    return [line for line in log.splitlines() if line.startswith("step ")]


def assert_every_step_once(job, workdir, steps):
    """Every step done once (the checkpoint says so) and printed, in order, none skipped: a step
    printed just before an interruption, and not yet in the checkpoint, is printed again once."""
    printed = step_lines(job.logs())
    assert [line for index, line in enumerate(printed) if index == 0 or line != printed[index - 1]] == [f"step {i}" for i in range(steps)], job.logs()
    assert json.loads((workdir / "ckpt.json").read_text())["done"] == list(range(steps))


def wait_for_step(job, step, timeout=60):
    wait_for(lambda: f"step {step}\n" in job.logs(), timeout=timeout, what=f"step {step}")


# -- interrupted, and started again ------------------------------------------------------


def test_engine_restart_starts_the_job_again(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "ckpt", args=("30",), restarts=2)
    wait_for_step(job, 3)
    engine.restart()  # live-restore off: the engine stops the container, and starts it again
    # nothing of ours has looked: the container's keeper started it again by itself
    wait_for(lambda: job.logs().count("resuming after") == 2, what="the job to start again")
    back = get_job("ckpt")
    assert back.status is Status.RUNNING and back.reason == ""
    assert listed("ckpt").split()[3:6] == ["running", "(restart", "1)"], listed("ckpt")
    monitor = JobMonitor(Job.load("ckpt"))
    monitor.start()
    header = header_html(monitor.snapshot(time.time()))
    assert "running (restart 1)" in header and "restart 1 of 2: the container stopped when the Docker engine restarted" in header
    assert back.wait(timeout=120) is Status.COMPLETED
    assert_every_step_once(back, workdir, 30)
    log = back.logs()
    assert log.count("----- jupyter_trainer: started again after its container restarted (restart 1 of 2) at ") == 1, log
    assert log.splitlines()[-1] == "done"
    shown = status_json("ckpt")
    assert shown["restarts"] == 1 and shown["exit_code"] == 0
    facts = get_job("ckpt").backend_impl().describe_facts(get_job("ckpt").record)
    assert any("restart 1 of 2: the container stopped when the Docker engine restarted" in fact for fact in facts), facts


def test_two_restarts_then_completes_with_every_step_once(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "twice", args=("24",), restarts=2)
    wait_for_step(job, 3)
    engine.restart()
    wait_for(lambda: "restart 1 of 2" in job.logs(), what="the first start again")
    wait_for_step(job, 8)
    container_of(engine, job).restart(timeout=2)  # docker restart
    assert job.wait(timeout=120) is Status.COMPLETED
    assert_every_step_once(job, workdir, 24)
    assert status_json("twice")["restarts"] == 2
    facts = job.backend_impl().describe_facts(job.record)
    assert any("restart 2 of 2: the container was restarted (docker restart)" in fact for fact in facts), facts


def test_live_restore_keeps_the_job_without_a_restart(private_docker, workdir, home):
    engine = private_docker
    engine.restart("--live-restore")
    job = submit(STEPS, workdir, "live", args=("12",), restarts=2)
    wait_for_step(job, 2)
    engine.stop()
    engine.start("--live-restore")
    assert job.wait(timeout=120) is Status.COMPLETED
    assert_every_step_once(job, workdir, 12)
    assert "started again" not in job.logs() and status_json("live")["restarts"] == 0


def test_reboot_is_told_from_a_new_boot_id(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "reboot", args=("14",), restarts=1)
    wait_for_step(job, 2)
    # a new boot: the boot id the keeper saw at its container's last start is not the kernel's now
    container = container_of(engine, job)
    assert container.exec_run(["cat", "/tmp/.jupyter_trainer-boot-id"]).output.decode().strip() == open("/proc/sys/kernel/random/boot_id").read().strip()
    container.exec_run(["sh", "-c", "echo 00000000-0000-0000-0000-000000000000 > /tmp/.jupyter_trainer-boot-id"])
    engine.restart()
    assert job.wait(timeout=120) is Status.COMPLETED
    assert_every_step_once(job, workdir, 14)
    assert "started again after the machine restarted (a new boot id) (restart 1 of 1)" in job.logs()
    facts = job.backend_impl().describe_facts(job.record)
    assert any("the machine restarted" in fact for fact in facts), facts


def test_killed_container_started_again_resumes_the_job(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "killed-back", args=("12",), restarts=1)
    wait_for_step(job, 2)
    container = container_of(engine, job)
    container.kill()
    container.start()  # before anything of ours looked: its keeper starts the job again
    assert job.wait(timeout=120) is Status.COMPLETED
    assert_every_step_once(job, workdir, 12)
    assert status_json("killed-back")["restarts"] == 1


# What a kernel's view of the job shows: its header and the log lines it holds (the poller lets go
# of a view once its job has ended: the kernel keeps it to be looked at).
ATTACH = """
%train_attach watched
from jupyter_trainer.view.poller import poller
view, = poller().widgets
"""
VIEW_PROBE = """
import json, time
print(json.dumps({"header": view.header.value, "log": list(view.monitor.snapshot(time.time()).lines)}))
"""


def kernel_view(client):
    output = []
    reply = client.execute_interactive(VIEW_PROBE, timeout=30, output_hook=output.append)
    assert reply["content"]["status"] == "ok", reply["content"]
    return json.loads("".join(m["content"]["text"] for m in output if m["msg_type"] == "stream"))


def ended_view(client):
    """The kernel's view once it shows the job's end, else None."""
    view = kernel_view(client)
    return view if "done" in view["log"] and "completed" in view["header"] else None


def test_two_kernels_watching_through_a_restart_both_see_it_resume(private_docker, workdir, home):
    from jupyter_client.manager import start_new_kernel

    engine = private_docker
    kernels = [start_new_kernel(kernel_name="python3", env={**os.environ}) for _ in range(2)]
    try:
        for _, client in kernels:
            client.execute_interactive("%load_ext jupyter_trainer", timeout=60)
        job = submit(STEPS, workdir, "watched", args=("40",), restarts=1)
        wait_for_step(job, 2)
        for _, client in kernels:
            reply = client.execute_interactive(ATTACH, timeout=60)
            assert reply["content"]["status"] == "ok", reply["content"]
        for _, client in kernels:
            wait_for(lambda: "step 1" in kernel_view(client)["log"], what="the view to follow the log")
        engine.restart()  # both views go on polling while the engine, and the job, are down and back
        wait_for(lambda: "restart 1 of 1" in job.logs(), timeout=180, what="the job to start again")
        for _, client in kernels:
            wait_for(lambda: "running (restart 1)" in kernel_view(client)["header"], timeout=60, what="the view to say it restarted")
        assert job.wait(timeout=120) is Status.COMPLETED
        assert_every_step_once(job, workdir, 40)
        for _, client in kernels:
            # the log's end and the exit code are two changes: the view may show one a moment before the other
            seen = wait_for(lambda: ended_view(client), timeout=60, what="the view to follow the job to its end")
            # each view holds the log as it is: every step once, the keeper's mark between them
            assert [line for line in seen["log"] if line.startswith("step ")] == [f"step {i}" for i in range(40)], seen["log"]
            assert sum("started again after its container restarted (restart 1 of 1)" in line for line in seen["log"]) == 1, seen["log"]
            assert "completed" in seen["header"] and "restart 1 of 1" in seen["header"], seen["header"]
    finally:
        for manager, client in kernels:
            client.stop_channels()
            manager.shutdown_kernel(now=True)


# Receives --notify messages in the private engine's network namespace (where its containers reach
# host.docker.internal), and writes each one as a line of a file.
RECEIVER = """
import http.server, sys
out, port = sys.argv[1], int(sys.argv[2])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(out, "ab") as handle:
            handle.write(body.replace(b"\\n", b" ") + b"\\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("0.0.0.0", port), Handler)
open(out + ".ready", "w").close()
server.serve_forever()
"""


def test_notify_is_sent_once_when_the_job_finally_ends_with_its_restarts(private_docker, workdir, home, tmp_path):
    engine = private_docker
    posts = tmp_path / "posts"
    server = subprocess.Popen(["nsenter", f"--net={engine.netns}", sys.executable, "-c", RECEIVER, str(posts), "18099"])
    try:
        wait_for(lambda: (tmp_path / "posts.ready").exists(), what="the receiver")
        job = submit(STEPS, workdir, "told", args=("12",), restarts=2, notify="http://host.docker.internal:18099/hook/secret-token")
        wait_for_step(job, 2)
        interrupted_at = time.time()
        engine.restart()
        wait_for(lambda: posts.exists() and posts.read_text().strip(), timeout=90, what="the message")
        time.sleep(2)  # a second message would come now
        sent = [json.loads(line) for line in posts.read_text().splitlines()]
        assert len(sent) == 1, sent
        assert sent[0]["status"] == "completed" and sent[0]["restarts"] == 1 and "(1 restart)" in sent[0]["text"], sent
        # the job's start is its first start, not the last one's
        assert abs(sent[0]["started_at"] - job.record.started_at) < 2 and sent[0]["started_at"] < interrupted_at, (sent, job.record.started_at)
        assert job.wait(timeout=30) is Status.COMPLETED
        assert_every_step_once(job, workdir, 12)
        wait_for(lambda: get_job("told").record.notification, what="the notification's result")
        assert get_job("told").record.notification["delivered"] is True
        # its URL (a secret) is in no file of the store once the job has ended
        for path in home.rglob("*"):
            if path.is_file():
                assert b"secret-token" not in path.read_bytes(), path
    finally:
        server.kill()
        server.wait()


# -- not started again: lost, with what happened ----------------------------------------


def test_killed_container_left_stopped_is_lost_with_the_reason(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "killed", args=("40",), restarts=2)
    wait_for_step(job, 1)
    container_of(engine, job).kill()
    lost = get_job("killed")
    assert lost.status is Status.LOST
    assert "was stopped at" in lost.reason and "not by jupyter_trainer" in lost.reason and "exit code 137" in lost.reason, lost.reason
    # the store's files are no longer the container's: started again now, it starts nothing
    container_of(engine, job).start()
    wait_for(lambda: container_of(engine, job).status == "running", what="the container to run")
    assert "started again" not in job.logs() and get_job("killed").status is Status.LOST


def test_restarts_used_up_end_lost_with_the_reason(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "used-up", args=("60",), restarts=1)
    wait_for_step(job, 1)
    engine.restart()
    wait_for(lambda: "restart 1 of 1" in job.logs(), what="the start again")
    wait_for_step(job, 3)
    engine.restart()
    wait_for(lambda: "used up" in job.logs(), what="the keeper to give up")
    lost = get_job("used-up")
    assert lost.status is Status.LOST, lost.reason
    assert "the container stopped when the Docker engine restarted" in lost.reason and "its 1 restart was used up" in lost.reason, lost.reason
    assert status_json("used-up")["restarts"] == 1
    assert "not started again: its 1 restart(s) are used up" in job.logs()


def test_without_restarts_an_engine_restart_loses_the_job_with_the_reason(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "plain", args=("60",))
    wait_for_step(job, 1)
    engine.restart()
    lost = get_job("plain")
    assert lost.status is Status.LOST
    assert "the container stopped when the Docker engine restarted, at" in lost.reason and "without --restarts" in lost.reason, lost.reason
    assert "started again" not in lost.logs() and status_json("plain")["restarts"] == 0


@pytest.mark.parametrize("ending, code", [("raise SystemExit(1)", 1), ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137)])
def test_a_job_that_ends_by_itself_is_never_started_again(private_docker, workdir, home, ending, code):
    engine = private_docker
    job = submit(f"print('once', flush=True)\n{ending}\n", workdir, f"ends-{code}", restarts=2)
    # its end not yet seen by anything of ours (which would take its files from the container):
    # the container's keeper alone must leave it ended
    wait_for(lambda: (job.run_dir / "exit_code").read_text().strip() == f"{code} exited", what="the job to end")
    container = container_of(engine, job)
    container.restart(timeout=2)
    engine.restart()
    wait_for(lambda: container_of(engine, job).status == "running", what="the container to run")
    assert job.logs().count("once") == 1 and "started again" not in job.logs()
    assert not job_processes(container_of(engine, job), job.record.runtime["run_dir"])["supervisor"]
    assert get_job(f"ends-{code}").status is Status.FAILED and status_json(f"ends-{code}")["restarts"] == 0


def test_a_stopped_job_is_never_started_again(private_docker, workdir, home):
    engine = private_docker
    job = submit(STEPS, workdir, "stopped", args=("60",), restarts=2)
    wait_for_step(job, 1)
    # stopped as `stop` does, its end not yet seen (which would take its files from the container)
    job.backend_impl().stop(get_job("stopped").record, job.run_dir)
    assert (job.run_dir / "exit_code").read_text().strip() == "143 stopped"
    container_of(engine, job).restart(timeout=2)
    wait_for(lambda: container_of(engine, job).status == "running", what="the container to run")
    engine.restart()
    assert "started again" not in job.logs()
    assert not job_processes(container_of(engine, job), job.record.runtime["run_dir"])["supervisor"]
    assert get_job("stopped").status is Status.STOPPED


# -- what cannot restart says so ----------------------------------------------------------


def test_restarts_refused_with_host(workdir, home):
    with pytest.raises(InvalidOption) as refused:
        build_spec("print(1)\n", host=True, image=None, container=None, workdir=str(workdir), gpus=None, restarts=1)
    assert "--restarts works with the container backends only" in str(refused.value) and "\n" not in str(refused.value)


def test_restarts_refused_in_a_users_container(private_docker, workdir, home):
    own = private_docker.client.containers.run(TEST_IMAGE, ["sleep", "infinity"], detach=True, init=True, name="users-own")
    spec = build_spec("print(1)\n", host=False, image=None, container=own.name, workdir=str(workdir), gpus=None, restarts=1)
    with pytest.raises(InvalidOption) as refused:
        submit_detached(spec, name="in-own")
    assert "is not one jupyter_trainer created" in str(refused.value)
    assert list(JobStore(home).names()) == []  # the store is as it was


def test_a_container_of_an_older_version_runs_jobs_but_not_restarts(private_docker, workdir, home):
    """A container created before the keeper (`tail -f /dev/null`, no restart policy) still runs
    jobs; --restarts asks for a new one, in one line."""
    store = JobStore(home)
    name = "jt-old-version"
    own_dir = store.container_dir(name)
    own_dir.mkdir(parents=True, mode=0o700)
    private_docker.client.containers.run(
        TEST_IMAGE, ["tail", "-f", "/dev/null"], name=name, detach=True, init=True, working_dir="/workspace",
        volumes={str(workdir): {"bind": "/workspace", "mode": "rw"}, str(own_dir): {"bind": "/jupyter_trainer/jobs", "mode": "rw"}},
        labels={"jupyter_trainer": "1", "jupyter_trainer.jobs_dir": str(store.jobs_dir), "jupyter_trainer.store": store.store_id(),
                "jupyter_trainer.workdir": str(workdir), "jupyter_trainer.gpus": ""},
    )  # fmt: skip
    spec = build_spec("print('old but fine')\n", host=False, image=None, container=name, workdir=str(workdir), gpus=None)
    job = submit_detached(spec, name="old").job
    assert job.wait(timeout=60) is Status.COMPLETED and job.logs() == "old but fine\n"
    spec = build_spec("print(1)\n", host=False, image=None, container=name, workdir=str(workdir), gpus=None, restarts=1)
    with pytest.raises(InvalidOption) as refused:
        submit_detached(spec, name="old-restarts")
    assert "--restarts needs a container made anew" in str(refused.value) and "docker rm -f jt-old-version" in str(refused.value)


def test_a_container_that_stops_itself_when_done_stays_stopped(private_docker, workdir, home):
    """--stop-container-when-done with the keeper: the job asks the container to stop (USR1 to its
    keeper, which ends with 0), and the on-failure policy leaves it stopped, GPUs released."""
    engine = private_docker
    job = submit("print('trained')\n", workdir, "frees", restarts=2, stop_container_when_done=True)
    assert job.wait(timeout=60) is Status.COMPLETED
    container = container_of(engine, job)
    wait_for(lambda: container.reload() or container.status == "exited", timeout=30, what="the container to stop")
    time.sleep(3)  # the engine would have started it again by now
    container.reload()
    assert container.status == "exited" and container.attrs["State"]["ExitCode"] == 0 and container.attrs["RestartCount"] == 0
    assert job.logs() == "trained\n"


# -- the keeper's instructions reach no shell as code ------------------------------------


def test_the_keepers_instructions_come_back_byte_for_byte_and_run_nothing(tmp_path):
    """The keeper itself (this machine's sh), given a run whose `restart` file holds hostile values:
    each comes back as it was, as the command's environment and arguments, and none is run."""
    from jupyter_trainer.backends.docker.restarts import instructions, keeper_source

    canary = tmp_path / "canary"
    hostile = f"a\nb $(touch {canary}) `touch {canary}` ; touch {canary} \\ \\n \\0101 ' \" é \t end\n"
    run = tmp_path / "jobs" / "job" / "1"
    run.mkdir(parents=True)
    out = tmp_path / "out"
    command = [sys.executable, "-c", "import json, os, sys; json.dump([os.environ['HOSTILE'], os.getcwd(), sys.argv[1:]], open(sys.argv[1], 'w'))", str(out), hostile, ""]
    (run / "restart").write_bytes(instructions(2, command, {"HOSTILE": hostile}, str(tmp_path), b""))
    (run / "pid").write_text("999999 999999\n")  # a supervisor that no longer runs
    (run / "exit_code").write_text(" " * 64)
    (run / "output.log").write_text("cut short")
    keeper = subprocess.Popen(
        ["sh", "-c", keeper_source(), "jupyter-trainer-keeper", str(tmp_path / "jobs")],
        env={**os.environ, "JUPYTER_TRAINER_BOOT_ID_FILE": str(tmp_path / "boot-id")}, start_new_session=True,
    )
    try:
        wait_for(lambda: out.exists() and out.read_text().endswith("]"), what="the command the keeper started")
    finally:
        os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()
    environment, cwd, args = json.loads(out.read_text())
    assert environment == hostile and args == [str(out), hostile, ""] and cwd == str(tmp_path)
    assert not canary.exists()
    assert (run / "restarts").read_text().startswith("restart 1 ")
    log = (run / "output.log").read_text()
    assert log.startswith("cut short\n----- jupyter_trainer: started again after its container restarted (restart 1 of 2) at ")  # on a line of its own


def test_a_container_stopped_with_its_job_stays_stopped_when_the_engine_restarts(private_docker, workdir, home):
    """`stop --container` stops the container for good: the engine starting again does not start it
    (nor the job) again, as it would a container stopped with `docker stop`."""
    engine = private_docker
    job = submit(STEPS, workdir, "with-container", args=("60",), restarts=2)
    wait_for_step(job, 1)
    assert job.stop(container=True).status is Status.STOPPED
    engine.restart()
    time.sleep(2)
    container = container_of(engine, job)
    assert container.status == "exited" and container.attrs["State"]["ExitCode"] == 0, container.attrs["State"]
    assert "started again" not in job.logs()
