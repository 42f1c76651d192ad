"""Tell a URL that a job has ended: run by the job's supervisor (supervise.sh) once it has written
the exit code, wherever the job runs, with no notebook or kernel needed.

    printf 'URL\\nJOB\\nCHECK\\n' | python3 -I -S -c "$(notify.py as the supervisor read it)" \\
        EXIT_CODE HOW STARTED_AT STOP_CONTAINER 3<>notified 4<output.log

What it must keep from the job comes on its stdin: the URL (a webhook's token is often in it),
what names the job, and the key it signs its result with (so that a result the job forged is
not recorded). The supervisor read all of it, and this code, before the job started, and runs it
isolated from the job's directory and site: the URL is in no environment, command line or file
the job can read, and nothing of the job's is imported here. The result file and the log are
open as fds 3 and 4, opened by the supervisor before the job started.

It POSTs one JSON message with a `text` field (which Slack, Mattermost and other incoming
webhooks show) and the job's facts, without following redirects, each attempt bounded in time;
tries again for about half a minute; writes what came of it into fd 3, where the next look at the
job records it. Whatever happens, the job's outcome is already written: a notification never
changes it. With STOP_CONTAINER 1 it then stops the container, as the supervisor would have.

Standard library only, Python 3.6 or later: it runs in the job's container, on the image's python3.
Exit codes and durations are said, and the job's words shown, as everywhere else:
jupyter_trainer/wording.py's code is put before this file's in what the supervisor runs (see
base.notifier_source).
"""

import hashlib
import hmac
import json
import os
import re
import signal
import sys
import time

try:  # as a module of the package; run by the supervisor, wording.py's code comes before this
    from ..core.wording import describe_exit_code, format_duration, readable
except ImportError:
    pass

RESULT_FD, LOG_FD = (
    3,
    4,
)  # the run's notified and output.log files (store.NOTIFIED_FILE, LOG_FILE), opened by the supervisor
ATTEMPT_SECONDS = 30  # the most one attempt may take, however the receiver answers
PAUSES = (2, 8, 20)  # seconds before each new attempt
TAIL_BYTES = 64 * 1024  # of the log, read for the exception the script ended with
DETAIL_CHARS = 300
PYTHON_RAISED = 1  # the exit code of a Python script that ended with an exception
RANK_PREFIX = re.compile(r"^\[(?:default|rank)\d+\]:")  # a torchrun rank's line, teed into the log
EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Fault))(?::\s?.*)?$")
# what every jupyter_trainer process in a container has in its command line (written so that this
# code, which a notifier's command line holds, does not contain it)
RUN_FILES_MARK = "/jupyter_trainer" + "/jobs/"


class TooSlow(Exception):
    pass


def main(argv):
    code, how, started = int(argv[1]), argv[2], float(argv[3])
    stop_container = argv[4:5] in (["1"], ["2"])
    # 2: the container's main process is jupyter_trainer's keeper, which USR1 ends for good
    stop_signal = signal.SIGUSR1 if argv[4:5] == ["2"] else signal.SIGTERM
    restarts = int(argv[5]) if argv[5:6] and argv[5].isdigit() else 0
    url, job_line, check = (sys.stdin.readline().strip() for _ in range(3))
    try:
        job = json.loads(job_line)
    except ValueError:
        job = {}
    ended = time.time()
    message = build_message(job, code, how, started, ended, read_tail(LOG_FD), restarts)
    result = deliver(url, message)
    write_result(RESULT_FD, signed(result, check))
    if stop_container and not other_jobs_running():
        os.kill(1, stop_signal)  # the container's init passes it on to its keep-alive process
    return 0


