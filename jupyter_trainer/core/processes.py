"""Processes on this machine, identified so that a reused pid is not mistaken for ours.

A pid alone is not an identity: after the process ends (or the machine
reboots) the number is given to someone else. We keep the pid with its start
time (in clock ticks since boot) and the boot id, and a process matches only if
all three do.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

_PROC = Path("/proc")


_boot_id: str | None = None


def boot_id() -> str:
    """This boot's id. It cannot change while this process lives, so it is read once: every
    status check of a job compares it."""
    global _boot_id
    if _boot_id is None:
        try:
            _boot_id = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            return ""
    return _boot_id


def _stat_fields(pid: int) -> list[str] | None:
    # read with the bare calls: a look at a job's usage reads this for every process of the machine
    try:
        fd = os.open(f"{_PROC}/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # the command name (field 2) may hold spaces and parentheses; it ends at the last ')'
    close = data.rfind(b")")
    return data[close + 2 :].decode("ascii", "replace").split() if close >= 0 else None


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: int | None
    boot_id: str

    @classmethod
    def of(cls, pid: int) -> "ProcessIdentity":
        return cls(pid, start_time(pid), boot_id())

    @classmethod
    def current(cls) -> "ProcessIdentity":
        return cls.of(os.getpid())

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data) -> "ProcessIdentity":
        """The identity a record keeps; one that is malformed matches no process (and so is never signalled)."""
        try:
            pid, started, boot = data["pid"], data.get("start_time"), data.get("boot_id", "")
        except (TypeError, KeyError, AttributeError):
            return UNKNOWN_PROCESS
        if not _is_int(pid) or pid <= 1 or not (started is None or _is_int(started)) or not isinstance(boot, str):
            return UNKNOWN_PROCESS
        return cls(pid, started, boot)

    def is_alive(self) -> bool:
        """Whether this very process still runs. Without a start time to compare, a pid could be
        anybody's, so it is not taken for ours."""
        if self.start_time is None or self.pid <= 1:
            return False
        if self.boot_id and boot_id() and self.boot_id != boot_id():
            return False
        fields = _stat_fields(self.pid)
        if fields is None or fields[0] in ("Z", "X"):  # gone, or ended and waiting to be reaped
            return False
        return int(fields[19]) == self.start_time


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


UNKNOWN_PROCESS = ProcessIdentity(0, None, "")


def command_line(pid: int) -> list[str] | None:
    """The arguments a live process on this machine runs with (None if it is gone)."""
    try:
        data = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return data.decode(errors="replace").split("\0")[:-1]


