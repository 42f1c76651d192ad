"""A hostile job, a hostile log and a second kernel: every promise holds.

Each test here stands for an attack or an unlucky moment that once broke a
promise; it runs on the backend where the defect lived.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import wait_for

from jupyter_trainer.job import get_job
from jupyter_trainer.jobs import Status
from jupyter_trainer.spec import build_spec
from jupyter_trainer.submit import submit_detached


def submit(script, where, workdir, name, **options):
    spec = build_spec(textwrap.dedent(script), container=None, workdir=str(workdir), gpus=None, **where, **options)
    return submit_detached(spec, name=name).job


# -- two kernels, one name -----------------------------------------------------------

SUBMITTER = r"""
import json, os, sys, time
from jupyter_trainer.errors import TrainerError
from jupyter_trainer.spec import build_spec
from jupyter_trainer.submit import submit_detached

name, script, go, workdir = sys.argv[1:5]
spec = build_spec(script, host=True, image=None, container=None, workdir=workdir, gpus=None)
while not os.path.exists(go):  # every submitter starts at the same moment
    pass
try:
    submission = submit_detached(spec, name=name)
    print(json.dumps({"attached": submission.attached, "run": submission.job.run}))
except TrainerError as error:
    print(json.dumps({"error": str(error)}))
"""


@pytest.mark.parametrize("same_cell", [True, False], ids=["same-cell", "different-cells"])
def test_two_kernels_submitting_one_name_at_once_launch_it_once(same_cell, workdir, home, tmp_path):
    for attempt in range(8):
        name, go = f"race-{attempt}", tmp_path / f"go-{attempt}"
        scripts = ["print('one')\n", "print('one')\n" if same_cell else "print('two')\n"]
        submitters = [
            subprocess.Popen([sys.executable, "-c", SUBMITTER, name, script, str(go), str(workdir)], stdout=subprocess.PIPE, text=True)
            for script in scripts
        ]
        go.touch()
        outcomes = [json.loads(process.communicate(timeout=60)[0]) for process in submitters]
        launched = [outcome for outcome in outcomes if outcome.get("attached") is False]
        assert len(launched) == 1, outcomes
        other = next(outcome for outcome in outcomes if outcome is not launched[0])
        if same_cell:
            assert other == {"attached": True, "run": 1}, outcomes
        else:
            assert "error" in other and "different cell" in other["error"], outcomes
        assert sorted(os.listdir(home / "jobs" / name)) == ["1"]
        assert get_job(name).wait(timeout=30) is Status.COMPLETED
