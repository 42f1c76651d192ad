"""Following one job's log as it grows: the one loop a view, a comparison and `logs -f` share.

A `LogFollower` owns what every follower of a log needs: the cursor (whole lines, by byte offset),
the truncation notice (said once, read from the new start), the budget of one call, the stream
settled once the job has ended, where the log's news comes from (a file to watch, a stream to
listen to), and the check that the run is still the one followed. What each caller does with the
bytes it is given (metrics, a screen, settled lines) is its own: `read` hands each read to `take`.

What differs between callers is said by its parameters, never by who calls:
* `Confirm`: when the run is confirmed, and whether its removal raises or is returned;
* `Budget`: how much one call reads (bytes, seconds, reads) and whether a short read ends it;
* `NulRuns`: whether a long run of NULs is left unread (a view) or read through (the others);
* `history_end`: bytes a tail already showed, read up to but never across, and not shown again.
A source that raises (an unreachable host) leaves the cursor where it was: a caller may retry.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import UnknownJob
from .reading import LogCursor
from .source import LogSource, TellingLog


class Confirm(enum.Enum):
    """When the follower checks that the run is still the one it follows (a run removed, and its
    name taken again, leaves another job's log at the same path)."""

    BEFORE_READING = "before reading"  # at each `open`, where the log is a file here; a removal raises
    ONCE_CAUGHT_UP = "once caught up"  # after a call that caught up, wherever the log is; said in `Reading.gone`


@dataclass(frozen=True)
class Budget:
    """How much one call of `read` reads at most (whichever is spent first)."""

    max_bytes: float = math.inf  # of the log read (a hole passed over counts one)
    max_seconds: float = math.inf
    max_reads: float = math.inf
    stop_when_short: bool = False  # a read that came back short ends the call: the log ended there a moment ago


ONE_READ = Budget(max_reads=1)


@dataclass(frozen=True)
class NulRuns:
    """A run of NULs this long is no job's output but a hole the file system cannot tell apart (a
    log read through a runtime, zeros written): the rest of it is left unread, and until the log
    grows by something else only `look` bytes are read of what it grew by."""

    left_after: int
    look: int


@dataclass(frozen=True)
class Read:
    """What one read brought. `data` is the cursor's buffer (its next read overwrites it: copy what
    is kept)."""

    data: bytearray  # whole new lines, each ending in a newline
    added: memoryview  # every byte the read added, as the log has them (cut anywhere)
    truncation: str | None  # the log was cut: this line says so, once; what follows is from its new start
    hole_end: int | None  # a hole was passed over unread, up to here (None after a truncation: all is new)
    in_history: bool  # the bytes lie before `history_end`: a tail showed them already


@dataclass(frozen=True)
class NulsLeft:
    """A run of NULs left unread (see NulRuns): from `start` to `end`; the log before `shown_to` was shown."""

    start: int
    end: int
    shown_to: int


@dataclass(frozen=True)
class Reading:
    """What one call of `read` did."""

    moved: bool  # something was read: the cursor moved, or the log was found truncated
    caught_up: bool | None  # nothing was left to read as the call ended (None: not looked at, see `read`)
    nuls_left: NulsLeft | None = None
    gone: bool = False  # Confirm.ONCE_CAUGHT_UP: the run was removed (its log reads as empty)


class LogFollower:
    """Follows one log from `offset`. `confirm` raises UnknownJob (or JobReplaced) once the run is
    not the one followed; `history_end`: the log before it was shown as a tail (reads stop there
    once, and say which bytes lie before it)."""

    def __init__(
        self,
        confirm: Callable[[], None],
        confirm_when: Confirm,
        offset: int = 0,
        chunk_size: int = 1 << 20,
        history_end: int = 0,
        nul_runs: NulRuns | None = None,
    ):
        self.cursor = LogCursor(offset, chunk_size=chunk_size)
        self.confirm = confirm
        self.confirm_when = confirm_when
        self.history_end = history_end
        self.nul_runs = nul_runs
        self.in_nuls = False  # what was read last ended in a run of NULs, left unread
        self.settled = False  # the source was asked for the log's true end (see LogSource.settle)
        self.log_file: Path | None = None  # the log's file, when it is one here: a view watches it
        self.log_stream: TellingLog | None = None  # else the stream that brings it, when it tells of its news

    def open(self, source: LogSource, final: bool) -> None:
        """Before a call's reads: note where the log's news comes from, confirm the run
        (Confirm.BEFORE_READING) and, once the job has ended (`final`), settle the source once."""
        self.log_file = source.local_file()
        self.log_stream = source if self.log_file is None and isinstance(source, TellingLog) else None
        if self.confirm_when is Confirm.BEFORE_READING and self.log_file is not None:
            self.confirm()  # a log at a path: after a removal it may be another job's
        if final:
            self.settle(source)

    def settle(self, source: LogSource) -> None:
        """Once: a streamed log is read up to its end, not the stream's."""
        if not self.settled:
            self.settled = True
            source.settle()

    def read(
        self, source: LogSource, take: Callable[[Read], None], budget: Budget = ONE_READ, look_at_size: bool = True
    ) -> Reading:
        """Read what the log gained, within `budget`, handing each read that moved to `take`.
        `look_at_size`: the log's size is asked once more at the end, to say whether the call caught
        up (else `caught_up` is None, but after a short read: a follower that reads again anyway
        learns it then, and asks a remote source nothing more)."""
        cursor = self.cursor
        bytes_left, reads_left = budget.max_bytes, budget.max_reads
        deadline = time.perf_counter() + budget.max_seconds
        moved = ended_short = False
        nuls_left = None
        while bytes_left > 0 and reads_left > 0:
            reads_left -= 1
            in_history = cursor.offset < self.history_end
            limit = min(bytes_left, cursor.chunk_size, self.nul_runs.look if self.in_nuls else bytes_left)
            before = cursor.offset
            # never read across the point where the shown tail ends
            data = cursor.read_bytes(source, limit=limit, until=self.history_end if in_history else None)
            truncation = cursor.take_truncation()
            if truncation:  # everything from the log's new start is news
                self.history_end, in_history = 0, False
            elif cursor.offset == before:
                break
            moved = True
            added = cursor.added
            bytes_left -= max(1, len(added))
            hole_end = cursor.offset - len(added) if cursor.skipped and not truncation else None
            take(Read(data, added, truncation, hole_end, in_history))
            nuls = self.nul_runs
            if nuls is not None and cursor.nul_run >= (nuls.look if self.in_nuls else nuls.left_after):
                nuls_left = self._leave_nuls(source)
                break
            self.in_nuls = False
            if budget.stop_when_short and not truncation and not cursor.cut_short and len(added) < limit:
                ended_short = True  # no second read (nor size) to learn that nothing follows
                break
            if time.perf_counter() >= deadline:
                break
        # what grows the log after a short read is news to the next call (and to a watch)
        caught_up = True if ended_short else source.size() <= cursor.offset if look_at_size else None
        gone = caught_up is True and self.confirm_when is Confirm.ONCE_CAUGHT_UP and not self._still_there()
        return Reading(moved, caught_up, nuls_left, gone)

    def _still_there(self) -> bool:
        """Whether the run is still the one followed: a log removed with its run reads as empty."""
        try:
            self.confirm()
        except UnknownJob:  # removed, or removed and its name taken again (JobReplaced)
            return False
        return True

    def _leave_nuls(self, source: LogSource) -> NulsLeft:
        """Read no more of a run of NULs: go on from the log's end. Until the log grows by something
        else, a look at the first bytes of what it grew by finds NULs again."""
        start = self.cursor.offset
        shown_to = max(start, self.history_end)  # the lines before it were shown (the history's tail)
        end = max(source.size(), start)
        self.cursor.skip_to(source, end)
        self.history_end = end
        self.in_nuls = True
        return NulsLeft(start, end, shown_to)
