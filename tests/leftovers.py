"""What the test session leaves behind: containers it created and processes it started.

The suite checks at its end that no test left a container (running or stopped) or a process
(a job, its supervisor, a server) behind, says which, removes them, and fails the run. Both are
recognised by the session's temporary directory, which every test's store and workdir are in:
a process names it on its command line, a container in its labels or mounts. What another suite
or person runs on the same machine meanwhile is never counted, nor removed.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

SETTLE_SECONDS = 20  # a job stopped in the last test may still be on its way out


def _engine():
    try:
        import docker

        client = docker.from_env()
        client.ping()
        return client
    except Exception:  # no engine: no container can be left on it
        return None


def _processes() -> dict[int, str]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    found[int(entry)] = file.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            except OSError:
                continue
    return found


def _with_its_session(pid: int) -> list[int]:
    """`pid` and, when it leads a session of its own (a detached job does), every process in it:
    a job's children need not name the marker."""
    try:
        session = os.getsid(pid)
    except ProcessLookupError:
        return []
    if session != pid or session == os.getsid(0):
        return [pid]
    members = []
    for other in _processes():
        try:
            if os.getsid(other) == session:
                members.append(other)
        except ProcessLookupError:
            continue
    return members


@dataclass
class Leftovers:
    """The machine as the session found it; `left(...)` is what it added and did not remove."""

    containers: set[str] = field(default_factory=set)
    pids: set[int] = field(default_factory=set)

    @classmethod
    def before(cls) -> "Leftovers":
        client = _engine()
        containers = {container.id for container in client.containers.list(all=True)} if client else set()
        return cls(containers, set(_processes()))

    def left(self, marker: str) -> tuple[list[str], list[str]]:
        """Containers created since, and processes started since whose command line names `marker`
        (the session's temporary directory, under which every test's store and workdir live)."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            containers, processes = self._containers(marker), self._processes(marker)
            if not (containers or processes) or time.monotonic() > deadline:
                return containers, processes
            time.sleep(1)

    def remove(self, marker: str) -> None:
        for container in self._new_containers(marker):
            container.remove(force=True)
        for pid in self._pids(marker):
            for target in _with_its_session(pid):
                try:
                    os.kill(target, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _new_containers(self, marker: str) -> list:
        """Containers created since whose labels or mounts name `marker`: every container a test
        makes, through jupyter_trainer or itself, keeps something of its store or workdir. Another
        suite's on the same engine names its own directory, and is none of this one's business."""
        client = _engine()
        found = []
        for container in client.containers.list(all=True) if client else []:
            if container.id in self.containers:
                continue
            labels = container.labels or {}
            mounts = container.attrs.get("Mounts") or []
            named = [*labels.values(), *(mount.get("Source", "") for mount in mounts)]
            if any(marker in value for value in named):
                found.append(container)
        return found

    def _containers(self, marker: str) -> list[str]:
        return [f"{container.name} ({container.status}, {container.attrs['Config'].get('Image')})" for container in self._new_containers(marker)]

    def _pids(self, marker: str) -> list[int]:
        me = os.getpid()
        return [pid for pid, command in _processes().items() if pid not in self.pids and pid != me and marker in command]

    def _processes(self, marker: str) -> list[str]:
        commands = _processes()
        return [f"{pid}: {commands.get(pid, '?')[:160]}" for pid in self._pids(marker)]


SESSION_LABEL = "jupyter_trainer.test_session"


def labelling_client(marker: str):
    """A Docker client whose `containers.run` and `containers.create` label each container with
    `marker`, so that one a test makes directly, without a mount, is still known as this session's."""
    import docker
    from docker.models.containers import ContainerCollection

    class Labelled(ContainerCollection):
        def create(self, *args, **kwargs):
            kwargs["labels"] = {**(kwargs.get("labels") or {}), SESSION_LABEL: marker}
            return super().create(*args, **kwargs)

    class Client(docker.DockerClient):
        @property
        def containers(self):
            return Labelled(client=self)

    return Client.from_env()
