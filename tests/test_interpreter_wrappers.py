"""An --interpreter that wraps Python (a shell that pins arguments, `env`, interpreter options, a
torchrun-like launcher that starts a process per rank): the script sees exactly the arguments
`INTERPRETER train.py ARGS` would give it, on this machine and in a container. A wrapper that runs
the launcher in a way it cannot make sense of fails the job, with the reason said."""

import json
import subprocess
import sys
import textwrap

import pytest

from jupyter_trainer.core.record import Status, describe_outcome
from jupyter_trainer.jobs.job import get_job

# what the script shows of how it was started, in one line
SHOWS = textwrap.dedent(
    """\
    import json, os, sys
    print("SEEN", json.dumps({"argv": sys.argv[1:], "file": __file__, "argv0": sys.argv[0], "wrapped": os.environ.get("WRAPPED"),
                              "dev": sys.flags.dev_mode, "rank": os.environ.get("RANK")}), flush=True)
    """
)
# torchrun's way, in miniature: one `python -u SCRIPT ARGS` per rank, each told its RANK
FANOUT = textwrap.dedent(
    """\
    import os, subprocess, sys
    ranks, script, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    children = [subprocess.Popen([sys.executable, "-u", script, *args], env=dict(os.environ, RANK=str(rank))) for rank in range(ranks)]
    sys.exit(max(child.wait() for child in children))
    """
)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A working directory holding the script and the fan-out launcher; submissions start from it."""
    path = tmp_path / "project"
    path.mkdir()
    (path / "train.py").write_text(SHOWS)
    (path / "fanout.py").write_text(FANOUT)
    monkeypatch.chdir(path)
    return path


def submit(where, name, interpreter, args=()):
    placement = ["--host"] if where["host"] else ["--image", where["image"]]
    command = [sys.executable, "-m", "jupyter_trainer", "submit", "train.py", *placement, "--name", name, "--interpreter", interpreter]
    result = subprocess.run([*command, "--", *args] if args else command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    job = get_job(name)
    job.wait(timeout=120)
    return job


def seen(job):
    return [json.loads(line.split(" ", 1)[1]) for line in job.logs().splitlines() if line.startswith("SEEN ")]


WRAPPERS = {
    # a shell that pins an argument of its own after the script ("$0": the file it is given)
    "pinned": ("sh -c 'exec python3 \"$0\" --steps 1'", [], ["--steps", "1"]),
    "pinned, then the line's": ("sh -c 'exec python3 \"$0\" --steps 1 \"$@\"'", ["--lr", "0.1"], ["--steps", "1", "--lr", "0.1"]),
    "env": ("env WRAPPED=1 python3", ["--lr", "0.1"], ["--lr", "0.1"]),
    "interpreter option": ("python3 -X dev", ["cell", "file", "x.py"], ["cell", "file", "x.py"]),
}


@pytest.mark.parametrize("case", WRAPPERS)
def test_a_wrapper_gives_the_script_exactly_its_arguments(where, folder, home, case):
    interpreter, args, expected = WRAPPERS[case]
    job = submit(where, "wrapped", interpreter, args)
    assert job.status is Status.COMPLETED, job.logs()
    here = str(folder) if where["host"] else "/workspace"
    [shown] = seen(job)
    assert shown["argv"] == expected and shown["file"] == shown["argv0"] == f"{here}/train.py", job.logs()
    assert shown["wrapped"] == ("1" if case == "env" else None) and shown["dev"] is (case == "interpreter option")


def test_every_rank_of_a_torchrun_like_launcher_gets_the_scripts_arguments(where, folder, home):
    job = submit(where, "ranks", "python3 fanout.py 2", ["--epochs", "3"])
    assert job.status is Status.COMPLETED, job.logs()
    here = str(folder) if where["host"] else "/workspace"
    ranks = sorted(seen(job), key=lambda shown: shown["rank"])
    assert [(shown["rank"], shown["argv"], shown["file"]) for shown in ranks] == [(rank, ["--epochs", "3"], f"{here}/train.py") for rank in "01"]


def test_a_wrapper_that_runs_the_launcher_otherwise_fails_the_job_and_says_why(where, folder, home):
    """Run by runpy from `-c` (which leaves the launcher's path among the words it is given: which
    are the script's cannot be told), or copied away from its run (where it learns which script to
    run): a failed job whose reason says so, never the script run with other arguments."""
    by_runpy = submit(where, "runpy", "python3 -c 'import runpy, sys; runpy.run_path(sys.argv[1], run_name=\"__main__\")'", ["--steps", "1"])
    assert by_runpy.status is Status.FAILED and by_runpy.exit_code == 1 and seen(by_runpy) == [], by_runpy.logs()
    reason = by_runpy.record.reason
    assert reason.startswith("LaunchError: --interpreter ran the launcher otherwise than python3 runs a file (sys.argv is not its command line"), reason
    assert reason.endswith("""(sh -c 'exec python3 "$0" "$@"')"""), reason  # whole: a reason is cut at 300 characters
    assert "LaunchError" in describe_outcome(by_runpy.status, by_runpy.exit_code, reason)

    copied = submit(where, "copied", "sh -c 'cp \"$0\" copied_launcher.py && exec python3 copied_launcher.py \"$@\"'")
    assert copied.status is Status.FAILED and copied.exit_code == 1 and seen(copied) == [], copied.logs()
    assert copied.record.reason.startswith("LaunchError: cannot read launch_target beside the launcher"), copied.record.reason
    assert copied.record.reason.endswith("not a copy of it"), copied.record.reason


def test_a_python_without_orig_argv_is_checked_by_its_command_line_in_proc(tmp_path):
    """Before Python 3.10 there is no sys.orig_argv: the launcher reads its command line from
    /proc/self/cmdline, and tells a file run as python3 runs it from one run by runpy from `-c`."""
    from jupyter_trainer.backends import base

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launch.py").write_bytes(base._source("launch.py"))
    (run_dir / "script.py").write_text("import sys\nprint('ARGS', sys.argv[1:])\n")
    (run_dir / "launch_target").write_bytes(f"{tmp_path}/train.py\0".encode())
    older = tmp_path / "older"  # as an older Python: no sys.orig_argv by the time the launcher runs
    older.mkdir()
    (older / "sitecustomize.py").write_text("import sys\nsys.__dict__.pop('orig_argv', None)\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(older)}
    launcher = str(run_dir / "launch.py")
    plain = subprocess.run(["python3", launcher, "--steps", "1"], capture_output=True, text=True, env=env, timeout=60)
    assert plain.returncode == 0 and plain.stdout == "ARGS ['--steps', '1']\n", plain.stderr
    by_runpy = ["python3", "-c", "import runpy, sys; assert not hasattr(sys, 'orig_argv'); runpy.run_path(sys.argv[1], run_name='__main__')"]
    mangled = subprocess.run([*by_runpy, launcher, "--steps", "1"], capture_output=True, text=True, env=env, timeout=60)
    assert mangled.returncode == 1 and mangled.stdout == "", mangled.stderr
    assert mangled.stderr.splitlines()[-1].startswith("LaunchError: --interpreter ran the launcher otherwise than python3 runs a file"), mangled.stderr
