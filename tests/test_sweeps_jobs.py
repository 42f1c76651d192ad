"""Sweeps as their user has them: real runs on --host (and one grid in a container), through the CLI
and a kernel's cell, at most --max-running of them at once with no kernel running, stopped and
removed as one, attached to when the cell runs again, and shown as one view.

The runs block until the test lets each go (a file it creates), and note when they start and end in
a file of their own: what ran at once is read from those times, not from sleeping.
"""

import hashlib
import json
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import wait_for

from jupyter_trainer.backends import Backends
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.jobs.sweeps import load_sweep, submit_sweep, sweep_path
from jupyter_trainer.spec.job_spec import DetachedSpec

CLI = [sys.executable, "-m", "jupyter_trainer"]

# Notes its start (with its arguments and GPUs) in events.jsonl beside it, says "started", waits for
# release-ID (ID: its arguments' hash) or release-all, then prints a loss and notes its end.
HOLD = """
import hashlib, json, os, sys, time
here = {here!r}
argv = sys.argv[1:]
me = hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:12]
def note(event):
    line = json.dumps({{"id": me, "event": event, "t": time.time(), "argv": argv, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}})
    fd = os.open(os.path.join(here, "events.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (line + "\\n").encode())
    os.close(fd)
note("start")
print("started", flush=True)
while not (os.path.exists(os.path.join(here, "release-" + me)) or os.path.exists(os.path.join(here, "release-all"))):
    time.sleep(0.02)
loss = argv[argv.index("--loss") + 1] if "--loss" in argv else "1"
print("loss", loss, flush=True)
note("end")
"""


def hold_script(workdir):
    path = workdir / "hold.py"
    path.write_text(textwrap.dedent(HOLD.format(here=str(workdir))))
    return path


def run_id(argv):
    return hashlib.sha256(json.dumps(list(argv)).encode()).hexdigest()[:12]


def cli(*args, ok=True, **popen):
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, **popen)
    if ok:
        assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done


def status_json(name):
    return json.loads(cli("status", name, "--json").stdout)


def events(workdir):
    path = workdir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def started(workdir):
    return [event for event in events(workdir) if event["event"] == "start"]


def most_at_once(found):
    """The most runs that ran at one moment, from their start and end times."""
    spans = {}
    for event in found:
        spans.setdefault(event["id"], {})[event["event"]] = event["t"]
    return max(sum(span["start"] <= each["start"] < span.get("end", float("inf")) for span in spans.values()) for each in spans.values())


def others_wait(sweep, total, most):
    """Once `most` of the sweep's runs run, each of the others is pending in its line, saying so."""
    from jupyter_trainer.jobs.job import get_job

    def waiting():
        jobs = [get_job(f"{sweep}-{index}") for index in range(1, total + 1)]
        pending = [job for job in jobs if job.status.value == "pending"]
        return len(pending) == total - most and all(job.reason.startswith("waiting for a slot in queue sweep-") for job in pending)

    wait_for(waiting, what=f"the runs of {sweep} beyond {most} to wait in line")


def let_go_in_turn(workdir, total, most, sweep=None, timeout=30):
    """Let the runs go one at a time, the earliest started first, each time once `most` run (or all
    that are left): they must reach `most` at once, and each next one start by itself. With
    `sweep`, the others are seen waiting in line before the first is let go."""
    released = []
    while len(released) < total:
        expected = min(most, total - len(released))
        running = wait_for(
            lambda: (now := [event for event in started(workdir) if event["id"] not in released]) and len(now) >= expected and now,
            timeout=timeout, what=f"{expected} runs to run at once ({len(released)} let go)",
        )  # fmt: skip
        if sweep and not released:
            others_wait(sweep, total, most)
        first = running[0]["id"]
        (workdir / f"release-{first}").touch()
        released.append(first)
        wait_for(lambda: any(e["id"] == first and e["event"] == "end" for e in events(workdir)), timeout=timeout, what="a run to end")
    return events(workdir)


