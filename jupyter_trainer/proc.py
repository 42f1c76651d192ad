"""Processes on this machine, identified so that a reused pid is not mistaken for ours.

A pid alone is not an identity: after the process ends (or the machine
reboots) the number is given to someone else. We keep the pid with its start
time (in clock ticks since boot) and the boot id, and a process matches only if
all three do.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

_PROC = Path("/proc")


def boot_id() -> str:
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses; it ends at the last ')'
    return text[text.rindex(")") + 2 :].split()


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
    def from_dict(cls, data: dict) -> "ProcessIdentity":
        return cls(int(data["pid"]), data.get("start_time"), data.get("boot_id", ""))

    def is_alive(self) -> bool:
        if self.boot_id and boot_id() and self.boot_id != boot_id():
            return False
        fields = _stat_fields(self.pid)
        if fields is None:
            if _PROC.is_dir():
                return False
            return _signal_zero(self.pid)
        if fields[0] in ("Z", "X"):  # ended, waiting to be reaped
            return False
        return self.start_time is None or int(fields[19]) == self.start_time


def _signal_zero(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def session_id(pid: int) -> int | None:
    """The session of a live process on this machine (None if it is gone)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[3])
