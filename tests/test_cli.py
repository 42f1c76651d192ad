"""The jupyter-trainer command, run as a separate process on the same store."""

import json
import re
import subprocess
import sys
import time

import pytest

from jupyter_trainer.backends import build_spec
from jupyter_trainer.jobs.submit import submit_detached


def cli(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=timeout
    )


def host_job(name, script, workdir, **options):
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None, **options)
    return submit_detached(spec, name=name).job


def test_list_and_status(home, workdir):
    job = host_job("listed", "print('x')\n", workdir, env=["API_TOKEN=hunter2"])
    job.wait(timeout=30)
    listing = cli("list")
    assert listing.returncode == 0 and "listed" in listing.stdout and "completed" in listing.stdout
    rows = json.loads(cli("list", "--json").stdout)
    assert [row["name"] for row in rows] == ["listed"]
    status = cli("status", "listed", "--json")
    data = json.loads(status.stdout)
    assert {k: data[k] for k in ("name", "backend", "status", "exit_code")} == {
        "name": "listed", "backend": "host", "status": "completed", "exit_code": 0,
    }  # fmt: skip
    assert "hunter2" not in status.stdout and "API_TOKEN" in status.stdout
    assert "completed" in cli("status", "listed").stdout


def test_logs_tail_and_follow(home, workdir):
    script = "import time\nfor i in range(5):\n    print('line', i)\n    time.sleep(0.2)\n"
    host_job("talker", script, workdir)
    followed = cli("logs", "talker", "-f")
    assert followed.returncode == 0
    assert followed.stdout.splitlines() == [f"line {i}" for i in range(5)]
    assert cli("logs", "talker", "-n", "2").stdout == "line 3\nline 4\n"
    assert cli("logs", "talker").stdout.count("\n") == 5


def test_stop(home, workdir):
    host_job("sleepy", "import time\ntime.sleep(600)\n", workdir)
    result = cli("stop", "sleepy")
    assert result.returncode == 0 and result.stdout.startswith("sleepy: stopped |"), result.stdout
    assert json.loads(cli("status", "sleepy", "--json").stdout)["status"] == "stopped"


def test_messages_name_the_terminals_commands(home, workdir, tmp_path):
    host_job("busy", "import time\ntime.sleep(600)\n", workdir)
    script = tmp_path / "other.py"
    script.write_text("print(2)\n")
    refused = cli("submit", str(script), "--host", "--name", "busy")
    assert refused.returncode == 1 and "stop it first with jupyter-trainer stop busy" in refused.stderr, refused.stderr
    assert "%train" not in refused.stderr
    assert "see jupyter-trainer list" in cli("logs", "nope").stderr
    removed = cli("rm", "busy")
    assert removed.returncode == 1 and "stop it first: jupyter-trainer stop busy" in removed.stderr
    cli("stop", "busy")
    # the Python API in a plain script speaks as a terminal does
    from conftest import run_python

    api = run_python("import jupyter_trainer as jt\ntry:\n    jt.get_job('nope')\nexcept Exception as e:\n    print(e)")
    assert "see jupyter-trainer list" in api.stdout, api.stdout + api.stderr


def test_a_submitted_script_is_named_after_its_file(home, workdir, tmp_path):
    script = tmp_path / "train resnet.py"
    script.write_text("print(1)\n")
    done = cli("submit", str(script), "--host")
    assert done.returncode == 0, done.stderr
    assert re.match(r"train-resnet-[0-9a-f]{6}: ", done.stdout), done.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (("status", "nope"), "no job named 'nope'"),
        (("logs", "nope"), "no job named 'nope'"),
        (("stop", "nope"), "no job named 'nope'"),
        (("status", "../etc"), "invalid job name"),
        (("bogus",), "invalid choice"),
        (("logs", "x", "-n", "many"), "invalid int value"),
        ((), "required"),
    ],
)
def test_user_errors_are_one_line_and_exit_1(home, args, words):
    result = cli(*args)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and words in result.stderr and "Traceback" not in result.stderr


def test_corrupt_record_is_reported_and_the_rest_still_list(home, workdir):
    for name in ("good", "bad"):
        host_job(name, f"print('{name}')\n", workdir).wait(timeout=30)
    path = home / "jobs" / "bad" / "1" / "record.json"
    path.write_text(path.read_text()[:30])
    listing = cli("list")
    assert listing.returncode == 0 and "good" in listing.stdout and "'bad'" in listing.stdout
    status = cli("status", "bad")
    assert status.returncode == 1 and "unreadable" in status.stderr


