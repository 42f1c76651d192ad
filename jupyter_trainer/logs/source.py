"""What a reader asks of a job's log, wherever it lies (a file of this machine, a container's file
read through its engine, a stream from a remote container, a copy of CloudWatch's).

Every member a reader uses is declared here: `size` and `read` each source has of its own; the
others have defaults in `LogSourceBase`, which every source inherits, so that a source that
leaves one out says what the default says (no file here, no time of growth, nothing to settle),
never nothing at all. A log that tells of its news as it comes (`TellingLog`) is the one optional
kind, found by isinstance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, runtime_checkable


class LogSource(Protocol):
    def size(self) -> int: ...

    def read(self, offset: int, limit: int) -> bytes: ...

    def local_file(self) -> Path | None:
        """The file on this machine that holds the log, or None when it is read through a runtime:
        a view may wait for the file to change, a reader pass over its holes, a follower confirm
        that the run is still the one it follows."""

    def modified(self) -> float | None:
        """When the log last grew, where that can be seen without reading it; else None."""

    def settle(self) -> None:
        """The job has ended and its log is complete: a source that may lag behind the log (a
        stream) looks at its end once more, so that a reader reads up to there."""


class LogSourceBase:
    """The defaults of LogSource's members besides `size` and `read`: every log source inherits them."""

    def local_file(self) -> Path | None:
        return None

    def modified(self) -> float | None:
        return None

    def settle(self) -> None:
        pass


@runtime_checkable
class TellingLog(Protocol):
    """A log source that tells of what the log gains as it comes (a remote container's stream):
    a view told so need not poll it. Optional: found with isinstance. For a log that is not a file
    on this machine (`local_file()` None): a local file's changes are watched where it lies
    (logs/watch.py), and a view asks no more of it. A source is made again whenever its job's
    record changes (Job.log_source): one that keeps a thread or a connection shares it per run
    (as Docker's SharedStreams does), not per source."""

    @property
    def telling(self) -> bool:
        """Whether listeners hear of what the log gains now (else only a poll sees news)."""

    def listen(self, callback: Callable[[bool], None]) -> None:
        """Call `callback(ended)` whenever the log gains bytes (False), and when the telling ends (True)."""

    def unlisten(self, callback: Callable[[bool], None]) -> None: ...
