"""Inside a container, reached through the engine: fixed sh snippets run by exec, files read
from the container's file system, a run's processes found by their command lines.

A job owns its container and may have replaced its tools (sh, wc, tail): every
answer is awaited for a bounded time and read up to a bounded size, and values
reach a snippet as arguments, never inside its text.
"""

from __future__ import annotations

import io
import select
import signal
import socket
import tarfile
import time

from ... import surface
from ...core.store import LAUNCH_FILE, SUPERVISOR_FILE
from ...errors import BackendUnavailable

EXEC_SECONDS = 30  # our snippets answer in well under a second, unless a job replaced the container's tools
EXEC_OUTPUT_LIMIT = 1 << 20


# Finds a run's processes in its container by their command lines: the supervisor
# (sh RUN_DIR/SUPERVISOR RUN_DIR ..., $3) and the job, which runs RUN_DIR/LAUNCHER ($2) and leads a
# session of its own (the supervisor starts it with setsid). Prints "supervisor PID" / "job PID".
FIND_RUN_PROCESSES = r"""
run_dir=$1 launcher=$2 supervisor=$3
for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" = "$$" ] && continue
    args=$(tr '\000' '\n' < "$dir/cmdline" 2>/dev/null) || continue
    case "$args" in
        *"
$run_dir/$supervisor
$run_dir
"*) echo "supervisor $pid"; continue ;;
        *"
$run_dir/$launcher"|*"
$run_dir/$launcher
"*) ;;
        *) continue ;;
    esac
    stat=$(cat "$dir/stat" 2>/dev/null) || continue
    set -- ${stat##*) }
    [ "$4" = "$pid" ] && echo "job $pid"
done
"""

# TERM to each process group named, KILL to what is left after the grace period ($1).
STOP_GROUPS = (
    'grace=$1; shift; for g in "$@"; do kill -TERM -"$g" 2>/dev/null; done; sleep "$grace"; '
    'for g in "$@"; do kill -KILL -"$g" 2>/dev/null; done; true'
)


def job_processes(container, inner_run_dir: str, seconds: float | None = None) -> dict[str, list[str]]:
    """The run's supervisor and job processes now running in the container (pids in its namespace)."""
    found: dict[str, list[str]] = {"supervisor": [], "job": []}
    for line in (
        run_in(container, FIND_RUN_PROCESSES, inner_run_dir, LAUNCH_FILE, SUPERVISOR_FILE, seconds=seconds, whole=True)
        .decode(errors="replace")
        .splitlines()
    ):
        kind, _, pid = line.partition(" ")
        if kind in found and pid.isdigit() and pid.isascii():
            found[kind].append(pid)
    return found


# Inits that wait for signals (sigtimedwait) rather than handle them: TERM reaches them, and
# /proc shows no handler for it.
SIGNAL_WAITING_INITS = {"tini", "docker-init", "dumb-init", "catatonit"}


def stops_on_term(proc_status: str) -> bool:
    """Whether a PID 1, by its /proc/1/status, gets TERM: it is an init, or has a TERM handler.
    True when the status cannot tell."""
    fields = dict(line.split(":", 1) for line in proc_status.splitlines() if ":" in line)
    if fields.get("Name", "").strip() in SIGNAL_WAITING_INITS:
        return True
    caught = fields.get("SigCgt", "").strip()
    try:
        return not caught or bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))
    except ValueError:
        return True


def runs_supervisor(top: dict, run_dir: str) -> bool:
    """Whether a `docker top` listing has this run's supervisor (its command line names the run)."""
    titles = top.get("Titles") or []
    column = next((titles.index(title) for title in ("CMD", "COMMAND") if title in titles), None)
    if column is None:
        return False
    supervisor = ["sh", f"{run_dir}/{SUPERVISOR_FILE}", run_dir]
    return any(row[column].split()[:3] == supervisor for row in top.get("Processes") or [])


# Runs the snippet ($1) with the rest as its arguments, then says it has ended: an answer without
# this mark was cut short (a connection reset mid-way), never taken for the whole answer.
WHOLE = 'snippet=$1; shift; sh -c "$snippet" sh "$@"; printf "\036jt-end"'
END_MARK = b"\036jt-end"


