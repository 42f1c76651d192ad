"""The code people already have: a repository's training script, pasted into a cell or run in place
(`%train_detached SCRIPT`, `jupyter-trainer submit SCRIPT`), runs as `python3 train.py` would in its
folder: sibling modules and packages import, data is found by `__file__` and by relative path,
checkpoints land in the working directory, and the user's `git status` is what the script made it.
On this machine, in a container, and for every rank under torchrun; remote hosts in test_remote_jobs."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import wait_for

from jupyter_trainer.core.record import Status
from jupyter_trainer.core.store import SCRIPT_FILE, JobStore
from jupyter_trainer.jobs.job import get_job

# a clone-shaped folder: train.py beside the modules it imports, a package, data and a .gitignore
TRAIN = textwrap.dedent(
    """\
    import argparse
    import os
    import sys

    import model
    from utils import describe
    from nets.layers import DEPTH

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--out", default="checkpoints")
    args = parser.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    print("FILE", __file__)
    print("ARGV0", sys.argv[0])
    print("PATH0", sys.path[0])
    print("CWD", os.getcwd())
    with open(os.path.join(here, "data", "numbers.txt")) as by_file, open("data/numbers.txt") as by_cwd:
        print("DATA", by_file.read().strip(), "|", by_cwd.read().strip())
    os.makedirs(args.out, exist_ok=True)
    for epoch in range(args.epochs):
        print(f"epoch {epoch} loss {model.loss(epoch):.4f} {describe()} depth {DEPTH}", flush=True)
        with open(os.path.join(args.out, f"epoch{epoch}.txt"), "w") as checkpoint:
            checkpoint.write(str(epoch))
    """
)
FILES = {
    "train.py": TRAIN,
    "model.py": "def loss(epoch):\n    return 1 / (epoch + 1)\n",
    "utils.py": "def describe():\n    return 'utils ok'\n",
    "nets/__init__.py": "",
    "nets/layers.py": "DEPTH = 3\n",
    "data/numbers.txt": "1 2 3\n",
    ".gitignore": "checkpoints/\n",  # not __pycache__: nothing of the kind may appear
}


def git(repo, *words):
    return subprocess.run(["git", "-C", str(repo), *words], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """The clone: committed, so that `git status --porcelain` is empty; bytecode may be written."""
    folder = tmp_path / "word-language-model"
    for name, text in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "-c", "user.email=me@example.org", "-c", "user.name=me", "commit", "-qm", "clone")
    assert git(folder, "status", "--porcelain") == ""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # as a user's shell has it
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_trainer")
    return ip


def run(shell, capsys, source):
    result = shell.run_cell(source)
    out = "".join(capsys.readouterr())
    return result, out


def finished(name, timeout=90):
    job = get_job(name)
    assert job.wait(timeout=timeout) is Status.COMPLETED, job.logs()
    return job


def facts(log):
    """The FILE/ARGV0/PATH0/CWD/DATA lines the script printed, by their first word."""
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in log.splitlines() if line.split(" ", 1)[0] in ("FILE", "ARGV0", "PATH0", "CWD", "DATA")}


def placement(where):
    return "--host" if where["host"] else f"--image {where['image']}"


def folder_seen(where, repo):
    return str(repo) if where["host"] else "/workspace"


def test_a_pasted_main_py_runs_as_a_file_of_its_folder(where, repo, home, shell, capsys):
    result, out = run(shell, capsys, f"%%train_detached {placement(where)} --workdir {repo} --name pasted --no-widget -- --epochs 2\n{TRAIN}")
    assert result.success, out
    job = finished("pasted")
    seen, log = folder_seen(where, repo), job.logs()
    assert facts(log) == {"FILE": f"{seen}/pasted.cell.py", "ARGV0": f"{seen}/pasted.cell.py", "PATH0": seen, "CWD": seen, "DATA": "1 2 3 | 1 2 3"}
    assert "epoch 1 loss 0.5000 utils ok depth 3" in log
    assert sorted(os.listdir(repo / "checkpoints")) == ["epoch0.txt", "epoch1.txt"]
    # nothing of ours in the user's folder: no cell file, no __pycache__ beside the modules
    assert git(repo, "status", "--porcelain", "--ignored") == "!! checkpoints/\n"


def test_the_line_form_runs_the_file_in_place_and_keeps_a_copy(where, repo, home, shell, capsys):
    line = f"%train_detached train.py {placement(where)} --workdir {repo} --name inplace --no-widget -- --epochs 1"
    result, out = run(shell, capsys, line)
    assert result.success, out
    job = finished("inplace")
    seen = folder_seen(where, repo)
    assert facts(job.logs()) == {"FILE": f"{seen}/train.py", "ARGV0": f"{seen}/train.py", "PATH0": seen, "CWD": seen, "DATA": "1 2 3 | 1 2 3"}
    run_dir = JobStore().run_dir("inplace", 1)
    assert (run_dir / SCRIPT_FILE).read_text() == TRAIN  # as submitted, byte for byte
    assert job.record.options["script_sha256"] == hashlib.sha256(TRAIN.encode()).hexdigest()
    assert job.record.options["script_path"] == str(repo / "train.py")
    assert git(repo, "status", "--porcelain", "--ignored") == "!! checkpoints/\n"

    # the same line with the same file is the same job: Run All never trains twice
    result, out = run(shell, capsys, line)
    assert result.success and "attached" in out and JobStore().runs("inplace") == [1], out
    # the file changed: the line is another job, which may not silently train under the name
    (repo / "train.py").write_text(TRAIN + "print('changed')\n")
    result, out = run(shell, capsys, line)
    assert not result.success and "already ran (completed) with a different script" in out and out.count("\n") == 1, out
    result, out = run(shell, capsys, line.replace("--no-widget", "--no-widget --rerun"))
    assert result.success, out
    assert "changed" in finished("inplace").logs() and JobStore().runs("inplace") == [1, 2]


def test_a_changed_script_does_not_replace_its_running_job(repo, home, shell, capsys):
    (repo / "slow.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    line = "%train_detached slow.py --host --no-widget"
    result, out = run(shell, capsys, line)
    assert result.success, out
    name = out.split(":", 1)[0]
    try:
        wait_for(lambda: get_job(name).logs() == "up\n", what="the job to run")
        (repo / "slow.py").write_text("print('other')\n")
        result, out = run(shell, capsys, line)
        assert not result.success and f"job {name!r} is running with a different script" in out, out
    finally:
        get_job(name).stop()


def test_submit_runs_the_script_in_place_from_the_terminals_directory(where, repo, home):
    command = [sys.executable, "-m", "jupyter_trainer", "submit", "train.py", "--name", "terminal", "--", "--epochs", "1"]
    if where["host"]:
        command[5:5] = ["--host"]
    else:
        command[5:5] = ["--image", where["image"]]
    result = subprocess.run(command, capture_output=True, text=True, cwd=repo, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = folder_seen(where, repo)
    assert facts(finished("terminal").logs())["FILE"] == f"{seen}/train.py"
    assert git(repo, "status", "--porcelain", "--ignored") == "!! checkpoints/\n"


def test_a_cells_traceback_points_at_the_cells_own_lines(repo, home, shell, capsys):
    cell = "import json\n\nvalues = json.loads('{}')\nprint(values['images'])\n"
    result, out = run(shell, capsys, f"%%train_detached --host --name broken --no-widget\n{cell}")
    assert result.success, out
    job = get_job("broken")
    assert job.wait(timeout=60) is Status.FAILED
    log = job.logs()
    # line 5 of the cell (the magic's line is line 1), shown with its text, and no frame of ours
    assert f'File "{repo}/broken.cell.py", line 5, in <module>\n    print(values[\'images\'])' in log, log
    assert "launch.py" not in log and log.rstrip().endswith("KeyError: 'images'")


def test_a_cells_spawned_children_find_its_functions(repo, home, shell, capsys):
    """multiprocessing's spawn (a DataLoader's workers on macOS, Python 3.14's default) imports the
    parent's main file again: for a cell, the run's copy."""
    cell = textwrap.dedent(
        """\
        import multiprocessing
        from pathlib import Path

        def square(value):
            import model  # the folder's, imported in the child: its bytecode not in the folder either
            numbers = (Path(__file__).parent / "data" / "numbers.txt").read_text().split()
            return value * value, Path(__file__).name, len(numbers), model.loss(0)

        if __name__ == "__main__":
            for method in ("spawn", "forkserver"):
                with multiprocessing.get_context(method).Pool(2) as pool:
                    print(method, pool.map(square, [1, 2]))
        """
    )
    result, out = run(shell, capsys, f"%%train_detached --host --name spawner --no-widget\n{cell}")
    assert result.success, out
    log = finished("spawner").logs()
    for method in ("spawn", "forkserver"):  # the children's __file__ is the cell's, in the folder
        assert f"{method} [(1, 'spawner.cell.py', 3, 1.0), (4, 'spawner.cell.py', 3, 1.0)]" in log, log
    assert git(repo, "status", "--porcelain", "--ignored") == ""


@pytest.mark.docker
def test_a_script_the_container_cannot_see_is_one_line(repo, home, shell, capsys, docker_image, docker_client, tmp_path):
    outside = tmp_path / "elsewhere.py"
    outside.write_text("print(1)\n")
    result, out = run(shell, capsys, f"%train_detached {outside} --image {docker_image} --workdir {repo} --no-widget")
    assert not result.success and f"{outside} is not inside --workdir {repo}" in out and out.count("\n") == 1, out
    assert (sorted(os.listdir(home / "jobs")) if (home / "jobs").exists() else []) == []
    theirs = docker_client.containers.run(docker_image, ["sleep", "infinity"], detach=True, init=True, labels={"jupyter_trainer.test": "1"})
    try:
        result, out = run(shell, capsys, f"%train_detached train.py --container {theirs.name} --no-widget")
        assert not result.success and f"container {theirs.name!r} mounts no directory that holds {repo}/train.py" in out, out
        assert out.count("\n") == 1
    finally:
        theirs.remove(force=True)


@pytest.mark.docker
def test_every_torchrun_rank_runs_the_cell_as_a_file_of_its_folder(repo, home, shell, capsys, torch_image, docker_image):
    # docker_image: its clean-up removes the containers of this test's store, whatever their image
    cell = textwrap.dedent(
        """\
        import os, sys
        import model
        rank = os.environ["RANK"]
        print(f"RANK {rank} FILE {__file__} PATH0 {sys.path[0]} LOSS {model.loss(int(rank))}", flush=True)
        """
    )
    # Debian's torch 1.13 on Python 3.11 cannot read torchrun's default --redirects (0: an IntFlag
    # member 3.11 no longer lists); ranks' stdout teed to the log (prefixed [defaultN]:) it can
    torchrun = "torchrun --nproc_per_node 2 --redirects 1 --tee 1"
    source = f"%%train_detached --image {torch_image} --workdir {repo} --interpreter '{torchrun}' --name ranks --no-widget\n{cell}"
    result, out = run(shell, capsys, source)
    assert result.success, out
    log = finished("ranks", timeout=180).logs()
    for rank, loss in (("0", "1.0"), ("1", "0.5")):
        assert f"RANK {rank} FILE /workspace/ranks.cell.py PATH0 /workspace LOSS {loss}" in log, log
    assert git(repo, "status", "--porcelain", "--ignored") == ""


def test_status_json_names_the_script_run_in_place(repo, home, shell, capsys):
    result, out = run(shell, capsys, "%train_detached train.py --host --name shown --no-widget")
    assert result.success, out
    finished("shown")
    shown = json.loads(subprocess.run([sys.executable, "-m", "jupyter_trainer", "status", "shown", "--json"], capture_output=True, text=True, check=True).stdout)
    assert shown["options"]["script_path"] == str(repo / "train.py")


@pytest.fixture
def slow_python(tmp_path):
    """An interpreter that waits a second before it starts Python: the file may change meanwhile."""
    wrapper = tmp_path / "slow-python"
    wrapper.write_text('#!/bin/sh\nsleep 1\nexec python3 "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_the_script_that_runs_is_the_one_submitted(repo, home, shell, capsys, slow_python):
    """Its record keeps the text and hash of what was submitted: that is what runs, whatever
    becomes of the file before the job starts (rewritten, or deleted)."""
    for name, change in (("swapped", lambda path: path.write_text("print('SWAPPED')\n")), ("deleted", lambda path: path.unlink())):
        script = repo / f"{name}.py"
        script.write_text("print('ORIGINAL')\n")
        result, out = run(shell, capsys, f"%train_detached {name}.py --host --interpreter {slow_python} --name {name} --no-widget")
        assert result.success, out
        change(script)
        assert finished(name).logs() == "ORIGINAL\n"


def test_the_users_modules_named_like_the_standard_library_are_theirs_alone(repo, home, shell, capsys):
    """A folder with its own multiprocessing.py, tempfile.py, stat.py, traceback.py: the launcher
    imports none of them, and the script gets them as `python3 script.py` would."""
    for name in ("multiprocessing", "tempfile", "stat", "traceback", "types", "linecache"):
        (repo / f"{name}.py").write_text(f"print('the folder\\'s {name} imported')\n")
    cell = "import sys\nprint('loaded:', sorted(m for m in ('multiprocessing', 'tempfile', 'stat') if m in sys.modules))\nimport tempfile, multiprocessing\n"
    (repo / "as_python_runs_it.py").write_text(cell)
    try:  # what python3 itself makes of that folder (its site may import some of the standard library first)
        expected = subprocess.run(["python3", "as_python_runs_it.py"], cwd=repo, capture_output=True, text=True, check=True).stdout
    finally:
        (repo / "as_python_runs_it.py").unlink()
    assert "the folder's multiprocessing imported" in expected
    result, out = run(shell, capsys, f"%%train_detached --host --name shadowed --no-widget\n{cell}")
    assert result.success, out
    assert finished("shadowed").logs() == expected
    # and a traceback is shown by Python's traceback module, not by the folder's traceback.py
    result, out = run(shell, capsys, "%%train_detached --host --name shadowed-raise --no-widget\nraise ValueError('the folder is not read')\n")
    assert result.success, out
    failed = get_job("shadowed-raise")
    assert failed.wait(timeout=60) is Status.FAILED
    assert "imported" not in failed.logs() and failed.logs().rstrip().endswith("ValueError: the folder is not read"), failed.logs()


def test_a_linked_script_imports_beside_its_target_as_python_does(repo, home, shell, capsys):
    (repo / "real").mkdir()
    (repo / "real" / "helper.py").write_text("VALUE = 'beside the target'\n")
    (repo / "real" / "main.py").write_text("import helper\nprint(helper.VALUE)\n")
    (repo / "links").mkdir()
    (repo / "links" / "main.py").symlink_to("../real/main.py")
    result, out = run(shell, capsys, "%train_detached links/main.py --host --name linked --no-widget")
    assert result.success, out
    assert finished("linked").logs() == "beside the target\n"


LINKED = "import sys\nimport helper\nprint('FILE', __file__)\nprint('ARGV0', sys.argv[0])\nprint('PATH0', sys.path[0])\nprint('DATA', helper.VALUE)\n"


def test_a_linked_script_runs_under_the_links_name_as_python_does(where, repo, home, tmp_path):
    """`python3 train.py`, train.py a link to real/impl.py, names the link in `__file__` and
    `sys.argv[0]` and imports beside the target: so does the job, on this machine and in a
    container, for a relative link and for one naming the target by its path on this machine."""
    (repo / "real").mkdir()
    (repo / "real" / "helper.py").write_text("VALUE = 'beside the target'\n")
    (repo / "real" / "impl.py").write_text(LINKED)
    (repo / "relative.py").symlink_to("real/impl.py")
    (repo / "absolute.py").symlink_to(repo / "real" / "impl.py")
    seen = folder_seen(where, repo)
    for link in ("relative", "absolute"):
        command = [sys.executable, "-m", "jupyter_trainer", "submit", f"{link}.py", *placement(where).split(), "--name", link]
        result = subprocess.run(command, capture_output=True, text=True, cwd=repo, timeout=120)
        assert result.returncode == 0, result.stderr
        shown = facts(finished(link).logs())
        assert shown == {"FILE": f"{seen}/{link}.py", "ARGV0": f"{seen}/{link}.py", "PATH0": f"{seen}/real", "DATA": "beside the target"}, shown
    if not where["host"]:  # a link to a file the container cannot see is refused, as that file is
        (tmp_path / "elsewhere.py").write_text("print(1)\n")
        (repo / "away.py").symlink_to(tmp_path / "elsewhere.py")
        result = subprocess.run([sys.executable, "-m", "jupyter_trainer", "submit", "away.py", *placement(where).split()], capture_output=True, text=True, cwd=repo, timeout=120)
        assert result.returncode == 1 and f"{repo}/away.py is not inside --workdir {repo}" in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_a_script_is_named_inside_its_folder_as_it_was_given(tmp_path):
    """The name a job gives the script, relative to the folder it sees: a link keeps its own name,
    whichever name of the folder the path was given under; one that only its target places in the
    folder (the link itself outside) is named by its target; a target outside is not inside."""
    from jupyter_trainer.spec.in_place import inside, named_inside

    folder, outside = tmp_path / "clone", tmp_path / "outside"
    (folder / "real").mkdir(parents=True)
    outside.mkdir()
    (folder / "real" / "impl.py").write_text("print(1)\n")
    (folder / "train.py").symlink_to("real/impl.py")
    (tmp_path / "alias").symlink_to(folder)  # the folder by another name
    (outside / "from_outside.py").symlink_to(folder / "real" / "impl.py")
    (folder / "out").symlink_to(outside)  # a folder inside that is elsewhere
    (folder / "escape.py").symlink_to(tmp_path / "outside" / "nothing.py")
    (outside / "nothing.py").write_text("print(2)\n")
    assert named_inside(str(folder / "train.py"), str(folder)) == "train.py" and inside(str(folder / "train.py"), str(folder)) == "real/impl.py"
    assert named_inside(str(tmp_path / "alias" / "train.py"), str(folder)) == "train.py"
    assert named_inside(str(folder / "train.py"), str(tmp_path / "alias")) == "train.py"
    assert named_inside(str(folder / "out" / "from_outside.py"), str(folder)) == "real/impl.py"
    assert named_inside(str(folder / "escape.py"), str(folder)) is None


def test_a_fifo_or_a_proc_file_as_the_script_is_one_line_not_a_hang(repo, home):
    os.mkfifo(repo / "fifo.py")
    for script in ("fifo.py", "/proc/self/environ"):
        result = subprocess.run([sys.executable, "-m", "jupyter_trainer", "submit", script, "--host"], capture_output=True, text=True, cwd=repo, timeout=60)
        assert result.returncode == 1 and "it is not a regular file" in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_an_interpreter_that_ignores_the_environment_still_writes_the_log_as_it_goes(repo, home, shell, capsys):
    """-I and -E ignore PYTHONUNBUFFERED: the log would fill only when the job ends."""
    result, out = run(shell, capsys, "%%train_detached --host --interpreter 'python3 -I' --name isolated --no-widget\nimport time\nprint('early')\ntime.sleep(600)\n")
    assert result.success, out
    job = get_job("isolated")
    try:
        wait_for(lambda: job.logs() == "early\n", timeout=30, what="the line in the log while the job runs")
    finally:
        job.stop()


def test_a_remote_jobs_missing_script_says_where_on_its_host_it_is_looked_for(home, tmp_path):
    """Nowhere on this machine, and not inside a remote --workdir: the one line says that a script
    of the remote host is looked for only there (no connection is made to say so)."""
    remote = ["--docker-host", "ssh://me@gpu-server.invalid", "--image", "img"]
    words = {
        "no workdir": ["nothere.py", *remote],
        "outside it": ["../elsewhere/nothere.py", *remote, "--workdir", "/srv/clone"],
    }
    said = {}
    for case, given in words.items():
        result = subprocess.run([sys.executable, "-m", "jupyter_trainer", "submit", *given], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        said[case] = result.stderr
    assert "a script on gpu-server.invalid is looked for only in --workdir there" in said["no workdir"], said
    assert "a script on gpu-server.invalid is looked for only inside --workdir /srv/clone" in said["outside it"], said
    assert not home.exists()  # refused before the store is touched
