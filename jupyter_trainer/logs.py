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
ANSI_ESCAPE_BYTES = re.compile(ANSI_ESCAPE.pattern.encode())
BLOCK_SIZE = 4 * 1024  # the largest first block read from the end; later ones double, up to MAX_BLOCK_SIZE
TYPICAL_LINE = 128  # bytes: the first block is sized for this many a line
MAX_BLOCK_SIZE = 1 << 20
MAX_PENDING = 64 * 1024  # an unended line kept beyond this is cut at its last redraw (\r)
LEADING_WORD = re.compile(r"\\b([A-Za-z0-9_]+)")  # a regex source that starts with \b and a word
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
    block_size = min(BLOCK_SIZE, count * TYPICAL_LINE)
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
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if position > 0:  # the first line is probably cut
        lines = lines[1:]
    if not lines:
        return []
    text = b"\n".join(lines[-count:]).decode("utf-8", errors="replace")  # only the lines asked for
    return [clean_line(line, strip_ansi) for line in text.split("\n")]


def last_lines(data: bytes | bytearray, count: int) -> bytes | bytearray:
    """The last `count` newline-ended lines of `data` (which ends in a newline)."""
    start = len(data) - 1
    for _ in range(count):
        start = data.rfind(b"\n", 0, start)
        if start < 0:
            return data
    return data[start + 1 :]


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
        self._buffer = bytearray()

    @property
    def line_start(self) -> int:
        """Where the unended last line starts in the log: reading again from here misses nothing
        (but for a progress bar so long that its older redraws were let go)."""
        return self.offset - len(self._partial)

    @property
    def pending(self) -> str:
        """The last line so far, not yet ended by a newline (a progress bar, say)."""
        return self._partial.decode("utf-8", errors="replace")

    def read(self, source: LogSource, limit: int | None = None) -> list[str]:
        """Complete new lines, reading at most `limit` bytes (one chunk by default)."""
        data = self.read_bytes(source, limit)
        return data[:-1].decode("utf-8", errors="replace").split("\n") if data else []

    def read_bytes(self, source: LogSource, limit: int | None = None) -> bytearray:
        """Like `read`, undecoded: the complete new lines as they are in the log, each ending in a
        newline. The buffer is the cursor's own and its next read overwrites it: cutting the unended
        last line off in place, instead of slicing a copy, more than doubles a backlog's read speed."""
        data = source.read(self.offset, limit or self.chunk_size)
        buffer = self._buffer
        del buffer[:]
        if not data:
            return buffer
        self.offset += len(data)
        buffer += self._partial
        buffer += data
        cut = buffer.rfind(b"\n")
        self._partial = self._bounded(bytes(buffer[cut + 1 :]))
        del buffer[cut + 1 :]
        return buffer

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
        self.patterns = [(metric.name, re.compile(literal_first(metric.regex))) for metric in metrics]
        # Matching the log's bytes directly saves decoding it. Over ASCII bytes a bytes pattern
        # matches as its text pattern does (but for \s, which leaves out \x1c-\x1f); text with other
        # characters, and a pattern that cannot be a bytes pattern (non-ASCII, an inline (?u)),
        # are matched as decoded text.
        self._byte_patterns = [(name, _as_bytes_pattern(pattern)) for name, pattern in self.patterns]

    def scan(self, data: bytes) -> list[tuple[str, list[bytes] | list[str]]]:
        """Each metric's captured values in `data` (raw log bytes), in log order and unconverted:
        converting only what a chart keeps is what makes a long backlog cheap."""
        if b"\x1b" in data:
            data = ANSI_ESCAPE_BYTES.sub(b"", data)
        text = None
        found = []
        ascii_only = data.isascii()
        for (name, pattern), (_, byte_pattern) in zip(self.patterns, self._byte_patterns):
            if pattern.groups != 1:
                continue
            if byte_pattern is not None and ascii_only:
                values = byte_pattern.findall(data)
            else:
                if text is None:
                    text = data.decode("utf-8", errors="replace")
                values = pattern.findall(text)
            found.append((name, values))
        return found


def literal_first(regex: str) -> str:
    """`\\bword…` rewritten as `word(?<=\\bword)…`: the same matches, but a regex that starts with a
    literal lets the engine jump from one occurrence to the next instead of trying every position
    (three times faster on a log where every line has a loss, fifteen where none has)."""
    leading = LEADING_WORD.match(regex)
    if leading is None or _flags(regex) & re.VERBOSE:  # verbose: a quantifier may follow after spaces
        return regex
    word, rest = leading.group(1), regex[leading.end() :]
    if rest[:1] in ("?", "*", "+", "{"):  # the quantifier is the last letter's, not the word's
        word, rest = word[:-1], word[-1] + rest
    return f"{word}(?<=\\b{word}){rest}" if word else regex


def _flags(regex: str) -> int:
    try:
        return re.compile(regex).flags
    except re.error:
        return 0


def _as_bytes_pattern(pattern: re.Pattern[str]) -> re.Pattern[bytes] | None:
    if not pattern.pattern.isascii():
        return None
    try:
        return re.compile(pattern.pattern.encode("ascii"), pattern.flags & ~re.UNICODE)
    except re.error:
        return None
