"""A remote container's log, followed through one long-lived exec instead of one exec per poll.

Polling a log on a remote engine costs an exec each time: three requests and an SSH channel, at
four polls a second. Instead one exec runs `tail -f` from where we are and the engine streams what
the log gains as it is written; a poll reads what has arrived, without a round trip. The stream's
bytes are kept (the last STREAM_KEEP of them) from the offset it started at; what lies before that
is read through the engine as before (`fallback`, a ContainerLogSource).

The follower in the container prints a heartbeat on stderr every HEARTBEAT_SECONDS: a stream that
stays silent longer has lost its connection (a laptop gone to sleep sends no FIN), and is dropped.
A dropped stream is started again from the last byte received, once the bytes before it are found
unchanged in the log (a log cut and written again meanwhile is read again from its start), so
nothing is lost or read twice. The follower ends with the connection that reads it (its stdin):
it leaves no process behind.
"""

from __future__ import annotations

import select
import socket
import threading
import time

from ...logs.source import LogSourceBase
from .in_container import already_read

# $1 the first byte (1-based), $2 the heartbeat's period; the run's directory (JT_RUN_DIR) and the
# log's name in it (JT_LOG, from the store) come in the environment, and tail is given the bare
# name: no command line here names a run's files, which the supervisor takes for another job still
# running in the container (see supervise.sh)
# The follower ends when its stdin does: the engine ends an exec's stdin when the connection
# attached to it closes (its output it keeps reading, and throwing away, for as long as the exec lives).
FOLLOW_LOG = r"""
cd "$JT_RUN_DIR" && [ -f "$JT_LOG" ] && [ ! -L "$JT_LOG" ] || exit 1
tail -c +"$1" -f "$JT_LOG" & follower=$!
(
    trap 'kill $nap 2>/dev/null; exit 0' TERM
    while :; do
        sleep "$2" & nap=$!
        wait $nap
        printf . >&2 || exit 0
    done
) & beat=$!
while read -r _; do :; done
kill "$follower" "$beat" 2>/dev/null
"""
HEARTBEAT_SECONDS = 5
SILENT_SECONDS = 3 * HEARTBEAT_SECONDS  # no frame for this long: the connection is gone
STREAM_BACKLOG = 64 << 10  # bytes before the log's end a first stream starts with
STREAM_KEEP = 8 << 20  # bytes of the stream kept for readers; older ones are read through the engine
VERIFY_SECONDS = 30.0  # how often the log's bytes before the stream's end are checked through the engine
CHECK_BYTES = 64  # how many of them
IDLE_SECONDS = 30.0  # a stream nobody has read for this long is closed (a view polls 4 times a second)
STDERR_LIMIT = 4096  # bytes the follower may say on stderr besides its heartbeats (tail's complaints)
SHORT_LIVED_SECONDS = 2.0  # a stream that ends this soon did not work (no tail in the container, say)
GIVE_UP_AFTER = 3  # short-lived streams before the log is read through the engine alone