def session_id(pid: int) -> int | None:
    """The session of a live process on this machine (None if it is gone)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[3])


# a pass over /proc serves every job looked at within this long (the views' looks of one tick)
SHARED_SCAN_SECONDS = 0.5


def session_usage(session: int, shared: bool = False) -> tuple[float, int, float] | None:
    """CPU seconds used so far and memory (bytes) of every live process in `session` (a job's
    session: it and all it started), and when they were read (time.monotonic); None if none is
    left. Memory is each process's proportional share (PSS), so that pages they share (a forked
    worker's) are counted once in all. `shared`: from a pass over /proc made for every job at most
    SHARED_SCAN_SECONDS ago (a view following twenty jobs makes one, not twenty)."""
    taken_at, sessions = _session_table(SHARED_SCAN_SECONDS if shared else 0.0, session)
    members = sessions.get(session)
    if not members:
        return None
    ticks = sum(int(fields[11]) + int(fields[12]) for _, fields in members)  # utime, stime
    fresh = _members_changed(session, members)
    memory = sum(_pss.of(pid, int(fields[19]), int(fields[21]), fresh) for pid, fields in members)
    return ticks / os.sysconf("SC_CLK_TCK"), memory, taken_at


# A pass over /proc reads the stat of the processes of the sessions looked at, and of those new
# since the last pass; of the others only that they are still there: a process can leave a session
# (setsid) but never join another, so one seen outside every session looked at stays outside. On
# a busy machine (a CI run's hundreds of processes) that is most of the cost of a look. Every
# process is read again this often, in case a pid was freed and given again between two passes.
FULL_SCAN_SECONDS = 30.0
LOOKED_AT_SECONDS = 60.0  # a session not looked at for this long is no longer read at every pass

_scan: tuple[float, dict[int, list[tuple[int, list[str]]]]] = (float("-inf"), {})
_scan_lock = threading.Lock()
_seen: dict[int, tuple[int, list[str]]] = {}  # pid: its session and stat fields, as the last pass read them
_full_scan_at = float("-inf")
_looked_at: dict[int, float] = {}  # session: when it was last looked at


def _session_table(max_age: float, session: int | None = None) -> tuple[float, dict[int, list[tuple[int, list[str]]]]]:
    """Every live process of the machine by session: (when read, {session: [(pid, stat fields)]}).
    `session`: the one looked at (None: a full pass, every process read). Its processes were
    read in the pass returned, whatever the other sessions' were (see FULL_SCAN_SECONDS)."""
    global _scan, _full_scan_at
    with _scan_lock:
        now = time.monotonic()
        first_look = session is not None and session not in _looked_at
        if session is not None:
            if first_look and len(_looked_at) >= PSS_KEPT:
                _looked_at.clear()
            _looked_at[session] = now
        taken_at, sessions = _scan
        if not first_look and now - taken_at <= max_age:
            return taken_at, sessions
        full = session is None or now - _full_scan_at >= FULL_SCAN_SECONDS
        looked_at = {looked for looked, at in _looked_at.items() if now - at < LOOKED_AT_SECONDS}
        seen: dict[int, tuple[int, list[str]]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            known = _seen.get(pid)
            if known is not None and not full and known[0] not in looked_at:
                seen[pid] = known
                continue
            fields = _stat_fields(pid)
            if fields is not None:
                seen[pid] = (int(fields[3]), fields)
        _seen.clear()
        _seen.update(seen)
        if full:
            _full_scan_at = now
            stale = [looked for looked, at in _looked_at.items() if now - at >= LOOKED_AT_SECONDS]
            for looked in stale:
                del _looked_at[looked]
        sessions = {}
        for pid, (member_of, fields) in seen.items():
            if fields[0] not in ("Z", "X"):
                sessions.setdefault(member_of, []).append((pid, fields))
        _scan = (now, sessions)
        return _scan


# Reading a process's PSS makes the kernel walk all its memory: a look at a big job's usage would
# cost milliseconds. It is read this often; in between, it moves with the resident set (from the
# stat already read), since what a process gains is its own pages, which both count in full.
PSS_SECONDS = 30.0
PSS_KEPT = 4096  # processes whose last reading is kept (forgotten all at once beyond)


_members_seen: dict[int, frozenset] = {}  # session: its processes (pid, start time) at the last look


def _members_changed(session: int, members: list[tuple[int, list[str]]]) -> bool:
    """Whether the session's processes are others than at the last look at it. A fork shares the
    parent's pages with the child, and a child's exit gives them back: the PSS of each process
    that stays changes then, while its resident set does not."""
    now = frozenset((pid, fields[19]) for pid, fields in members)
    before = _members_seen.get(session)
    if before == now:
        return False
    if len(_members_seen) >= PSS_KEPT:
        _members_seen.clear()
    _members_seen[session] = now
    return before is not None


class ProportionalMemory:
    """Processes' PSS, read now and then. Reading it makes the kernel walk the process's memory: it
    is read every PSS_SECONDS, and in between what the process gained or gave back (its resident
    set, from the stat already read) is added to the PSS read last. `read` (pid -> bytes, None
    where the kernel does not say) and `clock` are the machine's unless told."""

    def __init__(self, read: Callable[[int], int | None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.read = read or _read_pss
        self.clock = clock
        self.known: dict[
            tuple[int, int], tuple[float, int, int]
        ] = {}  # (pid, start time): (when, PSS, resident set then)

    def of(self, pid: int, started: int, rss_pages: int, fresh: bool = False) -> int:
        """The process's PSS in bytes (its resident set where the kernel does not say). `fresh`:
        read now, whenever it was read last."""
        resident = rss_pages * os.sysconf("SC_PAGE_SIZE")
        key = (pid, started)  # a pid reused by another process is another key
        known = self.known.get(key)
        now = self.clock()
        if known is not None and not fresh and now - known[0] < PSS_SECONDS:
            return max(0, known[1] + resident - known[2])
        pss = self.read(pid)
        if pss is None:
            return resident
        if len(self.known) >= PSS_KEPT:
            self.known.clear()
        self.known[key] = (now, pss, resident)
        return pss


def _read_pss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as file:
            for line in file:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


_pss = ProportionalMemory()  # this machine's, for every job looked at


def memory_limit(pid: int) -> int | None:
    """The memory the process may use: the lowest limit of its cgroup and the cgroups above it
    (v2 `memory.max` up the tree, v1 `hierarchical_memory_limit`), else the machine's memory."""
    try:
        with open(f"/proc/{pid}/cgroup") as file:
            lines = file.read().splitlines()
    except OSError:
        lines = []
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: each level may set its own
            parts = [part for part in path.split("/") if part]
            for depth in range(len(parts), 0, -1):
                limits.append(_read_limit(f"/sys/fs/cgroup/{'/'.join(parts[:depth])}/memory.max"))
        elif "memory" in controllers.split(","):  # v1: the kernel works the hierarchy's limit out
            limits.append(_read_limit(f"/sys/fs/cgroup/memory{path}/memory.stat", "hierarchical_memory_limit"))
    found = [limit for limit in limits if limit is not None]
    if found:
        return min(found)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def _read_limit(path: str, key: str | None = None) -> int | None:
    """A cgroup's memory limit from `path` (the `key` line of a stat file); None for none ("max", or
    v1's page-rounded largest number)."""
    try:
        with open(path) as file:
            text = file.read()
    except OSError:
        return None
    if key is not None:
        text = next((line.split()[1] for line in text.splitlines() if line.split()[:1] == [key]), "")
    text = text.strip()
    return int(text) if text.isdigit() and int(text) < 1 << 60 else None


def session_members(session: int | None, limit: int = 5) -> list[str]:
    """The live processes of `session`, "pid N: command" each (the first `limit`, then how many more)."""
    if not session or session <= 1:
        return []
    found = [pid for pid, _ in _session_table(0.0)[1].get(session, [])]
    shown = [f"pid {pid}: {' '.join(command_line(pid) or ['?'])[:80]}" for pid in sorted(found)[:limit]]
    return shown + ([f"{len(found) - limit} more"] if len(found) > limit else [])
