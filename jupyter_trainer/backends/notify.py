"""Tell a URL that a job has ended: run by the job's supervisor (supervise.sh) once it has written
the exit code, wherever the job runs, with no notebook or kernel needed.

    python3 - RUN_DIR EXIT_CODE HOW STARTED_AT STOP_CONTAINER <notify.py 3<>notified 4<output.log

The URL and what names the job come from the environment (JUPYTER_TRAINER_NOTIFY_URL,
JUPYTER_TRAINER_NOTIFY_JOB), never from a file the job could rewrite or a command line others
can read. It POSTs one JSON message with a `text` field (which Slack, Mattermost and other
incoming webhooks show) and the job's facts, tries again on a failure for about half a minute,
and writes what came of it to RUN_DIR/notified (open as fd 3, with the log as fd 4: the supervisor
opened them while the run was surely there), where the next look at the job records it.
Whatever happens, the job's outcome is already written: a notification never changes it.
With STOP_CONTAINER 1 it then stops the container, as the supervisor would have (see supervise.sh).

Standard library only, Python 3.6 or later: it runs in the job's container, on the image's python3.
"""

import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

URL_VARIABLE = "JUPYTER_TRAINER_NOTIFY_URL"
JOB_VARIABLE = "JUPYTER_TRAINER_NOTIFY_JOB"
RESULT_FILE = "notified"  # store.NOTIFIED_FILE
LOG_FILE = "output.log"  # store.LOG_FILE
RESULT_FD, LOG_FD = 3, 4  # the two, opened by the supervisor
TIMEOUT = 10  # seconds per attempt
PAUSES = (2, 8, 20)  # seconds before each new attempt
TAIL_BYTES = 64 * 1024  # of the log, read for the exception the script ended with
DETAIL_CHARS = 300
EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Fault))(?::\s?.*)?$")
SIGNALS = {9: "killed (SIGKILL: out of memory, or killed by hand)", 15: "terminated (SIGTERM)", 2: "interrupted (SIGINT)"}


def main(argv):
    run_dir, code, how, started = argv[1], int(argv[2]), argv[3], float(argv[4])
    stop_container = argv[5:6] == ["1"]
    url = os.environ.get(URL_VARIABLE, "")
    job = json.loads(os.environ.get(JOB_VARIABLE) or "{}")
    ended = time.time()
    message = build_message(job, code, how, started, ended, read_tail(LOG_FD, os.path.join(run_dir, LOG_FILE)))
    result = deliver(url, message)
    write_result(RESULT_FD, os.path.join(run_dir, RESULT_FILE), result)
    if stop_container and not other_jobs_running():
        os.kill(1, 15)  # the container's init passes TERM on to its keep-alive process
    return 0


def other_jobs_running():
    """Whether any other jupyter_trainer process (a job's supervisor or notifier, from any store)
    runs in this container: every run's files are under a .../jupyter_trainer/jobs/ directory."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/{}/cmdline".format(entry), "rb") as handle:
                if b"/jupyter_trainer/jobs/" in handle.read():
                    return True
        except OSError:
            continue
    return False


def build_message(job, code, how, started, ended, log_tail):
    status = "stopped" if how == "stopped" else "completed" if code == 0 else "failed"
    reason = ""
    if status == "failed":
        reason = exception_line(log_tail.splitlines()) or describe_code(code)
    name, run, backend = job.get("name", "?"), job.get("run", 1), job.get("backend", "?")
    took = format_duration(ended - started)
    mark = {"completed": "✅", "failed": "❌", "stopped": "⏹"}[status]
    text = "{} {}{} {} after {} on {}".format(mark, name, "" if run == 1 else " (run {})".format(run), status, took, backend)
    if status == "failed":
        text += ": " + reason
    return {
        "text": text,
        "name": name,
        "run": run,
        "backend": backend,
        "status": status,
        "exit_code": code,
        "reason": reason,
        "started_at": started,
        "ended_at": ended,
    }


def deliver(url, message):
    """POST the message; what came of it, never quoting the URL (it may hold a token)."""
    body = json.dumps(message).encode("utf-8")
    detail = "no URL to notify"
    for attempt, pause in enumerate((0,) + PAUSES, start=1):
        time.sleep(pause)
        request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "jupyter-trainer"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return {"delivered": True, "detail": "HTTP {}".format(response.status), "attempts": attempt, "at": time.time()}
        except urllib.error.HTTPError as exc:
            detail = "HTTP {} {}".format(exc.code, exc.reason)
            if exc.code < 500 and exc.code != 429:  # the receiver refused it: trying again will not help
                break
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            detail = "{}: {}".format(type(exc).__name__, reason if not isinstance(reason, str) or url not in reason else "(the URL)")
    return {"delivered": False, "detail": detail[:DETAIL_CHARS], "attempts": attempt, "at": time.time()}


def write_result(fd, path, result):
    data = json.dumps(result).encode("utf-8")
    # the file was created by the submitter and is only written into: it keeps its owner and mode
    try:
        handle = open(fd if is_open(fd) else path, "r+b", closefd=True)
    except OSError:
        return
    with handle:
        handle.seek(0)
        handle.write(data)
        handle.truncate()


def read_tail(fd, path):
    try:
        handle = open(fd if is_open(fd) else path, "rb")
    except OSError:
        return ""
    with handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - TAIL_BYTES))
        return handle.read().decode("utf-8", errors="replace")


def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def exception_line(lines):
    """The last traceback's final line (`KeyError: 'images'`), or "" (as metrics.exception_line)."""
    seen_traceback, found = False, ""
    for line in lines:
        line = line.rsplit("\r", 1)[-1]
        if line.startswith("Traceback (most recent call last)"):
            seen_traceback, found = True, ""
        elif seen_traceback and not line.startswith((" ", "\t")) and EXCEPTION.match(line.strip()):
            found, seen_traceback = line.strip()[:DETAIL_CHARS], False
    return found


def describe_code(code):
    if code > 128 and code - 128 in SIGNALS:
        return "exit code {}: {}".format(code, SIGNALS[code - 128])
    return "exit code {}".format(code)


def format_duration(seconds):
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return "{}h{:02d}m".format(hours, minutes)
    if minutes:
        return "{}m{:02d}s".format(minutes, seconds)
    return "{}s".format(seconds)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