def sweep_status(name):
    return status_json(name)["status"]


# -- 2. a grid on --host, at most 2 at once -------------------------------------------------------


def test_a_grid_on_the_host_runs_at_most_max_running_at_once_and_is_one_thing(home, workdir):
    script = hold_script(workdir)
    odd = ["a b", "$(touch pwned);|&"]
    out = cli("submit", str(script), "--host", "--name", "grid", "--sweep", "loss=0.5,0.25", "--sweep", "tag=" + json.dumps(odd),
              "--max-running", "2", "--", "--epochs", "3", cwd=workdir).stdout  # fmt: skip
    assert "Sweep 'grid': 4 runs (4 started); at most 2 at once." in out, out
    found = let_go_in_turn(workdir, 4, 2, "grid")
    assert most_at_once(found) == 2, found
    expected = [["--epochs", "3", "--loss", loss, "--tag", tag] for loss in ("0.5", "0.25") for tag in odd]
    assert sorted(event["argv"] for event in found if event["event"] == "start") == sorted(expected)
    assert not (workdir / "pwned").exists()
    wait_for(lambda: sweep_status("grid") == "completed", what="the sweep to complete")

    facts = status_json("grid")
    assert facts["kind"] == "sweep" and facts["max_running"] == 2 and facts["metric"] == "loss"
    assert [run["name"] for run in facts["sweep"]] == ["grid-1", "grid-2", "grid-3", "grid-4"]
    for run, argv in zip(facts["sweep"], expected):
        assert run["params"] == {"loss": argv[3], "tag": argv[5]} and run["status"] == "completed"
        assert run["last"] == run["best"] == float(argv[3])
        assert set(run) == {"name", "params", "status", "last", "best"}
        one = status_json(run["name"])
        assert one["params"] == run["params"] and one["options"]["args"] == argv
    text = cli("status", "grid").stdout
    assert text.startswith("sweep grid: 4 of 4 done (completed); metric loss") and "$(touch pwned);|&" in text

    listed = cli("list").stdout.splitlines()
    assert [line.split()[0] for line in listed[1:]] == ["grid"] and "sweep: 4 of 4 done" in listed[1]
    every = cli("list", "--all").stdout.splitlines()
    assert [line.split()[0] for line in every[1:]] == ["grid", "grid-1", "grid-2", "grid-3", "grid-4"]
    rows = json.loads(cli("list", "--json").stdout)
    assert [row["name"] for row in rows] == ["grid"]

    compared = json.loads(cli("compare", "grid", "--json").stdout)
    assert [(row["name"], row["best"]) for row in compared] == [("grid-1", 0.5), ("grid-2", 0.5), ("grid-3", 0.25), ("grid-4", 0.25)]


# -- 3. from a kernel that dies at once -------------------------------------------------------------