class StreamedLog(LogSourceBase):
    """A log source fed by a stream from the container while it runs: a TellingLog."""

    def __init__(self, fallback, open_stream):
        self.fallback = fallback  # reads through the engine: the history, a stopped container
        # (first_byte) -> an attached exec's socket, or None if the container is not running
        self._open_stream = open_stream
        self._lock = threading.Lock()
        self._base = 0  # the log's offset of self._kept[0]
        self._kept = bytearray()
        self._resume_at: int | None = None  # where the next stream starts (None: at the log's end)
        self._size_at_start = 0  # the log's size when the first stream started
        self._stream = None
        self._failures = 0
        self._used_at = self._verified_at = time.monotonic()
        self._listeners: list = []  # called at each gain of the stream, and at its end (see listen)

    # -- what readers call ---------------------------------------------------

    def size(self) -> int:
        self._used_at = time.monotonic()
        if self._streaming():
            with self._lock:
                # the stream may not yet have brought what the log held when it started
                return max(self._base + len(self._kept), self._size_at_start)
        return self.fallback.size()

    def read(self, offset: int, limit: int) -> bytes:
        self._used_at = time.monotonic()
        if self._streaming():
            with self._lock:
                end = self._base + len(self._kept)
                if self._base <= offset < end or offset == end >= self._size_at_start:
                    return bytes(self._kept[offset - self._base : offset - self._base + limit])
        # before the stream began, or past what it has brought so far (what the log held when it
        # started, or what a reader read through the engine a moment ago): through the engine
        return self.fallback.read(offset, limit)

    def settle(self) -> None:
        """The job has ended: its log is complete, so it is asked for its size once more (the stream
        may be a moment behind its last bytes), and a reader reads up to there."""
        size = self.fallback.size()
        with self._lock:
            self._size_at_start = max(self._size_at_start, size)

    def close(self) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            _close(stream)

    @property
    def idle(self) -> bool:
        return time.monotonic() - self._used_at > IDLE_SECONDS

    # -- who hears of the log's news ------------------------------------------

    def listen(self, callback) -> None:
        """Call `callback(ended)` (on the stream's thread, quickly) whenever the stream brings bytes
        (ended False), and when it ends (True): a view need not poll while it is told. Bytes are
        readable before they are told, and told before a reader can find them unannounced."""
        with self._lock:
            if callback not in self._listeners:
                self._listeners.append(callback)

    def unlisten(self, callback) -> None:
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    @property
    def telling(self) -> bool:
        """Whether listeners hear of what the log gains now: while a stream is up (else the log is
        read through the engine, and only a poll sees news)."""
        with self._lock:
            return self._stream is not None

    def _tell(self, ended: bool) -> None:  # under the lock
        for callback in self._listeners:
            try:
                callback(ended)
            except Exception:  # a listener's trouble must not end the stream
                pass

    # -- the stream ----------------------------------------------------------

    def _streaming(self) -> bool:
        """Whether a stream is up, started now if needed. False when the container does not run or
        streams do not work in it: then the fallback reads the log."""
        with self._lock:
            due = time.monotonic() - self._verified_at >= VERIFY_SECONDS
            if self._stream is not None and not due:
                return True
            if self._stream is None and self._failures >= GIVE_UP_AFTER:
                return False
            start = self._resume_at if self._stream is None else None
            end, last = self._base + len(self._kept), bytes(self._kept[-CHECK_BYTES:])
        if (start is not None or due) and last and not self._unchanged(end, last):
            self._forget()  # the log was cut (and written again) behind the stream's back
            start = None
        elif self._stream is not None:
            return True
        # what the log holds now: a new stream takes a moment to bring it, and until it has, a reader
        # must not take what the stream brought for all there is
        size_at_start = self.fallback.size()
        if start is None:
            # a first stream starts near the log's end (the rest is history, read through the engine),
            # early enough to hold what a reader checks before its offset and a view's last lines
            start = max(0, size_at_start - STREAM_BACKLOG)
        stream = self._open_stream(start + 1)  # an unreachable host raises here, as the fallback would
        if stream is None:
            return False
        with self._lock:
            if start != self._base + len(self._kept):  # a new start: nothing kept follows on
                self._base, self._kept = start, bytearray()
            self._size_at_start = max(self._size_at_start, size_at_start)
            self._stream = stream
        threading.Thread(target=self._receive, args=(stream,), name="log stream", daemon=True).start()
        return True

    def _unchanged(self, end: int, last: bytes) -> bool:
        """Whether the log still holds, before `end`, the bytes the stream brought there. A job may cut
        its log and write it again past its old size while the stream is down, or faster than tail
        looks: tail would go on from its old place, in the middle of the new text, and say nothing."""
        self._verified_at = time.monotonic()
        return self.fallback.read(end - len(last), len(last)) == last

    def _forget(self) -> None:
        """Drop the stream and what it brought: the log is read again from its new start, through the
        engine, whose reader sees the cut (the bytes before its offset have changed)."""
        with self._lock:
            stream, self._stream = self._stream, None
            self._base, self._kept, self._resume_at, self._size_at_start = 0, bytearray(), None, 0
        if stream is not None:
            _close(stream)

    def _receive(self, stream) -> None:
        """The reader thread: the engine's frames (8-byte headers) into the kept bytes."""
        from docker.utils.socket import read

        started_at = heard_at = time.monotonic()
        chunk = already_read(stream)  # frames read with the engine's answer, if any
        pending = bytearray()
        said = 0  # bytes the follower wrote on stderr besides its heartbeats
        cut = False
        try:
            while not cut and said <= STDERR_LIMIT and not self.idle:
                if not chunk:
                    with self._lock:
                        if self._stream is not stream:
                            return  # closed
                    if not select.select([stream], [], [], 1.0)[0]:
                        if time.monotonic() - heard_at > SILENT_SECONDS:
                            return  # the connection is gone without a word
                        continue
                    chunk = read(stream, 65536)
                    if not chunk:
                        return  # the follower ended: the container stopped, say
                    heard_at = time.monotonic()
                pending += chunk
                chunk = b""
                while len(pending) >= 8 and len(pending) >= 8 + int.from_bytes(pending[4:8], "big"):
                    kind, size = pending[0], int.from_bytes(pending[4:8], "big")
                    payload = bytes(pending[8 : 8 + size])
                    del pending[: 8 + size]
                    if kind == 1:
                        self._keep(payload)
                    elif kind == 2 and payload.replace(b".", b""):
                        said += len(payload)
                        cut = cut or b"truncated" in payload  # tail's word for a log cut short
        except (OSError, ValueError, EOFError):
            return
        finally:
            with self._lock:
                if self._stream is stream:
                    self._stream = None
                    # a log cut short is read again through the engine, whose reader sees the cut
                    self._resume_at = None if cut else self._base + len(self._kept)
                    if cut:
                        self._base, self._kept, self._size_at_start = 0, bytearray(), 0
                    self._tell(ended=True)
                self._failures = self._failures + 1 if time.monotonic() - started_at < SHORT_LIVED_SECONDS else 0
            _close(stream)

    def _keep(self, payload: bytes) -> None:
        with self._lock:
            self._kept += payload
            if len(self._kept) > STREAM_KEEP:  # let the oldest half go: readers are near the end
                drop = len(self._kept) - STREAM_KEEP // 2
                del self._kept[:drop]
                self._base += drop
            self._tell(ended=False)  # under the lock: no reader finds these bytes before they are told


def _close(stream) -> None:
    """Shut the attached exec's connection down for real (closing docker-py's wrapper of a local
    socket leaves the socket open): the follower's stdin ends, and the follower with it."""
    raw = getattr(stream, "_sock", stream)
    for step in (lambda: raw.shutdown(socket.SHUT_RDWR), raw.close, stream.close):
        try:
            step()
        except Exception:  # noqa: BLE001  a socket that is gone already
            pass
