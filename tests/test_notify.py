"""--notify: a message to a real HTTP server when a job ends, sent by its supervisor with no kernel left."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import wait_for

from jupyter_trainer import get_job
from jupyter_trainer.backends import build_spec
from jupyter_trainer.backends import notify as notifier
from jupyter_trainer.errors import InvalidOption
from jupyter_trainer.jobs.submit import submit_detached

TOKEN = "T0KEN-b7f3a9c1e5d2"  # where a webhook keeps its secret: in its path


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps what is POSTed to it and answers with `status`."""

    def __init__(self, status=200, bind="127.0.0.1", delay=0.0):
        received, answer = [], status

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers["Content-Length"])
                received.append((self.path, self.headers["Content-Type"], json.loads(self.rfile.read(length))))
                time.sleep(delay)
                self.send_response(answer)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.received = received
        self.server = http.server.ThreadingHTTPServer((bind, 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/{TOKEN}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def host_job(name, script, workdir, **options):
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None, **options)
    return submit_detached(spec, name=name).job


def everything_in(directory):
    return b"".join(path.read_bytes() for path in directory.rglob("*") if path.is_file() and not path.is_symlink())


def test_the_message_reaches_the_url_after_the_kernel_that_started_the_job_is_gone(home, workdir, receiver):
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", env={**os.environ})
    try:
        client.execute_interactive("%load_ext jupyter_trainer", timeout=60)
        cell = (
            f"%%train_detached --host --name told --workdir {workdir} --notify {receiver.url} --no-widget\n"
            "import os, time\nprint(sorted(k for k in os.environ if 'NOTIFY' in k), flush=True)\ntime.sleep(3)\nprint('done')\n"
        )
        reply = client.execute_interactive(cell, timeout=60)
        assert reply["content"]["status"] == "ok", reply
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)  # killed while the job still runs
    job = get_job("told")
    assert job.status.value == "running" and receiver.received == []
    wait_for(lambda: receiver.received, timeout=60, what="the notification")
    path, content_type, message = receiver.received[0]
    assert path == f"/hooks/{TOKEN}" and content_type == "application/json"
    assert {key: message[key] for key in ("name", "run", "backend", "status", "exit_code", "reason")} == {
        "name": "told", "run": 1, "backend": "host", "status": "completed", "exit_code": 0, "reason": "",
    }  # fmt: skip
    assert message["text"].startswith("✅ told completed after") and message["text"].endswith("on host")
    assert 0 <= message["ended_at"] - message["started_at"] < 30 and abs(message["ended_at"] - time.time()) < 60
    assert job.logs().splitlines()[0] == "[]"  # the job never saw the URL
    record = json.loads(cli("status", "told", "--json").stdout)
    assert record["notification"]["delivered"] is True and record["notification"]["detail"] == "HTTP 200"
    assert record["options"]["notify_to"] == f"http://127.0.0.1:{receiver.server.server_address[1]}/…"
    assert TOKEN.encode() not in everything_in(home)  # never stored


def test_a_failed_job_says_what_it_raised(home, workdir, receiver):
    job = host_job("broken", "batch = {}\nbatch['images']\n", workdir, notify=receiver.url)
    wait_for(lambda: receiver.received, timeout=60, what="the notification")
    message = receiver.received[0][2]
    assert message["status"] == "failed" and message["exit_code"] == 1 and message["reason"] == "KeyError: 'images'"
    assert message["text"].startswith("❌ broken failed after") and message["text"].endswith(": KeyError: 'images'")
    assert job.refresh().record.notification["delivered"] is True


def test_a_stopped_job_says_it_was_stopped(home, workdir, receiver):
    job = host_job("halted", "import time\ntime.sleep(600)\n", workdir, notify=receiver.url)
    wait_for(lambda: job.refresh().status.value == "running", what="the job to start")
    job.stop()
    wait_for(lambda: receiver.received, timeout=60, what="the notification")
    assert receiver.received[0][2]["status"] == "stopped"


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("answer", [404, None])
def test_a_failed_delivery_is_recorded_and_the_job_keeps_its_outcome(home, workdir, monkeypatch, answer):
    server = Receiver(status=answer) if answer else None
    url = server.url if server else f"http://127.0.0.1:{closed_port()}/hooks/{TOKEN}"
    try:
        job = host_job(f"unheard-{answer}", "print('fine')\n", workdir, notify=url)
        assert job.wait(timeout=30).value == "completed"
        wait_for(lambda: job.refresh().record.notification, timeout=90, what="the notifier to give up")
    finally:
        if server:
            server.close()
    notification = job.record.notification
    assert notification["delivered"] is False and notification["attempts"] >= 1
    assert notification["detail"] == "HTTP 404 Not Found" if answer else "ConnectionRefusedError" in notification["detail"] or "Connection refused" in notification["detail"]
    assert job.status.value == "completed" and TOKEN not in notification["detail"]
    assert TOKEN.encode() not in everything_in(home)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x", "hooks.slack.com/services/x", "https://", "http://exa mple.com/", "javascript:alert(1)",
        "https://h:port/x", "http://evil.com\\", "http://user:pw@example.com/x", "http://example.com/\x7f", "http://example.com/é",
    ],
)  # fmt: skip
def test_bad_urls_are_one_clear_line_that_never_shows_the_path(url):
    with pytest.raises(InvalidOption) as error:
        build_spec("print(1)", host=True, workdir="/tmp", notify=url + "/" + TOKEN)
    assert str(error.value).startswith("--notify") and str(error.value).count("\n") == 0 and TOKEN not in str(error.value)


