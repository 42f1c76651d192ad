"""%%train_detached end to end, on this machine (--host) and on a real Docker engine."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import ipython_submitting, placement_flags, run_python, wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import Job, get_job, list_jobs
from jupyter_trainer.jobs.submit import submit_detached


def submit(script, where, workdir, name, **options):
    spec = build_spec(
        textwrap.dedent(script), container=None, workdir=str(workdir), gpus=None, **where, **options
    )
    return submit_detached(spec, name=name).job


COUNTING_SCRIPT = """\
import time
for i in range(15):
    print(f"step {i} loss: {1 / (i + 1):.3f}")
    time.sleep(0.2)
print("done")
"""


def test_job_outlives_sigkill_of_the_submitting_kernel(where, workdir, home):
    kernel = ipython_submitting(f"{placement_flags(where)} --name survivor --workdir {workdir}", COUNTING_SCRIPT)
    kernel.kill()
    kernel.wait()
    assert get_job("survivor").status in (Status.PENDING, Status.RUNNING)  # mid-job when the kernel died
    job = Job.load("survivor")
    assert job.wait(timeout=60) is Status.COMPLETED and job.exit_code == 0
    lines = job.logs().splitlines()
    assert lines == [f"step {i} loss: {1 / (i + 1):.3f}" for i in range(15)] + ["done"]


def test_job_outlives_a_hangup_of_its_terminal_session(where, workdir, home):
    kernel = ipython_submitting(
        f"{placement_flags(where)} --name hangup --workdir {workdir}", COUNTING_SCRIPT, start_new_session=True
    )
    os.killpg(kernel.pid, signal.SIGHUP)  # what the terminal does when the SSH link drops
    kernel.wait()
    job = Job.load("hangup")
    assert job.wait(timeout=60) is Status.COMPLETED
    assert job.logs(tail=1) == "done\n"


def test_exit_code_and_traceback_are_recorded(where, workdir, home):
    job = submit("import sys\nprint('about to fail')\nsys.exit(3)\n", where, workdir, "three")
    assert job.wait(timeout=60) is Status.FAILED and job.exit_code == 3
    crash = submit("raise ValueError('bad batch')\n", where, workdir, "crash")
    assert crash.wait(timeout=60) is Status.FAILED and crash.exit_code == 1
    assert "ValueError: bad batch" in crash.logs()


def test_a_job_ends_when_it_ended_not_when_somebody_looked(where, workdir, home):
    job = submit("print('quick')\n", where, workdir, "quick")
    wait_for(lambda: (job.run_dir / "exit_code").read_text().strip(), timeout=60, what="the exit code")
    time.sleep(3)  # nobody looks for a while
    ended = get_job("quick")
    assert ended.status is Status.COMPLETED
    assert ended.record.ended_at - ended.record.started_at < 2.5, ended.record


def test_environment_and_unbuffered_output(where, workdir, home):
    script = """\
    import os, sys, time
    print(os.environ["SEED"], os.environ["PYTHONUNBUFFERED"], os.getcwd())
    time.sleep(30)
    """
    job = submit(script, where, workdir, "env", env=["SEED=42"])
    # nothing is flushed by the script: only PYTHONUNBUFFERED=1 gets the line out while it sleeps
    line = wait_for(lambda: job.logs().strip(), timeout=30, what="the first line")
    expected_cwd = str(workdir) if where["host"] else "/workspace"
    assert line == f"42 1 {expected_cwd}"
    job.stop()


def test_stop_ends_the_whole_process_group(where, workdir, home, request):
    script = """\
    import subprocess, time
    child = subprocess.Popen(["sleep", "1000"])
    with open("child.pid", "w") as handle:
        handle.write(str(child.pid))
    time.sleep(1000)
    """
    job = submit(script, where, workdir, "group")
    pid_file = workdir / "child.pid"
    child_pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="the child's pid"))
    job.stop()
    assert job.wait(timeout=30) is Status.STOPPED
    assert job.reason == "stopped by the user"
    if where["host"]:
        alive = lambda: os.path.exists(f"/proc/{child_pid}") and "Z" not in open(f"/proc/{child_pid}/stat").read().split()[2]
    else:
        client = request.getfixturevalue("docker_client")
        container = client.containers.get(job.record.runtime["container_id"])
        alive = lambda: container.exec_run(["kill", "-0", str(child_pid)]).exit_code == 0
    wait_for(lambda: not alive(), timeout=15, what="the job's child to end")


def test_script_runs_byte_for_byte(where, workdir, home):
    canary = "canary"
    script = (
        "import linecache, os\n"
        "# $(touch canary) `touch canary` ; touch canary && touch canary | touch canary\n"
        "text = 'single \\' double \" dollar $HOME $(id) `id` back\\\\slash \\n newline é ✓ %s {} *'\n"
        "with open('copy.py', 'wb') as copy:  # a cell has no file of its own: linecache holds its text\n"
        "    copy.write(''.join(linecache.getlines(__file__)).encode())\n"
        "print(text)\n"
    )
    job = submit_detached(
        build_spec(script, container=None, workdir=str(workdir), gpus=None, **where), name="quotes"
    ).job
    assert job.wait(timeout=60) is Status.COMPLETED, job.logs()
    assert (workdir / "copy.py").read_bytes() == b"\n" + script.encode()  # after the magic line's stand-in
    printed = "single ' double \" dollar $HOME $(id) `id` back\\slash \n newline é ✓ %s {} *\n"
    assert (job.run_dir / "output.log").read_text() == printed  # the log as the job wrote it
    assert job.logs() == printed.replace(" \n", "\n")  # shown as a terminal shows it: no trailing blank
    assert not (workdir / canary).exists() and not os.path.exists(canary)


def test_two_processes_submitting_twenty_jobs_each_lose_nothing(where, workdir, home):
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from jupyter_trainer.backends import build_spec
        from jupyter_trainer.jobs.submit import submit_detached
        prefix = sys.argv[1]
        while not os.path.exists({str(workdir / "go")!r}):
            time.sleep(0.01)
        for k in range(20):
            spec = build_spec(f"print('job {{prefix}}-{{k}}')\\n", host={where['host']!r}, image={where['image']!r},
                              container=None, workdir={str(workdir)!r}, gpus=None)
            submit_detached(spec, name=f"{{prefix}}-{{k}}")
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", code, prefix], stderr=subprocess.PIPE, text=True)
        for prefix in ("a", "b")
    ]
    (workdir / "go").touch()
    for process in processes:
        assert process.wait(timeout=120) == 0, process.stderr.read()
    jobs = list_jobs()
    assert sorted(job.name for job in jobs) == sorted(f"{p}-{k}" for p in "ab" for k in range(20))
    for job in jobs:
        assert job.wait(timeout=120) is Status.COMPLETED
        assert job.logs() == f"job {job.name}\n"


def test_another_process_sees_the_same_job(where, workdir, home):
    job = submit("print('hi')\n", where, workdir, "shared")
    job.wait(timeout=60)
    result = run_python("import jupyter_trainer as jt; j = jt.get_job('shared'); print(j.status, j.exit_code, j.backend)")
    backend = "host" if where["host"] else "docker"
    assert result.stdout.split() == ["completed", "0", backend], result.stderr


def test_stop_reaches_group_members_that_ignore_term(where, workdir, home):
    script = """\
    import signal, subprocess, time
    print("sigint is python's:", signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
    worker = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"])
    open("worker.pid", "w").write(str(worker.pid))
    time.sleep(600)
    """
    job = submit(script, where, workdir, "stubborn")
    wait_for(lambda: (workdir / "worker.pid").exists(), what="the worker to start")
    assert job.logs() == "sigint is python's: True\n"  # a detached job still gets KeyboardInterrupt
    job.stop()
    assert job.wait(timeout=60) is Status.STOPPED
    # the worker ignored TERM; the KILL after the grace period still reached it
    worker = int((workdir / "worker.pid").read_text())
    if where["host"]:
        wait_for(lambda: not os.path.exists(f"/proc/{worker}") or "Z" in open(f"/proc/{worker}/stat").read().split()[2], timeout=30, what="the worker to die")
    else:
        import docker

        container = docker.from_env().containers.get(job.record.runtime["container_id"])
        wait_for(lambda: container.exec_run(["kill", "-0", str(worker)]).exit_code != 0, timeout=30, what="the worker to die")