def other_jobs_running():
    """Whether any jupyter_trainer job's supervisor (from any store) still runs in this container:
    every run's files are under a .../jupyter_trainer/jobs/ directory."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/{}/cmdline".format(entry), "rb") as handle:
                if RUN_FILES_MARK.encode() in handle.read():
                    return True
        except OSError:
            continue
    return False


def build_message(job, code, how, started, ended, log_tail, restarts=0):
    status = "stopped" if how == "stopped" else "completed" if code == 0 else "failed"
    reason = ""
    if status == "failed":
        raised = exception_line(log_tail.split("\n")) if code == PYTHON_RAISED else ""
        reason = readable(raised) or describe_exit_code(code)  # the job's words, as the views show them
    name, run, backend = str(job.get("name", "?")), job.get("run", 1), str(job.get("backend", "?"))
    took = format_duration(ended - started)
    mark = {"completed": "✅", "failed": "❌", "stopped": "⏹"}[status]
    text = "{} {}{} {} after {} on {}".format(
        mark, name, "" if run == 1 else " (run {})".format(run), status, took, backend
    )
    if status == "failed":
        text += ": " + reason
    if restarts:
        text += " ({} restart{})".format(restarts, "" if restarts == 1 else "s")
    return {
        "text": slack_text(text),
        "name": name,
        "run": run,
        "backend": backend,
        "status": status,
        "exit_code": code,
        "reason": reason,
        "started_at": started,
        "ended_at": ended,
        "restarts": restarts,
    }


def slack_text(text):
    """Text as chat webhooks show it, not as markup: what the script raised could hold
    `<!channel>` or a disguised link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def deliver(url, message):
    """POST the message; what came of it, never quoting the URL (it may hold a token)."""
    # imported here, when a message is sent: the job model imports this module for its words,
    # and every command would pay for urllib's start (http.client, email, ssl)
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        """A redirect is an answer, not a place to send the message (urllib would send it on as a
        GET without its body, and the token could go to another host)."""

        def redirect_request(self, request, fp, code, message, headers, new_url):
            return None

    body = json.dumps(message).encode("utf-8")
    opener = urllib.request.build_opener(NoRedirect)
    detail, attempt = "no URL to notify", 0
    signal.signal(signal.SIGALRM, _too_slow)
    for attempt, pause in enumerate((0,) + PAUSES, start=1):
        time.sleep(pause)
        request = urllib.request.Request(
            url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "jupyter-trainer"}
        )
        signal.alarm(ATTEMPT_SECONDS)
        try:
            with opener.open(request, timeout=ATTEMPT_SECONDS) as response:
                return {
                    "delivered": True,
                    "detail": "HTTP {}".format(response.status),
                    "attempts": attempt,
                    "at": time.time(),
                }
        except urllib.error.HTTPError as exc:
            detail = "HTTP {} {}".format(exc.code, exc.reason)
            if exc.code < 500 and exc.code != 429:  # the receiver refused it: trying again will not help
                break
        except TooSlow:
            detail = "no answer within {} s".format(ATTEMPT_SECONDS)
        except Exception as exc:  # an unreachable host, a malformed answer: said, never raised
            reason = getattr(exc, "reason", None) or exc
            detail = "{}: {}".format(type(exc).__name__, reason).replace(url, "(the URL)")
        finally:
            signal.alarm(0)
    return {"delivered": False, "detail": detail[:DETAIL_CHARS], "attempts": attempt, "at": time.time()}


def _too_slow(signum, frame):
    raise TooSlow()


def signed(result, check):
    """The result with an HMAC of it keyed by the check: the check itself is never written, so a
    job that reads the file can at most copy the real result, never make up another."""
    body = json.dumps(result, sort_keys=True).encode("utf-8")
    return dict(result, signature=hmac.new(check.encode("utf-8"), body, hashlib.sha256).hexdigest())


def write_result(fd, result):
    data = json.dumps(result).encode("utf-8")
    # the file was created by the submitter and is only written into: it keeps its owner and mode
    try:
        with open(fd, "r+b") as handle:
            handle.seek(0)
            handle.write(data)
            handle.truncate()
    except OSError:
        pass


def read_tail(fd):
    try:
        with open(fd, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def exception_line(lines):
    """The last traceback's final line (`KeyError: 'images'`, or a SyntaxError's), or "": the line
    after a traceback's frames that names an exception, cut to 300 characters. A torchrun rank's
    lines count without their `[default0]:` prefix, and an exception that says nothing (torchrun's
    own `ChildFailedError:` after a rank failed) does not hide the rank's. (The one reading of it:
    a job's record takes its reason from it too, see Job.refresh.)"""
    seen_traceback, found = False, ""
    for line in lines:
        line = RANK_PREFIX.sub("", line.rsplit("\r", 1)[-1])
        if line.startswith("Traceback (most recent call last)") or line.startswith('  File "'):
            seen_traceback = True
        elif seen_traceback and line.strip() and not line.startswith((" ", "\t")):
            if EXCEPTION.match(line.strip()) and not (found and line.strip().endswith(":")):
                found = line.strip()[:DETAIL_CHARS]
            seen_traceback = False
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv))