def test_notify_can_be_configured_and_a_flag_wins(home, workdir, receiver):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_trainer")
    other = Receiver()
    shell.run_line_magic("config", f"TrainerMagics.notify = {receiver.url!r}")
    try:
        shell.run_cell_magic("train_detached", f"--host --name configured --workdir {workdir} --no-widget", "print('hi')\n")
        shell.run_cell_magic("train_detached", f"--host --name flagged --workdir {workdir} --no-widget --notify {other.url}", "print('hi')\n")
        wait_for(lambda: receiver.received and other.received, timeout=60, what="the notifications")
        assert [m["name"] for _, _, m in receiver.received] == ["configured"] and [m["name"] for _, _, m in other.received] == ["flagged"]
    finally:
        shell.run_line_magic("config", "TrainerMagics.notify = None")
        other.close()


def cli(*args):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=60)


# -- from inside a container ----------------------------------------------------------------


@pytest.mark.docker
def test_a_container_job_reaches_this_machine_as_host_docker_internal(docker_client, docker_image, workdir, home):
    server = Receiver(bind="0.0.0.0", delay=2)  # the bridge's gateway is one of this machine's addresses
    try:
        url = f"http://host.docker.internal:{server.port}/hooks/{TOKEN}"
        spec = build_spec("print('in a container')\n", image=docker_image, workdir=str(workdir), notify=url, stop_container_when_done=True)
        job = submit_detached(spec, name="boxed").job
        container = docker_client.containers.get(job.record.runtime["container_id"])
        assert job.wait(timeout=90).value == "completed"  # at once: the notifier is not waited for
        wait_for(lambda: server.received, timeout=60, what="the notification from the container")
        message = server.received[0][2]
        assert (message["name"], message["backend"], message["status"]) == ("boxed", "docker", "completed")
        # the container is stopped once the message is out, not before
        wait_for(lambda: container.reload() or container.status == "exited", timeout=60, what="the container to stop")
        wait_for(lambda: job.refresh().record.notification, timeout=30, what="the result in the record")
        assert job.record.notification["delivered"] is True
        assert TOKEN not in json.dumps(container.attrs) and TOKEN.encode() not in everything_in(home)
    finally:
        server.close()


def test_the_message_of_a_killed_job_and_of_one_that_printed_an_error_but_exited_1():
    killed = notifier.build_message({"name": "big", "run": 2, "backend": "docker"}, 137, "exited", 100.0, 400.0, "epoch 3\n")
    assert killed["status"] == "failed" and killed["reason"].startswith("exit code 137: killed (SIGKILL")
    assert killed["text"] == "❌ big (run 2) failed after 5m00s on docker: " + killed["reason"]
    printed = notifier.build_message({}, 1, "exited", 0.0, 1.0, "ValueError: only printed\n")
    assert printed["reason"] == "exit code 1: the script raised an error"  # no traceback: the exit code (as the views say it), not a line the script printed
    redrawn = "Traceback (most recent call last):\n  File \"x\", line 3\n\rKeyError: 'images'\n"
    assert notifier.build_message({}, 1, "exited", 0.0, 1.0, redrawn)["reason"] == "KeyError: 'images'"


# -- a job that goes after its own notification ---------------------------------------------------

THIEF = f"""
import os
found = []
for pid in os.listdir('/proc'):
    for part in ('environ', 'cmdline'):
        try:
            with open(f'/proc/{{pid}}/{{part}}', 'rb') as handle:
                if {TOKEN!r}.encode() in handle.read():
                    found.append((pid, part))
        except OSError:
            pass
print('found', found, flush=True)
"""


def test_the_job_can_neither_read_the_url_nor_replace_the_code_that_sends_it(home, workdir, receiver):
    script = THIEF + (
        "here = os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode())\n"
        "with open(os.path.join(here, 'notify.py'), 'w') as handle:\n"  # in place, and by a new file
        "    handle.write('import os, sys\\nopen(\"/tmp/stolen\", \"w\").write(sys.stdin.read())\\n')\n"
        "os.replace(os.path.join(here, 'notify.py'), os.path.join(here, 'notify.py'))\n"
    )
    job = host_job("thief", script, workdir, notify=receiver.url)
    wait_for(lambda: receiver.received, timeout=60, what="the real notification")
    assert job.logs().splitlines()[0] == "found []"
    wait_for(lambda: job.refresh().record.notification, timeout=30, what="the result")
    assert job.record.notification["delivered"] is True and job.record.notification["detail"] == "HTTP 200"