def submit_from_a_kernel(line, cell):
    """The cell magic in a fresh IPython that then dies (SIGKILL), as a closed laptop's kernel does."""
    code = textwrap.dedent(
        f"""
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "jupyter_trainer")
        shell.run_cell_magic("train_detached", {line!r}, {cell!r})
        import os, signal, sys
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
    return result.stdout


def test_a_sweep_from_a_kernel_runs_every_run_in_order_with_no_kernel_running(home, workdir):
    cell = textwrap.dedent(HOLD.format(here=str(workdir)))
    out = submit_from_a_kernel("--host --name fromk --sweep i=1,2,3,4,5 --max-running 2 --no-widget", cell)
    assert "Sweep 'fromk': 5 runs (5 started); at most 2 at once." in out, out
    order = {run_id(["--i", str(i)]): i for i in range(1, 6)}
    found = let_go_in_turn(workdir, 5, 2, "fromk")
    assert most_at_once(found) == 2
    starts = {order[event["id"]]: event["t"] for event in found if event["event"] == "start"}
    assert sorted(starts) == [1, 2, 3, 4, 5]
    wait_for(lambda: sweep_status("fromk") == "completed", what="every run to complete")
    assert [run["status"] for run in status_json("fromk")["sweep"]] == ["completed"] * 5


def test_the_runs_of_a_sweep_start_in_order(home, workdir):
    """Each run's place is kept from its submission (core/lines.py: reserve_place), whichever waiter starts first."""
    cell = textwrap.dedent(HOLD.format(here=str(workdir)))
    submit_from_a_kernel("--host --name inorder --sweep i=1,2,3,4,5,6 --max-running 2 --no-widget", cell)
    order = {run_id(["--i", str(i)]): i for i in range(1, 7)}
    found = let_go_in_turn(workdir, 6, 2)
    starts = {order[event["id"]]: event["t"] for event in found if event["event"] == "start"}
    # first in, first out: 1 and 2 at once, then each next one as one ends
    assert max(starts[1], starts[2]) <= starts[3] <= starts[4] <= starts[5] <= starts[6], sorted(starts, key=starts.get)


# -- 4. stopped mid-way, then removed ---------------------------------------------------------------


def test_a_sweep_stopped_midway_stops_its_running_runs_and_never_starts_the_waiting_ones(home, workdir):
    script = hold_script(workdir)
    cli("submit", str(script), "--host", "--name", "halt", "--sweep", "i=1,2,3,4", "--max-running", "1", cwd=workdir)
    (first,) = wait_for(lambda: started(workdir), what="the first run to start")
    ran = int(first["argv"][1])
    assert ran == 1  # first in, first out
    refused = cli("rm", "halt", ok=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "have not ended: halt-1" in refused.stderr, refused.stderr
    assert sorted(run["status"] for run in status_json("halt")["sweep"]) == ["pending"] * 3 + ["running"]

    said = cli("stop", "halt").stdout
    assert said.count("\n") == 4, said
    runs = status_json("halt")["sweep"]
    assert [run["status"] for run in runs] == ["stopped"] * 4, runs
    assert [event["argv"] for event in started(workdir)] == [["--i", str(ran)]]
    for i in {1, 2, 3, 4} - {ran}:
        facts = status_json(f"halt-{i}")
        assert facts["started_at"] is None, facts
        assert "started" not in cli("logs", f"halt-{i}").stdout
    (workdir / "release-all").touch()  # would let any run that started late go on: none did
    assert [event["argv"] for event in started(workdir)] == [["--i", str(ran)]]
    assert [run["status"] for run in status_json("halt")["sweep"]] == ["stopped"] * 4

    removed = cli("rm", "halt").stdout
    assert removed.splitlines()[-1] == "removed sweep halt" and all(f"halt-{i}" in removed for i in range(1, 5))
    store = JobStore(home)
    assert all(store.runs(f"halt-{i}") == [] for i in range(1, 5)) and not sweep_path(store, "halt").exists()
    gone = cli("status", "halt", ok=False)
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1 and "Traceback" not in gone.stderr


def test_a_sweep_of_many_runs_stopped_while_its_running_ones_end_starts_few_of_its_waiting_ones(home, workdir):
    """30 runs, 2 at a time; the running ones end while the sweep is being stopped. Every waiting
    run is sent its stop at once: stopped one by one, each waited for, a run's end let the next
    waiting one start, and the one after it, until nearly all had run (a sweep of 1000 took six
    minutes to stop, and ran 526 runs meanwhile)."""
    script = hold_script(workdir)
    values = ",".join(str(i) for i in range(1, 31))
    cli("submit", str(script), "--host", "--name", "flood", "--sweep", f"i={values}", "--max-running", "2", cwd=workdir)
    wait_for(lambda: len(started(workdir)) == 2, what="two runs to start")
    stopping = subprocess.Popen([*CLI, "stop", "flood"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    last = home / "jobs" / "flood-30" / "1" / "record.json"  # its stop is asked for last, before any is sent
    wait_for(lambda: json.loads(last.read_text()).get("stop_requested"), timeout=60, what="the stop to be asked of every run")
    (workdir / "release-all").touch()  # the running ones end now, and each run that starts from now on at once
    assert stopping.wait(120) == 0, stopping.stderr.read()
    ran = len(started(workdir))
    time.sleep(1)
    assert len(started(workdir)) == ran, "a run started after the sweep's stop had returned"
    runs = status_json("flood")["sweep"]
    assert ran <= 5, f"{ran} of 30 runs started while the sweep was being stopped"
    assert [run["status"] for run in runs].count("stopped") >= 30 - ran, runs
    assert all(run["status"] in ("stopped", "completed") for run in runs), runs
    stopping.stderr.close()


# -- 5. again, other values, a job's name, two at once ----------------------------------------------


def test_the_same_sweep_again_attaches_and_other_values_under_its_name_are_refused(home, workdir):
    script = hold_script(workdir)
    (workdir / "release-all").touch()
    again = ("submit", str(script), "--host", "--name", "same", "--sweep", "i=1,2", "--sweep", "j=a,b")
    cli(*again, cwd=workdir)
    wait_for(lambda: sweep_status("same") == "completed", what="the sweep to complete")
    out = cli(*again, cwd=workdir).stdout
    assert "Sweep 'same': 4 runs (4 already submitted (attached))." in out, out
    store = JobStore(home)
    assert [len(store.runs(f"same-{i}")) for i in range(1, 5)] == [1, 1, 1, 1]
    assert len(started(workdir)) == 4

    other = cli("submit", str(script), "--host", "--name", "same", "--sweep", "i=1,2,3", cwd=workdir, ok=False)
    assert other.returncode == 1 and other.stderr.count("\n") == 1, other.stderr
    assert "sweep 'same' was submitted with other values (4 runs)" in other.stderr and "--rerun" in other.stderr
    assert load_sweep(store, "same").params[0] == {"i": "1", "j": "a"}
    cli("submit", str(script), "--host", "--name", "same", "--sweep", "i=7,8", "--rerun", cwd=workdir)
    wait_for(lambda: sweep_status("same") == "completed", what="the new values to run")
    assert [run["params"] for run in status_json("same")["sweep"]] == [{"i": "7"}, {"i": "8"}]
    row = next(line for line in cli("list").stdout.splitlines() if line.startswith("same "))
    assert "sweep: 2 of 2 done" in row, row  # its runs now: not same-3 and same-4 of the values before

    cli("submit", str(script), "--host", "--name", "plain", cwd=workdir)
    taken = cli("submit", str(script), "--host", "--name", "plain", "--sweep", "i=1,2", cwd=workdir, ok=False)
    assert taken.returncode == 1 and "'plain' is the name of a job, not of a sweep" in taken.stderr and taken.stderr.count("\n") == 1
    assert load_sweep(store, "plain") is None and store.runs("plain-1") == []


def test_two_processes_starting_the_same_sweep_at_once_make_one_set_of_runs(home, workdir):
    script = hold_script(workdir)
    (workdir / "release-all").touch()
    go = workdir / "go"
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from jupyter_trainer.surfaces.cli import main
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        sys.exit(main(["submit", {str(script)!r}, "--host", "--name", "twice", "--sweep", "i=1,2,3", "--max-running", "2"]))
        """
    )
    both = [subprocess.Popen([sys.executable, "-c", code], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    go.touch()
    said = [process.communicate(timeout=120) for process in both]
    assert [process.returncode for process in both] == [0, 0], said
    # between them, each run started once, and attached to once (which process started which may vary)
    counts = [re.fullmatch(r"Sweep 'twice': 3 runs \((.*)\); at most 2 at once\.", out.splitlines()[0])[1] for out, _ in said]
    started_by = [int(m[1]) if (m := re.search(r"(\d) started", each)) else 0 for each in counts]
    attached_by = [int(m[1]) if (m := re.search(r"(\d) already submitted", each)) else 0 for each in counts]
    assert sum(started_by) == 3 and sum(attached_by) == 3, said
    store = JobStore(home)
    assert [len(store.runs(f"twice-{i}")) for i in (1, 2, 3)] == [1, 1, 1]
    wait_for(lambda: sweep_status("twice") == "completed", what="the sweep to complete")
    assert sorted(event["argv"][1] for event in started(workdir)) == ["1", "2", "3"]


# -- 6. with GPUs of a declared pool ----------------------------------------------------------------


def test_max_running_with_gpus_gives_each_running_run_its_own_gpu(home, workdir, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_GPUS", "0-2")
    script = hold_script(workdir)
    cli("submit", str(script), "--host", "--name", "gpu", "--gpus", "1", "--sweep", "i=1,2,3,4", "--max-running", "2", cwd=workdir)
    found = let_go_in_turn(workdir, 4, 2, "gpu")
    assert most_at_once(found) == 2
    spans = {}
    for event in found:
        spans.setdefault(event["id"], {}).update({event["event"]: event["t"], "gpus": event["gpus"]})
    assert all(span["gpus"] in ("0", "1", "2") for span in spans.values()), spans
    for one in spans.values():
        for other in spans.values():
            if one is not other and one["start"] <= other["start"] < one["end"]:
                assert one["gpus"] != other["gpus"], spans
    wait_for(lambda: sweep_status("gpu") == "completed", what="the sweep to complete")


# -- 7. %%sagemaker_fit --------------------------------------------------------------------------


def test_sagemaker_fit_refuses_a_sweep_in_one_line(home, workdir, monkeypatch, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(workdir)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_trainer")
    capsys.readouterr()  # another test of this process may have loaded it: IPython then says so
    for options in ("--sweep a=1,2", "--trials 3 --sweep a=uniform(0,1)", "--max-running 2"):
        result = shell.run_cell(f"%%sagemaker_fit --instance-type local --name sm {options}\nprint(1)\n")
        out, err = capsys.readouterr()
        said = (out + err).strip()
        assert not result.success and "Traceback" not in said and len(said.splitlines()) == 1, said
        assert "%sagemaker_fit takes no --sweep, --trials or --max-running" in said
    assert JobStore(home).runs("sm") == [] and not (home / "sweeps").exists()


# -- 8. the view ------------------------------------------------------------------------------------


def test_the_view_of_a_finished_sweep_shows_its_progress_values_and_best_run(home, workdir, quiet_comm):
    from jupyter_trainer.backends import DEFAULT
    from jupyter_trainer.view.compare_runs import load_runs
    from jupyter_trainer.view.sweep_view import SweepWidget

    script = hold_script(workdir)
    (workdir / "release-all").touch()
    cli("submit", str(script), "--host", "--name", "look", "--sweep", "loss=0.5,0.125,0.75", "--sweep", "tag=<b>x</b>", cwd=workdir)
    wait_for(lambda: sweep_status("look") == "completed", what="the sweep to complete")
    store = JobStore(home)
    sweep = load_sweep(store, "look")
    view = SweepWidget(sweep, load_runs(sweep.runs, None, store, DEFAULT, refresh=False), store, DEFAULT)
    view.poll(0)
    assert view.finished
    assert "sweep look" in view.header.value and "3 of 3 done" in view.header.value and ">completed<" in view.header.value
    assert view.stop_button.disabled
    body = view.body.value
    rows = body.split("<tbody>", 1)[1].split("</tr>")[:-1]
    assert len(rows) == 3
    assert ["\u2605 best" in row for row in rows] == [False, True, False], rows
    assert all("&lt;b&gt;x&lt;/b&gt;" in row and "<b>x" not in row for row in rows)  # a value is text, escaped
    assert [f"<td>{loss}</td>" in row for row, loss in zip(rows, ("0.5", "0.125", "0.75"))] == [True] * 3
    assert "and " not in body.split("</table>", 1)[1]


def test_the_view_of_a_sweep_of_many_runs_shows_at_most_40_rows(home, quiet_comm):
    from jupyter_trainer.backends.fake import FakeBackend
    from jupyter_trainer.view.compare_runs import load_runs
    from jupyter_trainer.view.sweep_view import SweepWidget

    fake = FakeBackend()
    backends, store = Backends(fake=fake), JobStore(home)
    sweep = submit_sweep(DetachedSpec(script="x", backend="fake", workdir=str(home)), ["i=" + ",".join(map(str, range(45)))],
                         name="wide", store=store, backends=backends).sweep  # fmt: skip
    for index, name in enumerate(sweep.runs):
        (store.home / "jobs" / name / "1" / "output.log").write_text(f"loss {abs(index - 30) + 1}\n")
        if index != 44:  # one still running: shown among the 40
            fake.finish(name, 0)
    view = SweepWidget(sweep, load_runs(sweep.runs, None, store, backends, refresh=False), store, backends)
    view.poll(0)
    assert "44 of 45 done, 1 running" in view.header.value
    rows = view.body.value.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("</tr>")[:-1]
    assert len(rows) == 40
    assert "and 5 more" in view.body.value
    best = [row for row in rows if "\u2605 best" in row]
    assert len(best) == 1 and "wide-31" in best[0] and "<td>30</td>" in best[0]
    assert any("wide-45" in row for row in rows)


# -- 9. a run removed from under its sweep ----------------------------------------------------------


def test_a_run_removed_from_under_its_sweep_is_said_removed(home, workdir, quiet_comm):
    script = hold_script(workdir)
    (workdir / "release-all").touch()
    cli("submit", str(script), "--host", "--name", "holey", "--sweep", "loss=0.5,0.25,0.75", cwd=workdir)
    wait_for(lambda: sweep_status("holey") == "completed", what="the sweep to complete")
    cli("rm", "holey-2")
    text = cli("status", "holey")
    assert "Traceback" not in text.stderr and text.stdout.startswith("sweep holey: 2 of 3 done, 1 removed (completed)")
    assert [line.split()[:3] for line in text.stdout.splitlines()[2:5]] == [["holey-1", "0.5", "completed"], ["holey-2", "0.25", "removed"], ["holey-3", "0.75", "completed"]]
    assert text.stdout.splitlines()[5:] == ["best: holey-1"]  # of the runs still there
    row = next(line for line in cli("list").stdout.splitlines() if line.startswith("holey "))
    assert "sweep: 2 of 3 done, 1 removed" in row, row
    runs = status_json("holey")["sweep"]
    assert runs[1] == {"name": "holey-2", "params": {"loss": "0.25"}, "status": "removed", "last": None, "best": None}
    compared = cli("compare", "holey", "--json", ok=False)
    assert "Traceback" not in compared.stderr
    assert compared.returncode == 0 and [row["name"] for row in json.loads(compared.stdout)] == ["holey-1", "holey-3"], compared.stderr

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_trainer")
    result = shell.run_cell("%train_attach holey")
    assert result.success
    removed = cli("rm", "holey").stdout
    assert removed.splitlines()[-1] == "removed sweep holey" and "holey-2" not in removed


# -- a grid in a container --------------------------------------------------------------------------


ARGV = """
import json, sys
print("argv", json.dumps(sys.argv[1:]), flush=True)
"""


@pytest.mark.docker
def test_a_grid_in_a_container_gives_each_run_its_values(docker_image, home, workdir):
    script = workdir / "argv.py"
    script.write_text(ARGV)
    odd = "a b'\"$(x)"
    cli("submit", str(script), "--image", docker_image, "--name", "boxed", "--sweep", "v=1," + odd.replace(",", "\\,"), "--", "--x", "{v}",
        cwd=workdir)  # fmt: skip
    wait_for(lambda: sweep_status("boxed") == "completed", timeout=90, what="the containers' runs to complete")
    for name, value in (("boxed-1", "1"), ("boxed-2", odd)):
        assert f"argv {json.dumps(['--x', value])}" in cli("logs", name).stdout
        assert status_json(name)["params"] == {"v": value}
