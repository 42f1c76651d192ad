"""A sweep of 200 real runs on --host, at most 20 at once: every run starts by itself and ends with
its own values, and what shows the sweep stays one row, one bounded view and one bounded answer."""

import json
import subprocess
import sys

import pytest
from conftest import wait_for

from jupyter_trainer.core.store import JobStore

RUNS = 200
CLI = [sys.executable, "-m", "jupyter_trainer"]
SCRIPT = "import sys\nlr = float(sys.argv[sys.argv.index('--lr') + 1])\nprint('loss', abs(lr - 0.5) + 0.01, flush=True)\n"


def cli(*args, cwd=None):
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.mark.machine_wide  # 200 runs' processes, 20 at once: alone, not beside other tests' timings
def test_a_sweep_of_200_runs_is_one_row_one_bounded_view_and_every_run_ends_with_its_values(home, workdir, quiet_comm):
    from jupyter_trainer.backends import DEFAULT
    from jupyter_trainer.jobs.sweeps import load_sweep
    from jupyter_trainer.view.compare_runs import load_runs
    from jupyter_trainer.view.sweep_view import MOST_ROWS, SweepWidget

    (workdir / "train.py").write_text(SCRIPT)
    values = ",".join(f"{index / RUNS:.3f}" for index in range(RUNS))
    said = cli("submit", "train.py", "--host", "--name", "many", "--sweep", f"lr={values}", "--max-running", "20", cwd=workdir)
    assert f"Sweep 'many': {RUNS} runs ({RUNS} started); at most 20 at once." in said

    def finished():
        facts = json.loads(cli("status", "many", "--json"))
        return facts if facts["status"] in ("completed", "failed", "lost") else None

    facts = wait_for(finished, timeout=600, interval=2, what=f"the {RUNS} runs to end")
    assert facts["status"] == "completed", [run for run in facts["sweep"] if run["status"] != "completed"][:3]
    assert len(facts["sweep"]) == RUNS
    for index, run in enumerate(facts["sweep"]):
        lr = f"{index / RUNS:.3f}"
        assert run["name"] == f"many-{index + 1}" and run["params"] == {"lr": lr}
        assert run["best"] == abs(float(lr) - 0.5) + 0.01
    assert min(facts["sweep"], key=lambda run: run["best"])["name"] == "many-101"  # lr 0.500

    listed = cli("list").splitlines()
    assert len(listed) == 2 and listed[1].split()[0] == "many" and f"sweep: {RUNS} of {RUNS} done" in listed[1]
    assert len(cli("list", "--all").splitlines()) == 2 + RUNS

    store = JobStore(home)
    sweep = load_sweep(store, "many")
    view = SweepWidget(sweep, load_runs(sweep.runs, None, store, DEFAULT, refresh=False), store, DEFAULT)
    view.poll(0)
    assert f"{RUNS} of {RUNS} done" in view.header.value
    rows = view.body.value.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("</tr>")[:-1]
    assert len(rows) == MOST_ROWS and f"and {RUNS - MOST_ROWS} more" in view.body.value
    assert any("many-101" in row and "\u2605 best" in row for row in rows)
    # what is sent to the browser at each update stays bounded, whatever the sweep's size
    assert len(view.body.value) < 200_000, len(view.body.value)
