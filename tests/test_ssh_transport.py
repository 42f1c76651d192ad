"""What a client of a remote engine over SSH must do that docker-py does not: the first bytes of
an attached exec's output that the HTTP client read with the engine's answer are not lost."""

import socket
from types import SimpleNamespace

import paramiko
from conftest import wait_for

from jupyter_trainer.backends.docker.in_container import END_MARK, run_in
from jupyter_trainer.backends.docker.streamed_log import StreamedLog


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
