"""What the test session leaves behind: containers it created and processes it started.

The suite checks at its end that no test left a container (running or stopped) or a process
(a job, its supervisor, a server) behind, says which, removes them, and fails the run.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

SETTLE_SECONDS = 20  # a job stopped in the last test may still be on its way out
OUR_LABEL = "jupyter_trainer"
TEST_IMAGES = ("jupyter-trainer-test", "python:")


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
            containers, processes = self._containers(), self._processes(marker)
            if not (containers or processes) or time.monotonic() > deadline:
                return containers, processes
            time.sleep(1)

    def remove(self, marker: str) -> None:
        for container in self._new_containers():
            container.remove(force=True)
        for pid in self._pids(marker):
            for target in _with_its_session(pid):
                try:
                    os.kill(target, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _new_containers(self) -> list:
        """Containers created since that tests make: ours (labelled) or of a test image; another
        container someone starts meanwhile is none of the suite's business."""
        client = _engine()
        found = []
        for container in client.containers.list(all=True) if client else []:
            if container.id in self.containers:
                continue
            image = container.attrs.get("Config", {}).get("Image", "")
            if container.labels.get(OUR_LABEL) or image.startswith(TEST_IMAGES):
                found.append(container)
        return found

    def _containers(self) -> list[str]:
        return [f"{container.name} ({container.status}, {container.attrs['Config'].get('Image')})" for container in self._new_containers()]

    def _pids(self, marker: str) -> list[int]:
        me = os.getpid()
        return [pid for pid, command in _processes().items() if pid not in self.pids and pid != me and marker in command]

    def _processes(self, marker: str) -> list[str]:
        commands = _processes()
        return [f"{pid}: {commands.get(pid, '?')[:160]}" for pid in self._pids(marker)]