def test_submit_runs_a_script_with_the_magics_options_and_arguments(home, workdir, tmp_path, monkeypatch):
    script = workdir / "train.py"
    script.write_text("import os, sys\nprint('args', sys.argv[1:], os.environ['SEED'])\n")
    done = cli("submit", str(script), "--host", "--name", "from-terminal", "--env", "SEED=7", "--", "--epochs", "3")
    assert done.returncode == 0, done.stderr
    assert "from-terminal" in done.stdout and "jupyter-trainer logs from-terminal -f" in done.stdout
    from jupyter_trainer.jobs.job import get_job

    assert get_job("from-terminal").wait(timeout=30).value == "completed"
    assert get_job("from-terminal").logs() == "args ['--epochs', '3'] 7\n"
    again = cli("submit", str(script), "--host", "--name", "from-terminal", "--env", "SEED=7", "--", "--epochs", "3")
    assert again.returncode == 0 and "attached" in again.stdout  # the same "cell": nothing new started
    assert "already submitted from this script with these options" in again.stdout
    other = cli("submit", str(script), "--host", "--name", "from-terminal", "--", "--epochs", "4")
    assert other.returncode == 1 and len(other.stderr.splitlines()) == 1 and "--rerun" in other.stderr


def test_submit_takes_its_defaults_from_the_ipython_profile_and_a_flag_wins(home, workdir, tmp_path, monkeypatch):
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_config.py").write_text(f"c.TrainerMagics.host = True\nc.TrainerMagics.workdir = {str(workdir)!r}\n")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    script = tmp_path / "where.py"
    script.write_text("import os\nprint(os.getcwd())\n")
    done = cli("submit", str(script), "--name", "configured")
    assert done.returncode == 0, done.stderr
    from jupyter_trainer.jobs.job import get_job

    job = get_job("configured")
    assert job.backend == "host" and job.wait(timeout=30).value == "completed" and job.logs() == f"{workdir}\n"
    refused = cli("submit", str(script), "--name", "flagged", "--image", "no-such-image:1", "--workdir", str(tmp_path))
    assert refused.returncode == 1 and "host" not in refused.stderr.split(":")[0]  # --image wins over the configured host
    assert len(refused.stderr.splitlines()) == 1


def test_submit_errors_are_one_line(home, tmp_path):
    missing = cli("submit", str(tmp_path / "nope.py"), "--host")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "cannot read the script" in missing.stderr


def test_metrics_from_python_and_the_shell(home, workdir):
    script = (
        "import sys\n"
        "for epoch in range(1, 4):\n"
        "    print(f'Epoch {epoch}/3')\n"
        "    for step in range(1, 5):\n"  # a bar redrawn in place, as Keras draws it
        "        sys.stdout.write(f'\\r {step}/4 [======] - loss: {1 / (epoch * step):.4f}')\n"
        "    print(f' - val_loss: {2 / epoch:.4f}')\n"
        "print('loss: nan')\n"
        "print('Traceback (most recent call last):')\n"
        "print(\"KeyError: 'images'\")\n"
        "print('done', end='')\n"  # an unended last line is read too
    )
    job = host_job("curves", script, workdir, metrics=["lr_used=lr_used=([\\d.]+)"])
    assert job.wait(timeout=30).value == "completed"
    found = job.metrics()
    assert found["val_loss"] == [(1.0, 2.0), (2.0, 1.0), (3.0, 0.6667)]
    assert found["loss"][:4] == [(0.25, 1.0), (0.5, 0.5), (0.75, 0.3333), (1.0, 0.25)]
    # "loss: nan" comes at the end of epoch 3 too: kept after the value drawn there, at the same x
    assert len(found["loss"]) == 13 and found["loss"][-2] == (3.0, 0.0833)
    assert found["loss"][-1][0] == 3.0 and found["loss"][-1][1] != found["loss"][-1][1]
    assert job.metric_axes() == {"loss": "epoch", "val_loss": "epoch"}
    result = cli("metrics", "curves", "--json")
    assert result.returncode == 0
    as_json = json.loads(result.stdout)
    assert as_json["val_loss"] == [[1.0, 2.0], [2.0, 1.0], [3.0, 0.6667]] and as_json["loss"][-1] == [3.0, None]
    table = cli("metrics", "curves").stdout.splitlines()
    assert table[0] == "metric\taxis\tx\tvalue" and "val_loss\tepoch\t2\t1.0" in table and len(table) == 1 + 13 + 3
    missing = cli("metrics", "no-such-job")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1


