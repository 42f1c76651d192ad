"""--restarts in a container: the keeper that starts jobs again, what it is told, what it wrote.

The containers jupyter_trainer creates run keeper.sh as their main process, with the on-failure
restart policy (see keeper.sh for why not unless-stopped): when the engine or the machine restarts,
or the container is restarted, the engine starts the container again and the keeper starts again
the interrupted jobs run with --restarts, through their own supervisor, with no process of ours
outside the container. Here: its command, the `restart` file that tells it how to start a job
(written at launch), the `restarts` file it writes (read back as hostile input), and the words for
why a container restarted, from what the engine can tell.
"""

from __future__ import annotations

import calendar
import contextlib
import functools
import io
import re
import tarfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ...core import files as _fs
from ...errors import InvalidOption
from .declared import NO_RESTART_FILE, RESTART_FILE, RESTARTS_FILE
from .errors import engine_errors
from .in_container import container_file
from .runtime import MOUNTED_JOBS_DIR, SHIPPED_JOBS_DIR, DockerRuntime

KEEPER_FILE = "keeper.sh"
LABEL_KEEPER = "jupyter_trainer.keeper"  # on a container whose main process is the keeper: its version
KEEPER_VERSION = "1"
RESTART_POLICY = {"Name": "on-failure"}  # the keeper ends with 0 only when a job asked its container to stop
KEEPER_GRACE_SECONDS = 30.0  # after its container starts, how long a keeper may take to start the jobs again
RESTART_GAP_SECONDS = 10.0  # docker restart: how long its container may stay down between its stop and its start
RESTARTS_LIMIT = 1000
RESTARTS_FILE_LIMIT = (
    RESTARTS_LIMIT + 1
) * 128  # the keeper's lines (at most some 80 bytes), one per start again and one on giving up

# What the keeper writes: "restart N BOOT_ID SECONDS CAUSE", or "used-up BOOT_ID SECONDS CAUSE" once
# it left the job alone. CAUSE: "boot" (the machine restarted) or "container".
RESTART_LINE = re.compile(r"restart ([0-9]{1,4}) ([0-9a-f-]{1,40}|unknown) ([0-9]{1,12}) (boot|container)")
USED_UP_LINE = re.compile(r"used-up ([0-9a-f-]{1,40}|unknown) ([0-9]{1,12}) (boot|container)")


@functools.lru_cache(maxsize=1)
def keeper_source() -> str:
    return resources.files("jupyter_trainer.backends.docker").joinpath(KEEPER_FILE).read_text()


KEEPER_PATH = "/jupyter_trainer/keeper.sh"  # in the container's own file system (beside the jobs' mount point)


def keeper_command() -> list[str]:
    """The main process of a container we create: the keeper, told where its runs' files are (a
    file of the container, so that its processes' command lines stay short)."""
    return ["sh", KEEPER_PATH, MOUNTED_JOBS_DIR, SHIPPED_JOBS_DIR]