def test_a_result_the_job_forged_is_not_recorded(home, workdir):
    server = Receiver(status=404)
    forge = (
        "import json, os\n"
        "here = os.path.dirname(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1].decode())\n"
        "with open(os.path.join(here, 'notified'), 'w') as handle:\n"
        "    json.dump({'delivered': True, 'detail': 'HTTP 200', 'attempts': 1, 'at': 1700000000, 'check': 'x' * 64}, handle)\n"
    )
    try:
        job = host_job("forger", forge, workdir, notify=server.url)
        assert job.wait(timeout=30).value == "completed"
        # the forged result is there first; only the notifier's own is taken
        wait_for(lambda: job.refresh().record.notification, timeout=60, what="the notifier's own result")
    finally:
        server.close()
    assert job.record.notification["delivered"] is False and job.record.notification["detail"] == "HTTP 404 Not Found"


class RawServer:
    """A TCP server on 127.0.0.1 answering every connection with `answer` (bytes), `pause` seconds apart a byte."""

    def __init__(self, answer, pause=0.0):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hooks/{TOKEN}"

        def serve():
            while True:
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                conn.recv(65536)
                try:
                    for byte in answer if pause else [answer]:
                        conn.sendall(bytes([byte]) if pause else byte)
                        time.sleep(pause)
                except OSError:
                    pass
                conn.close()

        threading.Thread(target=serve, daemon=True).start()

    def close(self):
        self.sock.close()


@pytest.mark.parametrize(
    "answer, said",
    [(b"HELLO THERE\r\n\r\n", "BadStatusLine"), (b"HTTP/1.1 301 Moved\r\nLocation: http://example.com/\r\nContent-Length: 0\r\n\r\n", "HTTP 301")],
)
def test_a_strange_answer_is_recorded_as_not_delivered(answer, said, monkeypatch):
    monkeypatch.setattr(notifier, "PAUSES", ())
    server = RawServer(answer)
    try:
        result = notifier.deliver(server.url, {"text": "x"})
    finally:
        server.close()
    assert result["delivered"] is False and said in result["detail"] and TOKEN not in result["detail"]


def test_an_answer_that_never_ends_is_given_up_on(monkeypatch):
    monkeypatch.setattr(notifier, "PAUSES", (0,))
    monkeypatch.setattr(notifier, "ATTEMPT_SECONDS", 2)
    server = RawServer(b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 100, pause=0.5)  # a byte every half second
    started = time.monotonic()
    try:
        result = notifier.deliver(server.url, {"text": "x"})
    finally:
        server.close()
    assert result == {**result, "delivered": False, "detail": "no answer within 2 s", "attempts": 2}
    assert time.monotonic() - started < 10


def test_chat_markup_in_a_failure_is_shown_as_text():
    message = notifier.build_message({"name": "x"}, 1, "exited", 0.0, 1.0, "Traceback (most recent call last):\nKeyError: '<!channel> <https://evil|click>'\n")
    assert "<!channel>" not in message["text"] and "&lt;!channel&gt;" in message["text"]
    assert message["reason"] == "KeyError: '<!channel> <https://evil|click>'"  # the field itself is the exception as it was


@pytest.mark.parametrize(
    "lines, said",
    [
        (["Traceback (most recent call last):", '  File "x", line 3, in <module>', "KeyError: 'images'"], "KeyError: 'images'"),
        (['  File "x", line 3', "    print(", "SyntaxError: '(' was never closed"], "SyntaxError: '(' was never closed"),
        (["ValueError: printed, never raised"], ""),
        (["Traceback (most recent call last):", '  File "x"', "", "RuntimeError: " + "y" * 1000, "after"], "RuntimeError: " + "y" * 286),
        (["Traceback (most recent call last):", '  File "x"', "UserWarning: raised as an error"], "UserWarning: raised as an error"),
    ],
)
def test_the_exception_a_failed_job_is_reported_by(lines, said):
    # the notifier's reading is the only one: a job's record takes its reason from it too
    assert notifier.exception_line(lines) == said


def test_the_message_says_exit_codes_and_durations_as_the_views_do():
    """One wording for all: the notifier runs alone on the job's python3 with wording.py's code put
    before its own, and says a day-long run and an exit code 137 as the views and the CLI do."""
    from jupyter_trainer.backends.base import notifier_source
    from jupyter_trainer.core.record import describe_exit_code, format_duration

    namespace = {"__name__": "notifier"}
    exec(compile(notifier_source(), "notify", "exec"), namespace)  # as `python3 -c` runs it: no package
    message = namespace["build_message"]({"name": "long", "run": 1, "backend": "docker"}, 137, "exited", 0.0, 93780.0, "")
    assert message["reason"] == describe_exit_code(137) == "exit code 137: killed (SIGKILL), often out of memory"
    assert f"after {format_duration(93780)} on docker" in message["text"] and format_duration(93780) == "1d 02h03m"
