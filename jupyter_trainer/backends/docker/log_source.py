"""A job's log in a container that does not mount the store, read through the engine: by exec
while the container runs, from its file system once it has stopped; on a remote host, followed
through one stream that every view of it shares (see streamed_log)."""

from __future__ import annotations

import contextlib
import threading

from ...errors import BackendUnavailable, RunFileError, TrainerError
from ...logs.source import LogSourceBase
from ..base import LOG_FILE
from .clients import Clients
from .errors import READ_LOG, busy
from .hosts import Engine
from .in_container import container_file_size, read_container_file, run_in
from .streamed_log import FOLLOW_LOG, HEARTBEAT_SECONDS, StreamedLog


class ContainerLogSource(LogSourceBase):
    """A log source of a run's log in a container."""

    def __init__(
        self, clients: Clients, engine: Engine, container_id: str, run_dir: str, exec_seconds: float | None = None
    ):
        self.clients = clients
        self.exec_seconds = exec_seconds  # how long an answer from inside is awaited (see run_in)
        self.engine = engine
        self.container_id = container_id
        self.run_dir = run_dir  # in the container
        self.path = f"{run_dir}/{LOG_FILE}"

    @contextlib.contextmanager
    def _container(self, purpose: str = "calls"):
        import docker

        with self.clients.calling(self.engine, READ_LOG, purpose) as client:
            try:
                yield client.containers.get(self.container_id)
            except docker.errors.NotFound:
                raise TrainerError(f"the log went with its container ({self.container_id[:12]} was removed)") from None

    def size(self) -> int:
        with self._container() as container:
            if container.status != "running":
                return container_file_size(container, self.path)
            # a regular file only: a FIFO the job put in its place would block wc (and its exec) for good
            text = run_in(
                container,
                '[ -f "$1" ] && [ ! -L "$1" ] || { echo 0; exit; }; wc -c < "$1"',
                self.path,
                limit=64,
                seconds=self.exec_seconds,
                whole=True,
            ).strip()
            if not (text.isdigit() and len(text) <= 18):
                raise RunFileError(f"cannot tell the size of the job's log in container {container.name}")
            return int(text)

    def read(self, offset: int, limit: int) -> bytes:
        with self._container() as container:
            if container.status != "running":
                return read_container_file(container, self.path, offset, limit)
            return run_in(
                container,
                '[ -f "$2" ] && [ ! -L "$2" ] || exit 0; tail -c +"$1" "$2" | head -c "$3"',
                str(offset + 1),
                self.path,
                str(limit),
                limit=limit,
                seconds=self.exec_seconds,
                whole=True,
            )

    def open_stream(self, first_byte: int):
        """An attached exec that streams the log from `first_byte` (1-based) as it grows, with a
        heartbeat on stderr (see streamed_log); None when the container does not run, or the host
        has no SSH session to spare for it now (the log is read through the engine meanwhile)."""
        try:
            return self._open_stream(first_byte)
        except BackendUnavailable as error:
            if busy(error.__cause__):
                return None
            raise

    def _open_stream(self, first_byte: int):
        with self._container("streams") as container:
            if container.status != "running":
                return None
            api = container.client.api
            command = ["sh", "-c", FOLLOW_LOG, "sh", str(first_byte), str(HEARTBEAT_SECONDS)]
            environment = {"JT_RUN_DIR": self.run_dir, "JT_LOG": LOG_FILE}
            exec_id = api.exec_create(
                container.id, command, stdin=True, stdout=True, stderr=True, environment=environment
            )["Id"]
            return api.exec_start(exec_id, socket=True)


class SharedStreams:
    """The streamed remote logs of this process, one per log whoever views it; past the streams
    a host allows (Clients.streams_allowed: STREAMS_PER_HOST, fewer where its sshd allows fewer
    sessions), the others are polled through the engine."""

    def __init__(self):
        self._streams: dict[tuple[str, str, str, float], StreamedLog] = {}
        self._lock = threading.Lock()

    def of(self, source: ContainerLogSource, created_at: float):
        """The stream of `source`, the log of the run created at `created_at`: a run removed and its
        name taken again at once may have its successor in the same container, at the same path,
        while the old file's stream still follows the old file."""
        key = (source.engine.url, source.container_id, source.path, created_at)
        with self._lock:
            for other, streamed in list(self._streams.items()):
                if streamed.idle:
                    streamed.close()
                    del self._streams[other]
            if key not in self._streams:
                if sum(other[0] == key[0] for other in self._streams) >= source.clients.streams_allowed(source.engine):
                    return source
                self._streams[key] = StreamedLog(source, source.open_stream)
            return self._streams[key]
