"""--notify on a sweep: one message to a real HTTP server once every run has ended, with the best
run and its values, sent with no kernel or command of ours left running; its runs send none."""

import json
import subprocess
import sys
import time

import pytest
from conftest import wait_for
from test_notify import TOKEN, Receiver, everything_in

CLI = [sys.executable, "-m", "jupyter_trainer"]
SCRIPT = """import sys, time
loss = float(sys.argv[sys.argv.index('--loss') + 1])
time.sleep(1)
print('loss', loss, flush=True)
sys.exit(1 if loss > 0.7 else 0)
"""


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def cli(*args, cwd=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_a_sweep_tells_once_when_all_its_runs_have_ended_with_its_best_run(home, workdir, receiver):
    (workdir / "train.py").write_text(SCRIPT)
    submit = ["submit", "train.py", "--host", "--name", "told", "--sweep", "loss=0.5,0.25,0.75", "--notify", receiver.url]
    done = cli(*submit, cwd=workdir)
    assert done.returncode == 0, done.stderr  # the command has ended: the message comes all the same
    wait_for(lambda: receiver.received, timeout=90, what="the sweep's message")
    path, _, message = receiver.received[0]
    assert path == f"/hooks/{TOKEN}"
    assert {key: message[key] for key in ("name", "kind", "status", "progress", "backend", "runs")} == {
        "name": "told", "kind": "sweep", "status": "failed", "progress": "2 of 3 done, 1 failed", "backend": "host", "runs": 3,
    }  # fmt: skip
    assert message["best"] == {"name": "told-2", "params": {"loss": "0.25"}, "metric": "loss", "value": 0.25}
    assert message["text"].startswith("❌ sweep told failed: 2 of 3 done, 1 failed after ")
    assert message["text"].endswith("on host; best told-2 (loss 0.25; loss=0.25)")
    status = json.loads(cli("status", "told", "--json").stdout)
    assert status["notification"]["delivered"] is True and status["notification"]["detail"] == "HTTP 200"
    again = cli(*submit, cwd=workdir)  # the cell run again attaches, and tells nothing more
    assert again.returncode == 0 and "3 already submitted (attached)" in again.stdout, again.stdout + again.stderr
    time.sleep(2)
    assert len(receiver.received) == 1  # one message for the sweep, none of its runs' own
    assert TOKEN.encode() not in everything_in(home)  # the URL is never stored
