"""The magics in a real IPython shell, on the --host backend."""

import re

import pytest
from conftest import wait_for
from IPython.core.interactiveshell import InteractiveShell

from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import get_job


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_trainer")
    return ip


@pytest.fixture
def ip(shell, home, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    magics = shell.magics_manager.registry["TrainerMagics"]
    defaults = {name: getattr(magics, name) for name in magics.trait_names() if magics.trait_metadata(name, "config")}
    yield shell
    for name, value in defaults.items():
        setattr(magics, name, value)


def run(ip, capsys, source):
    result = ip.run_cell(source)
    out, err = capsys.readouterr()
    return result, out + err


def test_loading_imports_no_heavy_library():
    from conftest import run_python

    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "InteractiveShell.instance().run_line_magic('load_ext', 'jupyter_trainer')\n"
        "import sys; print(sorted(m for m in ('sagemaker', 'boto3', 'botocore', 'docker', 'regex') if m in sys.modules))"
    )
    assert run_python(code).stdout.strip() == "[]"


def test_every_magic_has_help_with_a_description_and_examples(ip, capsys):
    for magic, words in [
        ("%%train_detached?", "--stop-container-when-done"),
        ("%%sagemaker_fit?", "--instance-type"),
        ("%train_jobs?", "--all"),
        ("%train_logs?", "--follow"),
        ("%train_stop?", "--container"),
        ("%train_attach?", "name"),
        ("%train_rm?", "--run"),
        ("%train_compare?", "--metric"),
    ]:
        _, out = run(ip, capsys, magic)
        text = re.sub(r"\x1b\[[0-9;]*m", "", out)  # the pager's colours
        usage, description, options, *rest = text.split("Docstring:\n", 1)[1].split("\n\n")
        assert usage.startswith(f"usage: {magic[:-1]} "), out
        assert len(description) > 100 and words in out, magic
        examples = text[text.index("\nexamples:\n") :]
        assert examples.count(f"\n  {magic[:-1]}") >= 1 + (magic != "%train_attach?"), examples
        assert "::" not in out, magic


def test_a_bad_option_is_one_line(ip, capsys):
    result, out = run(ip, capsys, "%%train_detached --host --bogus\nprint(1)\n")
    assert not result.success and "unrecognized arguments: --bogus" in out and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1, out


def test_submit_attach_and_rerun(ip, capsys):
    cell = "%%train_detached --host --name m1 --no-widget\nprint('from the cell')\n"
    result, out = run(ip, capsys, cell)
    assert result.success and "m1: " in out
    assert get_job("m1").wait(timeout=30) is Status.COMPLETED
    result, out = run(ip, capsys, cell)
    assert "attached to it, nothing new was started" in out
    result, out = run(ip, capsys, "%%train_detached --host --name m1 --no-widget\nprint('changed')\n")
    assert not result.success and "--rerun" in out and out.count("\n") == 1
    result, out = run(ip, capsys, "%%train_detached --host --name m1 --no-widget --rerun\nprint('changed')\n")
    assert result.success and get_job("m1").run == 2


def test_line_magics(ip, capsys):
    run(ip, capsys, "%%train_detached --host --name talk --no-widget\nfor i in range(3): print('line', i)\n")
    get_job("talk").wait(timeout=30)
    _, out = run(ip, capsys, "%train_jobs")
    assert "talk" in out and "completed" in out and "exit code" in out
    _, out = run(ip, capsys, "%train_logs talk -n 2")
    assert out == "line 1\nline 2\n"
    _, out = run(ip, capsys, "%train_logs talk --follow")
    assert out.startswith("line 0\nline 1\nline 2\n") and "completed" in out
    _, out = run(ip, capsys, "%train_attach talk")
    assert out.startswith("talk completed host") and out.endswith("line 0\nline 1\nline 2\n")


def test_stop_magic_waits_and_reports_stopped(ip, capsys):
    # a job that ignores TERM ends only when KILL follows it: the magic waits for that
    cell = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(600)\n"
    run(ip, capsys, f"%%train_detached --host --name long --no-widget\n{cell}")
    wait_for(lambda: get_job("long").logs() == "ready\n", what="the job to run")
    result, out = run(ip, capsys, "%train_stop long")
    assert result.success and out.startswith("long: stopped |"), out
    assert "killed (SIGKILL) after the grace period" in out and "out of memory" not in out
    assert get_job("long").status is Status.STOPPED


def test_default_names_say_which_notebook_and_stay_the_same(ip, capsys, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/experiments/Sweep (lr 3e-4).ipynb")
    cell = "%%train_detached --host --no-widget\nprint('named')\n"
    result, out = run(ip, capsys, cell)
    assert result.success, out
    name = out.split(":")[0]
    assert re.fullmatch(r"Sweep-lr-3e-4-[0-9a-f]{6}", name), out
    assert f"Follow with %train_logs {name} --follow, stop with %train_stop {name}." in out
    get_job(name).wait(timeout=30)
    _, again = run(ip, capsys, cell)
    assert again.startswith(f"Job '{name}' was already submitted from this cell"), again
    # renamed since: the same cell is still the same job, not a second training
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/experiments/renamed.ipynb")
    _, renamed = run(ip, capsys, cell)
    assert renamed.startswith(f"Job '{name}' was already submitted from this cell"), renamed
    monkeypatch.delenv("JPY_SESSION_NAME")
    _, other = run(ip, capsys, "%%train_detached --host --no-widget\nprint('no notebook known')\n")
    assert re.match(r"job-[0-9a-f]{6}: ", other), other


def test_config_sets_defaults_and_flags_win(ip, capsys):
    run(ip, capsys, "%config TrainerMagics.host = True")
    run(ip, capsys, "%config TrainerMagics.interpreter = 'python3 -I'")
    result, _ = run(ip, capsys, "%%train_detached --name cfg --no-widget\nimport sys\nprint(sys.flags.isolated)\n")
    assert result.success and get_job("cfg").wait(timeout=30) is Status.COMPLETED
    assert get_job("cfg").logs() == "1\n"
    result, _ = run(
        ip, capsys, "%%train_detached --name flag --interpreter python3 --no-widget\nimport sys\nprint(sys.flags.isolated)\n"
    )
    assert get_job("flag").wait(timeout=30) is Status.COMPLETED and get_job("flag").logs() == "0\n"


def test_an_explicit_image_overrides_a_configured_host(ip, capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    run(ip, capsys, "%config TrainerMagics.host = True")
    result, out = run(ip, capsys, "%%train_detached --image python:3.11-slim --no-widget\nprint(1)\n")
    assert not result.success and "no Docker engine reachable" in out  # the Docker path, not a --host refusal