def test_a_traceback_counts_lines_as_the_cell_does(home, workdir):
    # the cell: line 1 is the magic's, so `raise` is on line 3, as the notebook numbers it
    job = host_job("numbered", "batch = {}\nbatch['images']\n", workdir)
    assert job.wait(timeout=30).value == "failed"
    assert 'line 2' not in job.logs() and ", line 3, in <module>" in job.logs()
    assert "KeyError: 'images'" in cli("status", "numbered").stdout  # the reason, where the exit code said little


def test_a_submitted_files_traceback_counts_the_files_lines(home, workdir, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("batch = {}\nbatch['images']\n")
    assert cli("submit", "--host", "--name", "filed", "--workdir", str(workdir), str(script)).returncode == 0
    from jupyter_trainer.jobs.job import Job

    job = Job.load("filed")
    assert job.wait(timeout=30).value == "failed" and ", line 2, in <module>" in job.logs()


def test_a_kill_after_a_handled_exception_is_reported_as_the_kill(home, workdir):
    script = (
        "import os, traceback\n"
        "try:\n    {}['warmup']\nexcept KeyError:\n    traceback.print_exc()\n"
        "print('step 1 loss: 1', flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    job = host_job("oom", script, workdir)
    assert job.wait(timeout=30).value == "failed" and job.exit_code == 137
    assert "KeyError" not in job.reason and "KeyError" not in cli("status", "oom").stdout.split("reason", 1)[-1]


def test_metrics_with_no_step_are_placed_at_their_time_since_start(home, workdir):
    script = "import time\nfor i in range(6):\n    print(f'loss: {1 / (i + 1):.3f}', flush=True)\n    time.sleep(0.4)\n"
    job = host_job("timed", script, workdir)
    assert job.wait(timeout=30).value == "completed"
    assert job.metric_axes() == {"loss": "time"}
    xs = [x for x, _ in job.metrics()["loss"]]
    assert len(xs) == 6 and xs == sorted(xs) and xs[-1] > xs[0] and xs[-1] <= job.record.duration + 2
    assert (job.run_dir / "clock").read_text().count("\n") >= 2  # the supervisor noted the log's size


def test_every_value_of_a_quick_job_with_no_step_is_kept(home, workdir):
    job = host_job("quick", "for i in range(10):\n    print(f'loss: {i}')\n", workdir)
    assert job.wait(timeout=30).value == "completed"
    assert [value for _, value in job.metrics()["loss"]] == [float(i) for i in range(10)]


def test_a_finished_job_leaves_no_process_behind_not_even_its_clocks_sleep(home, workdir):
    """The supervisor's clock sampler sleeps 15 s between looks: ending it ends its sleep too."""
    import os

    from conftest import wait_for

    job = host_job("quick", "print('done')\n", workdir)
    wait_for(lambda: job.status.is_final, timeout=30, what="the job to end")
    time.sleep(0.5)
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(workdir):
                left.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode())
        except OSError:
            continue
    assert left == []


def test_a_reason_with_escapes_in_an_old_record_reaches_the_terminal_as_text(home, store, fake_backend, backends):
    from jupyter_trainer.core.record import JobRecord, Status
    from jupyter_trainer.view import summary

    record = JobRecord(name="old", backend="host", status=Status.FAILED, reason="boom\x1b]0;pwned\x07 \x1b[2J\nsecond line")
    for text in (summary.one_line(record, backends), summary.status_block(record, backends)):
        assert "\x1b" not in text and "\x07" not in text and "boom" in text
    assert "\n" not in summary.one_line(record, backends) and "boom / second line" in summary.status_block(record, backends)


def test_the_command_line_and_the_magics_use_the_registry_they_are_given(home, store, fake_backend, backends, capsys):
    """A registry of one's own reaches every answer: a job of a backend no real registry knows is
    listed, described, stopped and removed through it, from the CLI and the magics alike."""
    import os

    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_trainer.backends import DEFAULT, KNOWN, UnknownBackend
    from jupyter_trainer.core.record import Observation
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.surfaces.cli import run
    from jupyter_trainer.surfaces.magics import TrainerMagics

    assert "fake" not in KNOWN  # the tests' own backend is registered by them
    submit_detached(DetachedSpec(script="print(1)", backend="fake", workdir=os.getcwd()), name="faked", store=store, backends=backends)
    fake_backend.observations["faked"] = Observation(alive=True, started=True)
    assert run(["list"], store, backends) == 0 and "faked  fake" in capsys.readouterr().out
    assert run(["status", "faked", "--json"], store, backends) == 0 and '"status": "running"' in capsys.readouterr().out
    magics = TrainerMagics(InteractiveShell.instance(), store=store, backends=backends)
    magics.train_jobs("--no-widget")
    assert "faked" in capsys.readouterr().out
    magics.train_stop("faked")
    assert fake_backend.stopped == [("faked", False)] and "stopped" in capsys.readouterr().out
    with pytest.raises(UnknownBackend):
        DEFAULT.get("fake")


def test_an_unknown_backend_is_a_trainer_error_and_its_job_one_line(home, store, fake_backend, backends, capsys):
    """A backend no registry knows is a user error like any other (one line where it is said, never
    a traceback); a record that names one is still one row of `list`, and `status` says why in one
    line."""
    import os

    from jupyter_trainer.backends import Backends, UnknownBackend
    from jupyter_trainer.core.record import Observation
    from jupyter_trainer.errors import TrainerError
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.surfaces.cli import main, run

    assert issubclass(UnknownBackend, TrainerError)
    with pytest.raises(TrainerError, match="unknown backend 'nope'"):
        Backends().get("nope")
    with pytest.raises(TrainerError, match="unknown backend 'nope'"):  # one line, where a submission asks for it
        submit_detached(DetachedSpec(script="print(1)", backend="nope", workdir=os.getcwd()), name="nowhere", store=store, backends=backends)
    job = submit_detached(DetachedSpec(script="print(1)", backend="fake", workdir=os.getcwd()), name="moved", store=store, backends=backends).job
    fake_backend.observations["moved"] = Observation(alive=True, started=True)
    record_file = job.run_dir / "record.json"
    record_file.write_text(record_file.read_text().replace('"backend": "fake"', '"backend": "vanished"'))
    capsys.readouterr()
    assert run(["list"], store, backends) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("moved ")]
    assert len(rows) == 1 and "vanished" in rows[0], rows
    assert main(["status", "moved"]) == 1  # the user's store: the same one (JUPYTER_TRAINER_HOME)
    said = capsys.readouterr()
    assert said.err == "jupyter-trainer: job 'moved' uses the unknown backend 'vanished'\n" and said.out == "", said