def run_in(
    container,
    script: str,
    *args: str,
    limit: int = EXEC_OUTPUT_LIMIT,
    seconds: float | None = None,
    whole: bool = False,
) -> bytes:
    """Run a fixed sh snippet in the container; values go in as arguments, never into the script.
    A job can replace the container's tools (its sh, wc, tail): the answer is awaited for
    `seconds` (EXEC_SECONDS) at most and read up to `limit` bytes, so no container can hang us or fill our memory.
    `whole`: an answer that ends before the snippet has (shorter than `limit`) is never taken for
    the whole of it: the engine's error if the way to it failed, else BackendUnavailable."""
    from docker.utils.socket import read

    api = container.client.api
    command = ["sh", "-c", WHOLE, "sh", script, *args] if whole else ["sh", "-c", script, "sh", *args]
    if whole:
        limit += len(END_MARK)
    exec_id = api.exec_create(container.id, command, stdout=True, stderr=False)["Id"]
    stream = api.exec_start(exec_id, socket=True)
    frames = bytearray(already_read(stream))
    seconds = EXEC_SECONDS if seconds is None else seconds
    deadline = time.monotonic() + seconds
    try:
        while len(frames) < limit + 8 * (len(frames) // 4096 + 2):  # room for the frames' headers
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stream], [], [], left)[0]:
                raise BackendUnavailable(
                    f"container {container.name} did not answer within {seconds:g} s",
                    f"a job may have replaced its tools; stop the container with {surface.command('stop_container')}",
                )
            chunk = read(stream, 65536)
            if not chunk:
                break
            frames += chunk
    finally:
        stream.close()
    answer = stdout_of(bytes(frames))[:limit]
    if not whole:
        return answer
    if answer.endswith(END_MARK):
        return answer[: -len(END_MARK)]
    if len(answer) >= limit:  # all that was asked for: the mark did not fit
        return answer[: limit - len(END_MARK)]
    # cut short: by the way to the engine (asking the engine again fails, and says so), or by the
    # container's own tools, which a job may have replaced
    api.exec_inspect(exec_id)
    raise BackendUnavailable(
        f"container {container.name} gave no whole answer",
        f"a job may have replaced its tools; stop the container with {surface.command('stop_container')}",
    )


def already_read(stream) -> bytes:
    """What of an attached exec's output the HTTP client read with the engine's answer to its
    start. Over SSH the first frames may come in the same packet as that answer: they are then in
    the buffer of paramiko's file, which read the answer's head, not in the channel that docker-py
    hands out (a short answer, all of it). Taken from there once, so that reading the channel goes on after them."""
    response = getattr(stream, "_response", None)  # docker-py keeps it on the socket it hands out
    file = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    buffered = getattr(file, "_rbuffer", None)  # paramiko's BufferedFile; not there on other transports
    if not isinstance(buffered, (bytes, bytearray)) or not buffered:
        return b""
    file._rbuffer = type(buffered)()
    return bytes(buffered)


def stdout_of(frames: bytes) -> bytes:
    """What an exec wrote to its stdout, from the engine's multiplexed stream (8-byte frame headers)."""
    out = bytearray()
    position = 0
    while position + 8 <= len(frames):
        kind, size = frames[position], int.from_bytes(frames[position + 4 : position + 8], "big")
        if kind == 1:
            out += frames[position + 8 : position + 8 + size]
        position += 8 + size
    return bytes(out)


def read_container_file(container, path: str, offset: int = 0, limit: int | None = None) -> bytes:
    """A file of the container, read from its file system (works on a stopped container too)."""
    return container_file(container, path, offset, limit)[0]


def container_file(container, path: str, offset: int = 0, limit: int | None = None) -> tuple[bytes, float | None]:
    """Up to `limit` bytes of a regular file of the container from `offset`, and when it was last
    written (None if there is no such regular file: a link the job put there is not followed).
    The archive is streamed, so a file the job made huge is never held in memory."""
    import docker

    try:
        stream, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return b"", None
    with tarfile.open(fileobj=_ChunkReader(stream), mode="r|") as tar:
        member = tar.next()
        if member is None or not member.isreg():
            return b"", None
        handle = tar.extractfile(member)
        while offset > 0:
            skipped = len(handle.read(min(offset, 1 << 20)))
            if not skipped:
                break
            offset -= skipped
        return handle.read(-1 if limit is None else limit), float(member.mtime)


def container_file_size(container, path: str) -> int:
    """The size of a regular file of the container, from the archive's header alone."""
    import docker

    try:
        stream, stat = container.get_archive(path)
    except docker.errors.NotFound:
        return 0
    if hasattr(stream, "close"):
        stream.close()
    return int(stat.get("size", 0)) if stat.get("linkTarget", "") == "" else 0


class _ChunkReader(io.RawIOBase):
    """A file-like view of the engine's archive stream (an iterator of byte chunks)."""

    def __init__(self, chunks):
        self._chunks = iter(chunks)
        self._rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._rest:
            self._rest = next(self._chunks, None)
            if self._rest is None:
                self._rest = b""
                return 0
        size = min(len(buffer), len(self._rest))
        buffer[:size] = self._rest[:size]
        self._rest = self._rest[size:]
        return size


def give_stdin(stream, data: bytes) -> None:
    """Write `data` to an attached exec's stdin and close it: the process reads it, then EOF."""
    sock = getattr(stream, "_sock", stream)
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    finally:
        stream.close()
