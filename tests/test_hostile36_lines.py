"""Hostile review of the GPU line (hostile36): what a job's leftovers, two submitters at once, and
another user do to it. See test_lines.py for the machine used here."""

import os
import signal
import textwrap
import time

import pytest
from conftest import wait_for
from test_lines import PROMPTLY, Lines, held_by

from jupyter_trainer.backends import build_spec
from jupyter_trainer.jobs.job import Job
from jupyter_trainer.jobs.submit import submit_detached


@pytest.fixture
def machine(tmp_path, monkeypatch, store, workdir):
    root = tmp_path / "lines"
    monkeypatch.setenv("JUPYTER_TRAINER_LINES_DIR", str(root))
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0")
    found = Lines(root, workdir, store)
    yield found
    found.end_all()


def submit_script(machine, name, script, **options):
    spec = build_spec(textwrap.dedent(script), host=True, image=None, container=None, workdir=str(machine.workdir), env=[f"JOB={name}"], **options)
    job = submit_detached(spec, name=name, store=machine.store).job
    machine.jobs[name] = machine.store
    return job


# A job that leaves a process behind it and ends: the leftover's pid in `leftover-NAME`.
LEAVES = {
    # a child in the job's own process group, that outlives the job (`cmd &` in a shell, os.system)
    "background": """
        import os
        os.system("sleep 300 & echo $! > leftover-$JOB")
    """,
    # a daemon: double fork, a session of its own, its fds kept
    "daemon": """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                with open("leftover-" + os.environ["JOB"], "w") as handle:
                    handle.write(str(os.getpid()))
                time.sleep(300)
            os._exit(0)
        os.wait()
    """,
}


@pytest.mark.parametrize("how", sorted(LEAVES))
def test_a_job_that_ended_leaving_a_process_behind_does_not_keep_its_gpu_for_ever(machine, how):
    job = submit_script(machine, "leaver", LEAVES[how], gpus="1")
    leftover = machine.workdir / "leftover-leaver"
    try:
        assert job.wait(timeout=30).is_final
        wait_for(lambda: leftover.exists() and leftover.read_text().strip(), what="the leftover's pid")
        ended = machine.status("leaver")
        assert ended["status"] == "completed", ended
        machine.submit("next", gpus="1")
        # the job has ended (completed): its GPU is let go (the contract: a job that ends releases
        # its GPUs at once), or the leftover went with it; never held for ever by a completed job
        wait_for(
            lambda: machine.started("next"),
            timeout=PROMPTLY,
            what=f"the next job to start (GPU 0 still held by {held_by(machine.queue())[0]!r}, {machine.status('next')['reason']!r})",
        )
    finally:
        if leftover.exists() and leftover.read_text().strip():
            try:
                os.kill(int(leftover.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