def test_the_metrics_json_is_json_dumps_own_text(monkeypatch):
    """The command writes its JSON a block of points at a time, by %-formats: the same text as
    json.dumps, whatever the numbers (whole or not, huge, -0.0, NaN and infinities, ints)."""
    import math
    import random

    from jupyter_trainer.jobs.job import MetricColumn
    from jupyter_trainer.surfaces import cli

    monkeypatch.setattr(cli, "JSON_BLOCK", 7)  # blocks of every kind, and their joins
    odd = [0.0, -0.0, 1e16, -1e16, 9999999999999998.0, 1e15 + 0.5, 5e-324, 1e308, math.nan, math.inf, -math.inf, 0.1, 3.0]
    rng = random.Random(7)

    def numbers(kind: str, count: int) -> list:
        if kind == "steps":
            return [float(step) for step in range(count)]
        if kind == "repeated":
            return [round(rng.random(), 2) for _ in range(count)]
        if kind == "ints":
            return [rng.randrange(-5, 5) for _ in range(count)]
        return [rng.choice(odd) if rng.random() < 0.3 else rng.uniform(-1e3, 1e3) for _ in range(count)]

    columns = {}
    for index, (x_kind, value_kind) in enumerate(
        (x, v) for x in ("steps", "repeated", "ints", "odd") for v in ("steps", "repeated", "ints", "odd")
    ):
        count = rng.choice([1, 6, 7, 8, 30, 2000])
        columns[f"m{index} \"ü\"" if index % 5 == 0 else f"m{index}"] = MetricColumn("step", numbers(x_kind, count), numbers(value_kind, count))
    columns["zeros"] = MetricColumn("step", [0.0, -0.0, 0.0] * 700, [-0.0, 0.0, 0.5] * 700)
    for index, far in enumerate((9999999999999998.0, 1e16, -1e16, -9999999999999998.0)):  # 1e+16 from 1e16 on
        columns[f"far {index}"] = MetricColumn("step", [1.0, far], [0.5, 0.5])
    expected = json.dumps({name: [[x, value if math.isfinite(value) else None] for x, value in zip(c.xs, c.values)] for name, c in columns.items()})
    assert "".join(cli.metrics_json(columns)) == expected
    assert "".join(cli.metrics_json({})) == json.dumps({})
