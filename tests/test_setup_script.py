""".ci/setup.sh, which .ci/run and run_demo.sh use to install what a fresh machine lacks."""

import os
import re
import signal
import subprocess
import time

import pytest
from conftest import REPO, wait_for


def running(command: str) -> bool:
    """Whether a process runs `command` (read from /proc: a fresh machine may have no pgrep)."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                if file.read().replace(b"\0", b" ").strip() == command.encode():
                    return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("when", ["a while after the step started", "as the step starts"])
def test_an_interrupted_install_does_not_run_on(tmp_path, when):
    """Ctrl-C while a step runs, however soon after it started: the step is stopped too. The step
    that starts by interrupting its own process group (`kill -INT 0`, as a Ctrl-C at that moment
    would) is that moment, whatever the machine's load."""
    marker = f"sleep {4000 + os.getpid() % 1000}.{len(when)}"  # one this test alone starts
    step = marker if when.startswith("a while") else f"sh -c 'kill -INT 0; exec {marker}'"
    script = tmp_path / "install.sh"
    script.write_text(
        f"set -euo pipefail\nsetup_work={tmp_path}/work\nsource {REPO}/.ci/setup.sh\n"
        f"trap 'echo cleaned up' EXIT\nwith_progress installing {tmp_path}/install.log {step}\n"
    )
    # as from a terminal: a shell started in the background of another (as CI may start the tests)
    # ignores SIGINT, and what ignores it on entry cannot trap it
    process = subprocess.Popen(
        ["bash", str(script)], start_new_session=True, stdout=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    if when.startswith("a while"):
        wait_for(lambda: running(marker), what="the install to start")
        time.sleep(0.5)
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in the terminal
    assert process.wait(timeout=30) != 0 and "cleaned up" in process.stdout.read()
    wait_for(lambda: not running(marker), timeout=30, what="the install to be stopped")


def test_a_long_step_says_how_it_is_getting_on(tmp_path):
    script = tmp_path / "install.sh"
    script.write_text(
        f"set -euo pipefail\nsetup_work={tmp_path}/work\nsource {REPO}/.ci/setup.sh\n"
        f"with_progress downloading {tmp_path}/step.log sh -c 'for i in $(seq 20); do echo fetched part $i; sleep 1; done'\n"
    )
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    # one line, 15 s in (a second or two more on a loaded machine), with the step's last line then
    assert len(lines) == 1 and re.fullmatch(r"   \.\.\. downloading: 1[5-8]s \(fetched part 1[3-9]\)", lines[0]), done.stdout
