"""What a client of a remote engine over SSH must do that docker-py does not (backends/docker/
sessions.py, in_container.already_read), against a stand-in sshd: never more sessions at once than
the host allows, waiting their turn; a refusal teaches the host's limit; an idle pooled session is
closed for a new one; none to spare within the patience is the busy error. And the first bytes of
an attached exec's output that the HTTP client read with the engine's answer are not lost.
The same over real SSH: tests/test_remote_status.py."""

import queue
import socket
import threading
import time
from types import SimpleNamespace

import paramiko
import pytest
from conftest import wait_for

from jupyter_trainer.backends.docker.errors import busy
from jupyter_trainer.backends.docker.in_container import END_MARK, run_in
from jupyter_trainer.backends.docker.sessions import LINGER_SECONDS, HostSessions, Sessions
from jupyter_trainer.backends.docker.streamed_log import StreamedLog


class Sshd:
    """A connection's sessions as sshd counts them: MaxSessions at once, a closed one gone
    `lingers` seconds after its close."""

    def __init__(self, max_sessions: int, lingers: float = 0.0):
        self.max_sessions = max_sessions
        self.lingers = lingers
        self.open = 0
        self.most = 0
        self.refused = 0
        self._lock = threading.Lock()

    def open_session(self, timeout=None):
        with self._lock:
            if self.open >= self.max_sessions:
                self.refused += 1
                raise paramiko.ChannelException(2, "Connect failed")  # what paramiko says of "no more sessions"
            self.open += 1
            self.most = max(self.most, self.open)
        return Channel(self)

    def let_go(self) -> None:
        with self._lock:
            self.open -= 1


class Channel:
    def __init__(self, sshd: Sshd):
        self.sshd = sshd
        self.closed = False

    def close(self):
        if not self.closed:
            self.closed = True
            threading.Timer(self.sshd.lingers, self.sshd.let_go).start()


def hammer(sessions: Sessions, sshd: Sshd, threads: int = 8, seconds: float = 1.0, held: float = 0.01) -> list[BaseException]:
    """`threads` threads opening a session, holding it `held` s and closing it, for `seconds`."""
    failures = []
    until = time.monotonic() + seconds

    def work():
        while time.monotonic() < until:
            try:
                channel = sessions.open(sshd.open_session)
            except BaseException as exc:  # noqa: BLE001  every failure is the test's
                failures.append(exc)
                continue
            time.sleep(held)
            channel.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return failures


def test_never_more_sessions_at_once_than_the_limit_and_the_others_wait_their_turn():
    sshd = Sshd(max_sessions=10, lingers=0.005)  # sshd's default; a session goes a moment after its close
    host = HostSessions()
    assert not hammer(Sessions(host, patience=5.0, open_seconds=15), sshd)
    assert sshd.refused == 0 and sshd.most <= host.limit < 10


def test_a_host_that_allows_fewer_is_learned_from_its_first_refusals():
    sshd = Sshd(max_sessions=3, lingers=0.005)
    host = HostSessions()
    assert not hammer(Sessions(host, patience=5.0, open_seconds=15), sshd)
    assert host.limit == 3  # what it let be open at once, not fewer
    assert 1 <= sshd.refused <= 8, sshd.refused  # the first ones only, not one a try
    # a second connection to the host starts from what was learned
    again = Sshd(max_sessions=3, lingers=0.005)
    assert not hammer(Sessions(host, patience=5.0, open_seconds=15), again)
    assert again.refused == 0


class Pool:
    """urllib3's pool as docker-py's uses it: a LIFO queue of idle connections, None for a free place."""

    def __init__(self, size: int):
        self.pool = queue.LifoQueue(size)
        for _ in range(size):
            self.pool.put(None)


def test_an_idle_pooled_session_is_closed_for_a_new_one():
    sshd = Sshd(max_sessions=10)
    host = HostSessions(limit=2)
    sessions = Sessions(host, patience=5.0, open_seconds=15)
    sessions._pool = pool = Pool(3)
    in_use = sessions.open(sshd.open_session)
    pool.pool.get()  # a place taken by a connection, as urllib3 takes one
    idle = SimpleNamespace(sock=sessions.open(sshd.open_session))
    idle.close = idle.sock.close
    pool.pool.put(idle)  # its call is done: back in the pool, its session still open
    started = time.monotonic()
    third = sessions.open(sshd.open_session)
    assert idle.sock.closed and not in_use.closed and not third.closed
    assert time.monotonic() - started >= LINGER_SECONDS  # the one closed for it counted a moment more
    assert sshd.most == 2


def test_no_session_to_spare_within_the_patience_is_the_busy_error():
    sshd = Sshd(max_sessions=10)
    sessions = Sessions(HostSessions(limit=1), patience=0.0, open_seconds=15)  # a stream's: at once or not at all
    sessions.open(sshd.open_session)
    with pytest.raises(paramiko.ChannelException) as info:
        sessions.open(sshd.open_session)
    assert busy(info.value) and sshd.most == 1
    patient = Sessions(HostSessions(limit=1), patience=0.3, open_seconds=15)
    held = patient.open(sshd.open_session)
    threading.Timer(0.1, held.close).start()
    assert not patient.open(sshd.open_session).closed  # its turn came when the other was closed


# -- an attached exec's first bytes ------------------------------------------------------------------


class Attached(socket.socket):
    """The socket docker-py hands out for an attached exec, with the response it came in (over
    SSH, paramiko's file under it may have read past the response's head)."""


def attached(buffered: bytes, more: bytes = b"", end: bool = True):
    """An attached exec's socket whose first frames the HTTP client read with the engine's answer
    (`buffered`), then `more` on the socket, then its end (unless `end` is False)."""
    ours, theirs = socket.socketpair()
    stream = Attached(fileno=ours.detach())
    file = paramiko.file.BufferedFile()
    file._rbuffer = buffered
    stream._response = SimpleNamespace(raw=SimpleNamespace(_fp=SimpleNamespace(fp=file)))
    theirs.sendall(more)
    if end:
        theirs.close()
    return stream, theirs


def frame(payload: bytes, kind: int = 1) -> bytes:
    return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_an_exec_answer_read_with_the_engines_reply_is_taken_whole():
    """The whole answer came in the packet that held the engine's reply to the exec's start: the
    channel docker-py hands out has nothing more to give."""
    stream, _ = attached(frame(b"whole answer" + END_MARK))
    api = SimpleNamespace(exec_create=lambda *a, **k: {"Id": "e1"}, exec_start=lambda *a, **k: stream, exec_inspect=lambda *a: {})
    container = SimpleNamespace(id="c1", name="c1", client=SimpleNamespace(api=api))
    assert run_in(container, 'printf "%s" "$1"', "whole answer", whole=True, seconds=5) == b"whole answer"


def test_a_log_streams_first_lines_read_with_the_engines_reply_are_kept():
    stream, theirs = attached(frame(b"first line\n"), more=frame(b"second line\n"), end=False)
    fallback = SimpleNamespace(size=lambda: 0, read=lambda offset, limit: b"")
    streamed = StreamedLog(fallback, lambda first_byte: stream)
    try:
        wait_for(lambda: streamed.size() >= 23, timeout=5, what="the stream's lines")
        assert streamed.read(0, 100) == b"first line\nsecond line\n"
    finally:
        streamed.close()
        theirs.close()
