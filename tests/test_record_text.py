"""Words a job writes into its own record (its run directory is its to write) reach the listing
as a person is shown them: never what no terminal can be written."""

import json
import subprocess
import sys

from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import Job


def cli(*args, **options):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=60, **options)


def test_a_lone_surrogate_in_a_records_backend_never_breaks_list(home, workdir):
    (workdir / "bad.py").write_text("raise SystemExit(3)\n")
    assert cli("submit", "bad.py", "--host", "--name", "odd-backend", cwd=workdir).returncode == 0
    job = Job.load("odd-backend")
    assert job.wait(timeout=60) is Status.FAILED
    record_file = job.run_dir / "record.json"
    data = json.loads(record_file.read_text())
    data["backend"] = "ho\ud800\x1b[2Jst"
    record_file.write_text(json.dumps(data))
    listed = cli("list")
    assert "Traceback" not in listed.stderr and listed.returncode == 0, listed.stderr
    assert "odd-backend" in listed.stdout and "\x1b" not in listed.stdout
