"""`--notify` for a sweep: one message, once the whole sweep has ended, with its best run.

A sweep's runs send nothing of their own. At submission a small process is started on this machine
(`start`), detached from the kernel or command that submitted it, in a session of its own: it is
given the URL on its stdin (never in its command line, environment or any file), follows the
sweep's runs as `jupyter-trainer status` does, every FOLLOW_SECONDS, and once none is left to
end, reads their metric as `status NAME` does, POSTs one message (backends/notify.py's `deliver`:
no redirects, bounded attempts) and writes what came of it to the sweep's `notified` file, which
`status NAME --json` shows. One process per sweep: it holds a lock for its life, and a sweep
already told is never told again (a re-run cell starts one that ends at once).

It lives as long as this machine keeps it (a reboot, or a laptop that submitted to a remote host
and then shut down, ends it, and the sweep then sends nothing); the runs do not depend on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..backends.notify import deliver, slack_text
from ..core.files import write_private_file
from ..core.store import JobStore
from ..core.wording import format_duration, readable
from ..errors import TrainerError
from ..jobs.sweeps import NOTIFIED_FILE, sweep_notification

FOLLOW_SECONDS = 10.0  # between two looks at the sweep's runs
LOCK_FILE = "notify.lock"
LOG_FILE = "notify.log"  # its own output: what went wrong, if anything (never the URL)
MARKS = {"completed": "✅", "failed": "❌", "stopped": "⏹"}


def start(store: JobStore, name: str, url: str) -> None:
    """Start the sweep's notifier, detached, the URL on its stdin."""
    files = store.sweep_files(name)
    with store.writing():
        files.mkdir(mode=0o700, exist_ok=True)
    with open(files / LOG_FILE, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_trainer.surfaces.sweep_notify", str(store.home), name],
            stdin=subprocess.PIPE, stdout=log, stderr=log, cwd="/", start_new_session=True, close_fds=True,
        )  # fmt: skip
    with contextlib.suppress(OSError):
        process.stdin.write(url.encode() + b"\n")
        process.stdin.close()


def message(name: str, json_view: dict, started: float | None, ended: float) -> dict:
    """The sweep's message: its status and progress, and its best run with its values."""
    from ..view.sweep_text import best_run

    runs = json_view["sweep"]
    best = best_run(runs, json_view["metric"])
    status = json_view["status"]
    text = f"{MARKS.get(status, '')} sweep {name} {status}: {json_view['progress']}"
    if started is not None:
        text += f" after {format_duration(max(0.0, ended - started))}"
    text += f" on {json_view['backend']}"
    found = None
    if best is not None:
        run = runs[best]
        values = ", ".join(f"{key}={readable(value)}" for key, value in run["params"].items())
        text += f"; best {run['name']} ({json_view['metric']} {run['best']:.4g}{'; ' + values if values else ''})"
        found = {"name": run["name"], "params": run["params"], "metric": json_view["metric"], "value": run["best"]}
    return {
        "text": slack_text(text.strip()), "name": name, "kind": "sweep", "status": status,
        "progress": json_view["progress"], "backend": json_view["backend"], "runs": len(runs), "best": found,
        "started_at": started, "ended_at": ended,
    }  # fmt: skip


def follow_and_tell(store: JobStore, name: str, url: str, backends) -> None:
    from ..jobs.job import one_poll
    from ..jobs.sweeps import load_sweep, sweep_jobs
    from ..view.sweep_text import sweep_json

    files = store.sweep_files(name)
    while True:
        sweep = load_sweep(store, name)
        if sweep is None:
            return  # removed
        jobs = [job for job in sweep_jobs(store, sweep, backends) if not isinstance(job, TrainerError)]
        with one_poll([job.record for job in jobs], backends):
            left = [job for job in jobs if not _ended(job)]
        if not left:
            break
        time.sleep(FOLLOW_SECONDS)
    started = [job.record.started_at for job in jobs if job.record.started_at is not None]
    ended = [job.record.ended_at for job in jobs if job.record.ended_at is not None]
    said = message(
        name, sweep_json(name, store, backends), min(started) if started else None, max(ended) if ended else time.time()
    )
    result = deliver(url, said)
    with store.writing():
        write_private_file(files / NOTIFIED_FILE, json.dumps(result).encode())


def _ended(job) -> bool:
    if job.record.status.is_final:
        return True
    try:
        return job.refresh().record.status.is_final
    except TrainerError:  # its runtime cannot be asked now: asked again at the next look
        return False


def main(argv: list[str]) -> int:
    from ..backends import DEFAULT

    home, name = argv[1], argv[2]
    url = sys.stdin.readline().strip()
    sys.stdin.close()
    store = JobStore(Path(home))
    files = store.sweep_files(name)
    lock = os.open(files / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another follows this sweep already
    if sweep_notification(store, name) is not None or not url:
        return 0
    try:
        follow_and_tell(store, name, url, DEFAULT)
    except TrainerError as error:
        print(f"sweep {name}: {error.render()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
