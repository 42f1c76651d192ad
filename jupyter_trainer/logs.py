"""Reading job logs: by byte offset, from the end, and for metrics.

Logs can grow to gigabytes over a multi-day run, so nothing here reads a whole
log: a `LogCursor` reads only the bytes added since its last read, and
`tail_lines` reads blocks backwards from the end until it has enough lines.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, Protocol

from .spec import Metric

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)")
BLOCK_SIZE = 4 * 1024  # the first block read from the end; later ones double, up to MAX_BLOCK_SIZE
MAX_BLOCK_SIZE = 1 << 20
MAX_PENDING = 64 * 1024  # an unended line kept beyond this is cut at its last redraw (\r)
DEFAULT_METRICS = (Metric("loss", r"\bloss\b\s*[:=]?\s*([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)"),)


class LogSource(Protocol):
    def size(self) -> int: ...

    def read(self, offset: int, limit: int) -> bytes: ...


def clean_line(line: str, strip_ansi: bool = True) -> str:
    """A log line as shown: progress-bar redraws (\\r) collapsed to the last state."""
    line = line.rstrip("\r\n")
    if "\r" in line:
        line = line[line.rindex("\r") + 1 :]
    return ANSI_ESCAPE.sub("", line) if strip_ansi else line


def tail_lines(source: LogSource, count: int, strip_ansi: bool = True) -> list[str]:
    """The last `count` lines, read from the end in blocks: cost grows with `count`, not the log."""
    if count <= 0:
        return []
    end = source.size()
    chunks: list[bytes] = []
    newlines = 0
    position = end
    block_size = BLOCK_SIZE
    while position > 0 and newlines <= count:
        start = max(0, position - block_size)
        block = source.read(start, position - start)
        if not block:
            break
        chunks.append(block)
        newlines += block.count(b"\n")
        position = start
        block_size = min(block_size * 2, MAX_BLOCK_SIZE)
    data = b"".join(reversed(chunks))
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if position > 0:  # the first line is probably cut
        lines = lines[1:]
    return [clean_line(line, strip_ansi) for line in lines[-count:]]


def read_all_lines(source: LogSource, strip_ansi: bool = True) -> Iterator[str]:
    cursor = LogCursor()
    while True:
        lines = cursor.read(source)
        if not lines:
            break
        yield from (clean_line(line, strip_ansi) for line in lines)
    if cursor.pending:
        yield clean_line(cursor.pending, strip_ansi)


class LogCursor:
    """Reads what a log gained since the last read, in whole lines."""

    def __init__(self, offset: int = 0, chunk_size: int = 1 << 20):
        self.offset = offset
        self.chunk_size = chunk_size
        self._partial = b""

    @property
    def pending(self) -> str:
        """The last line so far, not yet ended by a newline (a progress bar, say)."""
        return self._partial.decode("utf-8", errors="replace")

    def read(self, source: LogSource, limit: int | None = None) -> list[str]:
        """Complete new lines, reading at most `limit` bytes (one chunk by default)."""
        data = source.read(self.offset, limit or self.chunk_size)
        if not data:
            return []
        self.offset += len(data)
        data = self._partial + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = self._bounded(data)
            return []
        self._partial = self._bounded(data[cut + 1 :])
        return data[:cut].decode("utf-8", errors="replace").split("\n")

    @staticmethod
    def _bounded(partial: bytes) -> bytes:
        """A progress bar redraws with \r and never ends its line: keep its last state only."""
        if len(partial) <= MAX_PENDING:
            return partial
        redraw = partial.rfind(b"\r", 0, len(partial) - 1)
        return partial[redraw + 1 :] if redraw >= 0 else partial[-MAX_PENDING:]


class MetricParser:
    """Pulls metric values out of log text, SageMaker metric-definition style: every match of each
    definition's regex, whose one capture group is the value."""

    def __init__(self, metrics: Iterable[Metric] = ()):
        metrics = tuple(metrics) or DEFAULT_METRICS
        self.patterns = [(metric.name, metric.compile()) for metric in metrics]

    def parse(self, text: str) -> list[tuple[str, float]]:
        """(name, value) for every match in `text` (a line, or many lines at once), by metric."""
        found = []
        for name, pattern in self.patterns:
            for match in pattern.finditer(text):
                try:
                    found.append((name, float(match.group(1))))
                except (TypeError, ValueError):
                    pass
        return found
