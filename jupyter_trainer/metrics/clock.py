"""The log's clock: when it had how many bytes (the supervisor's samples)."""

from __future__ import annotations

import bisect
import math

from ..core.files import read_range

MAX_CLOCK_SAMPLES = 100_000  # past this, every other sample is let go
MAX_JOB_SECONDS = 366 * 86400  # a sample later than this after the start is not the supervisor's


CLOCK_READ = 1 << 20  # bytes of the log's clock file taken in at most a look


class LogClock:
    """When the log had how many bytes: the supervisor's samples ("SECONDS BYTES" lines, see
    supervise.sh), added as they are appended. A byte's time lies between the samples around it;
    past the last one, between it and the log's end `now` (`until`)."""

    def __init__(self, started_at: float | None):
        self.started_at = started_at
        self.sizes: list[int] = []
        self.times: list[float] = []
        self._partial = b""
        self._end: tuple[int, float] | None = None  # the log's size, and when it had it
        self._file_read = 0  # bytes of the clock file taken in (see `read_more`)

    def read_more(self, path, limit: int = CLOCK_READ) -> bool:
        """Take in what the clock file at `path` (the supervisor's samples) gained since the last
        look, at most `limit` bytes; False when it cannot be read."""
        try:
            added = read_range(path, self._file_read, limit)
        except OSError:
            return False
        self._file_read += len(added)
        self.add(added)
        return True

    @property
    def known(self) -> bool:
        return self.started_at is not None and bool(self.sizes)

    def add(self, data: bytes) -> None:
        """Samples the supervisor appended (the job can write them too: what does not fit is left out)."""
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-64:]
        for line in lines:
            try:
                seconds, size = line.split()
                when, size = float(seconds), int(size)
            except ValueError:
                continue
            if (
                not (math.isfinite(when) and abs(when) < 1e12)
                or size < 0
                or (self.sizes and (size < self.sizes[-1] or when < self.times[-1]))
            ):
                continue  # the log was cut, or the line is not the supervisor's: keep the run that grows
            if self.started_at is not None and when > self.started_at + MAX_JOB_SECONDS:
                continue  # a time no job reaches
            self.sizes.append(size)
            self.times.append(when)
        if len(self.sizes) > MAX_CLOCK_SAMPLES:
            del self.sizes[1::2], self.times[1::2]

    def until(self, size: int, when: float) -> None:
        """The log had `size` bytes at `when` (now): bytes after the last sample are placed before it."""
        self._end = (size, when)

    def seconds_at(self, offset: int) -> float | None:
        if not self.known:
            return None
        index = bisect.bisect_left(self.sizes, offset + 1)  # the first sample that includes the byte
        if index == len(self.sizes):
            if self._end is None or self._end[0] <= self.sizes[-1]:
                return max(0.0, self.times[-1] - self.started_at)
            low, high = (self.sizes[-1], self.times[-1]), self._end
        elif index == 0:
            low, high = (0, min(self.started_at, self.times[0])), (self.sizes[0], self.times[0])
        else:
            low, high = (self.sizes[index - 1], self.times[index - 1]), (self.sizes[index], self.times[index])
        span = high[0] - low[0]
        when = low[1] + (high[1] - low[1]) * ((offset - low[0]) / span if span > 0 else 1.0)
        seconds = when - self.started_at
        return max(0.0, seconds) if math.isfinite(seconds) else None