def install_keeper(container) -> None:
    """Put the keeper into a container created, not yet started (the engine writes it as root)."""
    source = keeper_source().encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        folder = tarfile.TarInfo(KEEPER_PATH.rsplit("/", 1)[0].lstrip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        info = tarfile.TarInfo(KEEPER_PATH.lstrip("/"))
        info.size, info.mode = len(source), 0o644
        tar.addfile(info, io.BytesIO(source))
    container.put_archive("/", archive.getvalue())


def has_keeper(container) -> bool:
    return container.labels.get(LABEL_KEEPER) == KEEPER_VERSION


def parse_restarts(value: int | None) -> int | None:
    if value is None:
        return None
    if not 0 <= value <= RESTARTS_LIMIT:
        raise InvalidOption(f"--restarts expects a number from 0 to {RESTARTS_LIMIT}, got {value}")
    return value


def check_can_restart(container, restarts: int) -> None:
    """--restarts needs a container whose main process is our keeper: one a user made, or one an
    older version made (with `tail -f /dev/null`), has nothing that starts a job again."""
    if not restarts or has_keeper(container):
        return
    name = container.name
    if container.labels.get("jupyter_trainer") != "1":
        raise InvalidOption(
            f"--restarts: container {name!r} is not one jupyter_trainer created, so nothing in it starts a job "
            "again when it restarts",
            "drop --container (or name one that does not exist yet) and pass --image: the container created then can",
        )
    raise InvalidOption(
        f"--restarts needs a container made anew: {name!r} was created by an older version, whose main "
        "process cannot start jobs again",
        f"once its jobs have ended, remove it (docker rm -f {name}); the next job creates one that can",
    )


def stop_container(container, timeout: float) -> None:
    """Stop a container as jupyter_trainer means it: for good. One whose main process is the keeper
    is asked through it (USR1: it ends with 0), so that its on-failure policy does not start it
    again when the engine restarts; `docker stop` (TERM: 143) would. Another, or a keeper that does
    not end in time, is stopped as `docker stop` does."""
    if has_keeper(container) and container.status == "running":
        container.kill(signal="SIGUSR1")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            container.reload()
            if container.status != "running":
                return
            time.sleep(0.2)
    container.stop(timeout=timeout)


# -- what the keeper is told ----------------------------------------------------------------

_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=:,+@%-")


def escaped(text: str | bytes) -> str:
    """`text` as one line that the keeper's `printf %b` turns back into it: every byte but a few
    plain ones as \\0NNN, so that no newline, backslash or quote survives as itself."""
    data = text.encode() if isinstance(text, str) else text
    return "".join(chr(byte) if byte in _PLAIN else f"\\0{byte:03o}" for byte in data)


def instructions(allowed: int, command: list[str], environment: dict[str, str], cwd: str, given: bytes) -> bytes:
    """The `restart` file: how many starts again, and how to start the job's supervisor as its
    exec did (its command, the environment the exec added, its working directory, its stdin)."""
    lines = [f"restarts {allowed}", f"cwd {escaped(cwd)}"]
    lines += [f"env {key} {escaped(value)}" for key, value in environment.items()]
    if given:
        lines.append(f"stdin {escaped(given)}")
    lines += [f"arg {escaped(word)}" for word in command]
    return ("\n".join(lines) + "\n").encode()


# -- what the keeper wrote --------------------------------------------------------------------


@dataclass(frozen=True)
class RestartLog:
    """What a run's `restarts` file says: how often the keeper started the job again (and why,
    each time: "boot" or "container"), and whether it left it alone at last, its restarts used up."""

    causes: tuple[str, ...] = ()
    used_up: str | None = None  # the cause of the interruption it was not started again after

    @property
    def count(self) -> int:
        return len(self.causes)

    def beyond(self, allowed: int, seen_before: int, restarted: bool) -> bool:
        """Whether a job found running again says more starts again than allowed, or (its
        container `restarted` since the start again last seen) no more than were seen before: as
        the keeper counts each before it makes it, its count was changed by something else. (Not
        before any start again was seen: a container that restarted while the job was submitted
        into it runs its first supervisor with no count.)"""
        return self.count > allowed or (restarted and 0 < seen_before >= self.count)

    @classmethod
    def parse(cls, data: bytes) -> "RestartLog":
        """Only the lines the keeper writes, numbered in order; anything else (a job can write the
        file too) is left out."""
        causes: list[str] = []
        used_up = None
        for line in data.decode("ascii", errors="replace").splitlines():
            restart = RESTART_LINE.fullmatch(line)
            if restart and int(restart.group(1)) == len(causes) + 1:
                causes.append(restart.group(4))
                continue
            gave_up = USED_UP_LINE.fullmatch(line)
            if gave_up:
                used_up = gave_up.group(3)
        return cls(tuple(causes), used_up)


def read_restart_log(container, runtime: DockerRuntime, run_dir: Path) -> RestartLog:
    if runtime.mounted:
        with contextlib.suppress(OSError):
            return RestartLog.parse(_fs.read_small(run_dir / RESTARTS_FILE, RESTARTS_FILE_LIMIT))
        return RestartLog()
    data, _ = container_file(container, f"{runtime.run_dir}/{RESTARTS_FILE}", limit=RESTARTS_FILE_LIMIT)
    return RestartLog.parse(data)


# What a run's `no_restart` holds (any word keeps every keeper from starting it again): a stop its
# user asked, or its start again beyond its --restarts (see restart_looks.end_uncounted). A look that
# finds the job down then says which, whichever look wrote it.
STOP_ASKED = "stopped"
BEYOND_LIMIT = "beyond"


def restart_forbidden(container, runtime: DockerRuntime, run_dir: Path) -> str:
    """Why no keeper may start the job again (STOP_ASKED, BEYOND_LIMIT; "" when it may): the run's
    `no_restart` says so, and its keeper obeys it. A word it does not know (the job can write the
    file) is a stop."""
    if runtime.mounted:
        try:
            data = _fs.read_small(run_dir / NO_RESTART_FILE, 64)
        except OSError:
            return ""
    else:
        data, _ = container_file(container, f"{runtime.run_dir}/{NO_RESTART_FILE}", limit=64)
    word = data.strip()
    if not word:
        return ""
    return BEYOND_LIMIT if word == BEYOND_LIMIT.encode() else STOP_ASKED


def forbid_restart(container, runtime: DockerRuntime, run_dir: Path, why: str = STOP_ASKED) -> None:
    """A stop was asked (or the job was started again beyond its limit: `why`): no keeper may start
    the job again, even if its container is down now and the stop cannot reach it (the file can be
    written into a stopped container)."""
    _write_run_file(container, runtime, run_dir, NO_RESTART_FILE, why.encode() + b"\n")


def forget_instructions(container, runtime: DockerRuntime) -> None:
    """The job has ended: the copy of its `restart` file in a container that does not mount the
    store (a remote host's) holds its environment no longer. (The store's own is emptied by the
    backend's release.)"""
    if not runtime.mounted:
        _write_run_file(container, runtime, None, RESTART_FILE, b"")


def _write_run_file(container, runtime: DockerRuntime, run_dir: Path | None, name: str, data: bytes) -> None:
    """One of the run's files, where the container sees it: the store's (in place) or the copy in
    the container (through the engine, which writes into a stopped container too). Best effort."""
    if runtime.mounted and run_dir is not None:
        with contextlib.suppress(OSError):
            _fs.write_in_place(run_dir / name, data)
        return
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o600
        tar.addfile(info, io.BytesIO(data))
    with contextlib.suppress(*engine_errors()):
        container.put_archive(runtime.run_dir, archive.getvalue())


# -- why a container restarted, in words ----------------------------------------------------------


def engine_time(value: str | None) -> float | None:
    """An engine's RFC 3339 time (2026-12-01T21:41:07.40694133Z) as seconds since 1970."""
    match = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?Z", value or "")
    if not match or match.group(1) == "0001":
        return None
    whole = calendar.timegm(tuple(int(part) for part in match.groups()[:6]) + (0, 0, 0))
    return whole + float(f"0.{match.group(7)}") if match.group(7) else float(whole)


def shown_time(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds is not None else "an unknown time"


def _container_events(client, container, since: str) -> list[tuple[str, float, str]]:
    """What the engine did to the container since its start `since` (the engine's time), in order,
    when, and with which signal (a kill's, else ""); [] when it cannot tell (an engine that
    restarted has forgotten)."""
    started = engine_time(since)
    if started is None:
        return []
    with contextlib.suppress(*engine_errors(), ValueError):
        events = client.api.events(
            since=f"{started:.3f}",
            until=f"{time.time():.3f}",
            filters={"container": container.id, "type": "container"},
            decode=True,
        )
        return [
            (
                str(event.get("Action") or event.get("status") or ""),
                int(event.get("timeNano") or 0) / 1e9,
                _signal_of(event),
            )
            for event in events
        ]
    return []


def _signal_of(event) -> str:
    attributes = (event.get("Actor") or {}).get("Attributes") or {}
    return str(attributes.get("signal") or "") if isinstance(attributes, dict) else ""


def _container_actions(client, container, since: str) -> list[str]:
    return [action for action, _, _ in _container_events(client, container, since)]


# The engine's events that change whether a container runs (not its execs, nor our own reads and
# writes of a remote container's files: archive-path, extract-to-dir).
LIFECYCLE = frozenset({"create", "start", "restart", "kill", "die", "stop", "oom", "pause", "unpause"})


def kept_down(client, container, since: str) -> bool:
    """Whether the container first stopped after its start `since` longer ago than a keeper takes
    to start its jobs again: a container that its restart policy starts again and again, its main
    process ending at once (a job can break the keeper from inside), never runs them again."""
    first = next((when for action, when, _ in _container_events(client, container, since) if action == "die"), None)
    return first is not None and time.time() - first >= KEEPER_GRACE_SECONDS


def may_be_started_again(client, container, since: str) -> bool:
    """Whether a container that is down now may be on its way up again: the engine's restart policy
    is starting it (not for too long), or it was stopped (not killed) a moment ago, as `docker
    restart` stops it before it starts it (half a second apart on an idle machine), and as `docker
    stop` leaves it. A job looked at in between must not be taken for lost: its files would be
    taken from the container, and its keeper would find nothing to start again."""
    state = container.attrs.get("State") or {}
    if state.get("Restarting"):
        return not kept_down(client, container, since)
    finished = engine_time(state.get("FinishedAt"))
    if state.get("Running") or finished is None or time.time() - finished >= RESTART_GAP_SECONDS:
        return False
    lifecycle = [
        (action, signal) for action, _, signal in _container_events(client, container, since) if action in LIFECYCLE
    ]
    return bool(lifecycle) and _stopping_or_started_again(lifecycle)


def _stopping_or_started_again(lifecycle: list[tuple[str, str]]) -> bool:
    """Whether the engine's last words on a container its look found down say that it was stopped
    (not killed), is being stopped, or has been started again since. The events are read after the
    container's state: by then `docker restart` may have started it again (a `start` or `restart`
    after a `die`); and `docker stop` says `stop` only once it has seen the container die of its
    TERM (a `kill` with signal 15, then `die`)."""
    actions = [action for action, _ in lifecycle]
    if actions[-1] == "stop" or (actions[-1] in ("start", "restart") and "die" in actions):
        return True
    killed = lifecycle[-2] if actions[-2:] == ["kill", "die"] else lifecycle[-1]
    return killed[0] == "kill" and killed[1] in ("15", "SIGTERM", "TERM")


def why_it_restarted(client, container, since: str, keeper_said: str | None = None, started_again: bool = True) -> str:
    """Why the container stopped since its start `since` (the engine's time), and was started
    again, as far as can be told: the keeper saw a new boot id (the machine restarted); else the
    engine's events since then: a restart or a kill of the container, or none at all (an engine
    keeps its events in memory: one that restarted has forgotten the container's stop)."""
    state = container.attrs.get("State") or {}
    stopped_at = shown_time(engine_time(state.get("FinishedAt")))
    if keeper_said == "boot":
        return f"the container stopped when the machine restarted (a new boot id), at {stopped_at}"
    actions = _container_actions(client, container, since)
    if "restart" in actions:
        return f"the container was restarted (docker restart) at {stopped_at}"
    if "kill" in actions or "die" in actions:
        again = (
            ", and started again"
            if started_again
            else " (docker stop or docker kill?), and Docker does not start it again by itself"
        )
        return f"the container was stopped at {stopped_at}, not by jupyter_trainer{again}"
    return f"the container stopped when the Docker engine restarted, at {stopped_at}"
