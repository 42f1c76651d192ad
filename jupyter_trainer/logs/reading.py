"""Reading job logs: by byte offset, from the end, and for metrics.

Logs can grow to gigabytes over a multi-day run, so nothing here reads a whole
log: a `LogCursor` reads only the bytes added since its last read, and
`tail_lines` reads blocks backwards from the end until it has enough lines.
"""

from __future__ import annotations

import re
import time
from functools import partial
from typing import Callable, Iterable, Iterator

from ..core import files as _fs
from ..core.wording import ESCAPE_SEQUENCES, readable
from ..spec.job_spec import Metric
from .source import LogSource
from .terminal import MAX_SHOWN_LINE, SCREEN_ROWS, Screen, bounded_line

# A shown line is `readable` (wording.py): without what a terminal would act on (move the cursor,
# retitle the window, switch character sets, reset itself) or what reorders the text around it.
ANSI_ESCAPE_BYTES = re.compile(ESCAPE_SEQUENCES.encode())  # before matching metrics: values stay whole
BLOCK_SIZE = 4 * 1024  # the largest first block read from the end; later ones double, up to MAX_BLOCK_SIZE
TYPICAL_LINE = 128  # bytes: the first block is sized for this many a line
MAX_BLOCK_SIZE = 1 << 20
MAX_PENDING = 64 * 1024  # an unended line kept beyond this is cut at its last redraw (\r)
TAIL_BYTES_PER_LINE = 8 * 1024  # a tail reads at most this much a line asked for...
TAIL_MIN_BYTES = 1 << 20  # ...and at least this much: a log of one endless line costs no more
MAX_REPLAYED = 8  # times the lines asked for (and a screen): the most a tail replays to find them
CHECK_BYTES = 64  # log bytes before the read offset that must be unchanged: else the log was truncated
LEADING_WORD = re.compile(r"\\b([A-Za-z0-9_]+)")  # a regex source that starts with \b and a word
# Matching one chunk of the log with one metric's pattern: past this, the chunk is matched again
# line by line, each line capped, and a line still too slow is skipped. Matching releases the GIL,
# so the kernel answers meanwhile whatever a pattern does.
SCAN_TIMEOUT = 0.05  # seconds
LINE_SCAN_TIMEOUT = 0.002  # seconds
FALLBACK_SECONDS = 0.1  # all of a chunk's lines together: past it, the chunk's other lines are skipped
MAX_MATCHED_LINE = 4096  # bytes of a line a pattern looks at once a chunk was too slow


def written_span(source: LogSource, offset: int) -> tuple[int, int] | None:
    """Where the log's next written bytes from `offset` on start and end, when a hole lies ahead
    (see _fs.written_span); None when none does, or the source cannot tell (a log read through a
    runtime: its holes are read as the NULs they are)."""
    path = source.local_file()
    return _fs.written_span(path, offset) if path is not None else None


def clean_line(line: str, strip_ansi: bool = True) -> str:
    """A log line as shown: progress-bar redraws (\\r) collapsed to the last state."""
    line = line.rstrip("\r\n")
    if "\r" in line:
        line = line[line.rindex("\r") + 1 :]
    if len(line) > MAX_SHOWN_LINE:
        line = "…" + line[-MAX_SHOWN_LINE:]
    return readable(line) if strip_ansi else line


def tail_lines(
    source: LogSource,
    count: int,
    strip_ansi: bool = True,
    block_size: int = BLOCK_SIZE,
    max_block_size: int = MAX_BLOCK_SIZE,
) -> list[str]:
    """The last `count` lines as a terminal would have shown them (see terminal.py: a nested
    progress bar's strokes collapse to what it drew last), read from the end in blocks (the first
    at most `block_size`, then doubling up to `max_block_size`): cost grows with `count`, not the
    log. The bytes read are bounded too, so a log of one endless line (progress-bar redraws) costs
    no more: its last line is shown by its last redraws, or by its end. With `strip_ansi` false,
    the lines as written instead, escapes kept and only their \r redraws collapsed."""
    if count <= 0:
        return []
    if not strip_ansi:
        lines, _, _, _ = _last_raw_lines(source, count, block_size, max_block_size)
        text = b"\n".join(lines).decode("utf-8", errors="replace")
        return [clean_line(line, strip_ansi) for line in text.split("\n")] if lines else []
    return tail_screen(source, count, block_size, max_block_size).lines()[-count:]


def tail_screen(
    source: LogSource,
    count: int,
    block_size: int = BLOCK_SIZE,
    max_block_size: int = MAX_BLOCK_SIZE,
    end: int | None = None,
    ended_only: bool = False,
    start: int = 0,
) -> Screen:
    """A terminal's screen after the log's last lines (up to `end`, by default its size), enough of
    them for `count` shown lines (its scrollback, not taken yet, holds those above the screen). A
    few more lines than asked are replayed, so that a bar that redraws over earlier lines starts
    from them; and more again while redraws leave fewer than `count` lines shown, within the same
    bound on bytes read. `ended_only`: an unended last line is left out (a cursor shows it).
    `start`: nothing before it is looked at (it was shown already)."""
    wanted = count + SCREEN_ROWS
    while True:
        lines, more, ended, starts_later = _last_raw_lines(source, wanted, block_size, max_block_size, end, start)
        if lines and ended_only and not ended:
            lines.pop()
            ended = True
        screen = Screen(at_bottom=starts_later)
        if lines:  # after a last line ended, the cursor is on the row below it
            text = b"\n".join(bounded_line(line) for line in lines) + b"\n" * ended
            screen.feed(text.decode("utf-8", errors="replace"))
        if not more or len(screen.lines()) >= count or wanted >= MAX_REPLAYED * (count + SCREEN_ROWS):
            return screen  # (a log whose last thousands of lines all drew over each other shows fewer)
        wanted *= 2


def _last_raw_lines(
    source: LogSource, count: int, block_size: int, max_block_size: int, end: int | None = None, start: int = 0
) -> tuple[list[bytes], bool, bool, bool]:
    """The log's last `count` lines before `end` (and from `start` on) as bytes, whether there are
    earlier ones within the bound on bytes a tail reads, whether the last line is ended, and whether
    the log has bytes before the first line given. A block of nothing but NULs (a sparse file's
    hole) ends the search: what lies before it is older output."""
    end = source.size() if end is None else end
    chunks: list[bytes] = []
    newlines = 0
    position = end
    floor = max(start, end - max(TAIL_MIN_BYTES, count * TAIL_BYTES_PER_LINE))
    block_size = min(block_size, count * TYPICAL_LINE)
    after_nuls = False
    while position > floor and newlines <= count:
        begin = max(floor, position - block_size)
        block = source.read(begin, position - begin)
        if not block:
            break
        if not block.strip(b"\0"):
            after_nuls = True
            break
        chunks.append(block)
        newlines += block.count(b"\n")
        position = begin
        block_size = min(block_size * 2, max_block_size)
    data = b"".join(reversed(chunks))
    ended = data.endswith(b"\n")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if position > start and not after_nuls and len(lines) > 1:  # the first line is probably cut
        lines = lines[1:]
    more = (position > floor and not after_nuls) or len(lines) > count
    return lines[-count:], more, ended, position > 0 or len(lines) > count


def last_lines(data: bytes | bytearray, count: int) -> bytes | bytearray:
    """The last `count` newline-ended lines of `data` (which ends in a newline)."""
    start = len(data) - 1
    for _ in range(count):
        start = data.rfind(b"\n", 0, start)
        if start < 0:
            return data
    return data[start + 1 :]


def read_all_lines(source: LogSource, strip_ansi: bool = True) -> Iterator[str]:
    """The whole log, line by line, as a terminal would have shown it (see `tail_lines`): only a
    screen's worth of lines is held at a time."""
    cursor = LogCursor()
    screen = Screen()
    while True:
        before = cursor.offset
        data = cursor.read_bytes(source)
        note = cursor.take_truncation()
        if note:  # what was shown before stays; what follows starts on a clear screen
            yield from screen.lines()
            screen = Screen()
            yield note
        if not data:  # (a read inside a line of megabytes, or over a hole, gives no whole line)
            if cursor.offset == before:
                break
            continue
        if not strip_ansi:
            yield from (
                clean_line(line, strip_ansi) for line in data[:-1].decode("utf-8", errors="replace").split("\n")
            )
            continue
        screen.feed(data.decode("utf-8", errors="replace"))
        yield from screen.take_scrolled()
    if not strip_ansi:
        if cursor.pending:
            yield clean_line(cursor.pending, strip_ansi)
        return
    screen.feed(cursor.pending)
    yield from screen.lines()


class LogCursor:
    """Reads what a log gained since the last read, in whole lines; `added` is every byte the
    read added, as the log has them (the metric reader takes bytes cut anywhere).

    A log can also shrink: a job that truncates its stdout, a copytruncate rotation, a log
    fetched again. The bytes just before the offset are checked at every read; when they are
    gone or changed, the cursor says so once (`take_truncation`) and follows from the new start.

    A hole of a sparse file (`truncate -s 10G`, a job that seeks ahead before it writes) is never
    read where the file system can tell where it lies: a read passes over it (`skipped` says how
    far) and stops where the next one starts (`cut_short`). NULs it does read are counted
    (`nul_run`: how many in a row end what was read), so that a follower can give up on them.
    """

    def __init__(self, offset: int = 0, chunk_size: int = 1 << 20):
        self.offset = offset
        self.chunk_size = chunk_size
        self._partial = b""
        self._check = b""  # the log's bytes just before `offset`, as they were read
        self._truncated_at: int | None = None
        self._buffer = bytearray()
        self.added: memoryview = memoryview(b"")  # the bytes the last read added, as the log has them
        self.skipped = 0  # bytes of a hole the last read passed over, just before `added`
        self.cut_short = False  # the last read stopped before its limit where more may follow
        self.nul_run = 0  # NULs read in a row, up to `offset`

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

    def take_truncation(self) -> str | None:
        """Once per truncation seen: a line saying that the log was cut and is followed from its new start."""
        at, self._truncated_at = self._truncated_at, None
        if at is None:
            return None
        return f"[jupyter_trainer: the log was truncated (it had {at} bytes); following it from its new start]"

    def skip_to(self, source: LogSource, offset: int) -> None:
        """Go on from `offset`, nothing before it read: the unended line is let go. As over a hole,
        the bytes before the old offset are checked and those before `offset` kept (a log cut
        before either look is said to be, once), so that a truncation before the next read, and
        the log's growth past `offset` again, is seen: a cursor with no bytes to check would learn
        them from the log as it is then."""
        self._partial = b""
        if self._pass_hole(source, offset):
            self.skipped = 0
            if len(self._check) < min(CHECK_BYTES, offset):  # cut between the two looks
                self._restart()

    def read_bytes(self, source: LogSource, limit: int | None = None, until: int | None = None) -> bytearray:
        """Like `read`, undecoded: the complete new lines as they are in the log, each ending in a
        newline. The buffer is the cursor's own and its next read overwrites it: cutting the unended
        last line off in place, instead of slicing a copy, more than doubles a backlog's read speed.
        `until`: a place in the log the read does not go past (a hole it passes over included)."""
        limit = limit or self.chunk_size
        buffer = self._buffer
        del buffer[:]
        self.added = memoryview(b"")
        self.skipped, self.cut_short = 0, False
        span = written_span(source, self.offset)
        if span is not None and span[0] > self.offset:
            if not self._pass_hole(source, span[0] if until is None else min(span[0], until)):
                span = None  # the log was truncated: read from its new start
        stop = self.offset + limit
        for bound in (span[1] if span is not None else None, until):
            if bound is not None and bound < stop:
                stop, self.cut_short = bound, True
        if stop <= self.offset:
            return buffer
        known = min(CHECK_BYTES, self.offset)
        data = source.read(self.offset - known, stop - self.offset + known)
        if len(data) < known or (self._check and data[:known] != self._check):
            self._restart()
            known, data = 0, source.read(0, limit)
            self.cut_short = False
        if len(data) == known:
            self._check = bytes(data)  # a cursor that started at an offset learns what precedes it
            self.cut_short = False
            return buffer
        view = memoryview(data)[known:]
        self.added = view
        self.offset += len(view)
        self._check = bytes(data[-CHECK_BYTES:])
        nuls = len(data) - len(data.rstrip(b"\0"))
        self.nul_run = self.nul_run + len(view) if nuls >= len(view) else nuls
        buffer += self._partial
        buffer += view
        cut = buffer.rfind(b"\n")
        self._partial = _bounded(bytes(buffer[cut + 1 :]))
        del buffer[cut + 1 :]
        return buffer

    def _pass_hole(self, source: LogSource, to: int) -> bool:
        """Move on to `to` over a hole (the unended line goes on after it, as a terminal shows NULs:
        not at all), once the bytes before the offset are found unchanged; False if they are not."""
        known = min(CHECK_BYTES, self.offset)
        before = source.read(self.offset - known, known)
        if len(before) < known or (self._check and before != self._check):
            self._restart()
            return False
        self.skipped, self.nul_run = to - self.offset, 0  # (a hole is no NUL read)
        known = min(CHECK_BYTES, to)
        self.offset, self._check = to, source.read(to - known, known)  # the bytes before it, as they are now
        return True

    def _restart(self) -> None:
        self._truncated_at = self.offset
        self.offset, self._partial, self._check, self.nul_run = 0, b"", b"", 0


def _bounded(partial: bytes) -> bytes:
    """The unended last line, bounded: a progress bar redraws with \r and may never end its line,
    so only its last state is kept."""
    if len(partial) <= MAX_PENDING:
        return partial
    redraw = partial.rfind(b"\r", 0, len(partial) - 1)
    return partial[redraw + 1 :] if redraw >= 0 else partial[-MAX_PENDING:]


class MetricParser:
    """The user's `--metric NAME=REGEX` definitions, SageMaker metric-definition style: every match
    of each definition's regex, whose one capture group is the value. (Metrics that common training
    output prints are found without any: metrics.py.)

    No log may stall a poll: a pattern that takes too long on a chunk (a user's regex that
    backtracks over a line of spaces, say) is tried again line by line, on each line's last
    MAX_MATCHED_LINE bytes only, and a line still too slow is skipped; the lines read in part
    or not at all are counted in `skipped`."""

    def __init__(self, metrics: Iterable[Metric] = ()):
        # a user's pattern may backtrack without end, so it runs under `regex`'s timeout
        self.patterns = [(metric.name, _compile(literal_first(metric.regex))) for metric in metrics]
        # Matching the log's bytes directly saves decoding it. Over ASCII bytes a bytes pattern
        # matches as its text pattern does (but for \s, which leaves out \x1c-\x1f); text with other
        # characters, and a pattern that cannot be a bytes pattern (non-ASCII, an inline (?u)),
        # are matched as decoded text.
        self._byte_patterns = [(name, _as_bytes_pattern(pattern)) for name, pattern in self.patterns]
        self.skipped: dict[str, int] = {}  # per metric: lines given up on as too slow to match

    def finders(self) -> list[tuple[str, Callable[[bytes], list[tuple[int, bytes | str]]]]]:
        """(name, find) per definition: `find(data)` gives (byte position, value) of each match."""
        return [(name, partial(self.find, index)) for index, (name, _) in enumerate(self.patterns)]

    def scan(self, data: bytes) -> list[tuple[str, list[bytes] | list[str]]]:
        """Each metric's captured values in `data` (raw log bytes), in log order and unconverted."""
        if b"\x1b" in data:
            data = ANSI_ESCAPE_BYTES.sub(b"", data)
        return [(name, [value for _, value in self.find(index, data)]) for index, (name, _) in enumerate(self.patterns)]

    def find(self, index: int, data: bytes) -> list[tuple[int, bytes | str]]:
        name, pattern = self.patterns[index]
        if pattern.groups != 1:
            return []
        byte_pattern = self._byte_patterns[index][1]
        if byte_pattern is not None and data.isascii():
            return self._find(name, byte_pattern, data, b"\n")
        text = data.decode("utf-8", errors="replace")
        found = self._find(name, pattern, text, "\n")
        return _byte_positions(text, found) if not data.isascii() else found

    def _find(self, name: str, pattern, subject, newline) -> list:
        try:
            return [
                (match.start(1), match.group(1))
                for match in pattern.finditer(subject, concurrent=True, timeout=SCAN_TIMEOUT)
            ]
        except TimeoutError:
            pass
        found: list = []
        lines = subject.split(newline)
        deadline = time.monotonic() + FALLBACK_SECONDS
        line_start = 0
        for index, line in enumerate(lines):
            if time.monotonic() > deadline:  # the chunk's whole budget is spent: the rest is skipped
                self.skipped[name] = self.skipped.get(name, 0) + len(lines) - index
                break
            start, line_start = line_start, line_start + len(line) + 1
            try:
                # the end of a line is where a progress bar's latest state is
                tail = max(0, len(line) - MAX_MATCHED_LINE)
                found += [
                    (start + tail + match.start(1), match.group(1))
                    for match in pattern.finditer(line, tail, concurrent=True, timeout=LINE_SCAN_TIMEOUT)
                ]
                if len(line) <= MAX_MATCHED_LINE:
                    continue
            except TimeoutError:
                pass
            self.skipped[name] = self.skipped.get(name, 0) + 1  # read in part, or not at all
        return found


def _byte_positions(text: str, found: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Matches in decoded text, placed at their bytes (found in order: each piece encoded once)."""
    placed, characters, byte_count = [], 0, 0
    for position, value in found:
        if position >= characters:
            byte_count += len(text[characters:position].encode("utf-8", errors="replace"))
            characters = position
        placed.append((byte_count, value))
    return placed


def _compile(source: str):
    """A user's metric pattern, compiled by `regex`: re's syntax and matches, plus a timeout and a
    matcher that releases the GIL."""
    import regex  # only for a user's pattern: loading the extension stays light

    return regex.compile(source, regex.VERSION0)


def literal_first(source: str) -> str:
    """`\\bword…` rewritten as `word(?<=\\bword)…`: the same matches, but a regex that starts with a
    literal lets the engine jump from one occurrence to the next instead of trying every position
    (three times faster on a log where every line has a loss, fifteen where none has)."""
    leading = LEADING_WORD.match(source)
    if leading is None or _flags(source) & re.VERBOSE:  # verbose: a quantifier may follow after spaces
        return source
    word, rest = leading.group(1), source[leading.end() :]
    if rest[:1] in ("?", "*", "+", "{"):  # the quantifier is the last letter's, not the word's
        word, rest = word[:-1], word[-1] + rest
    return f"{word}(?<=\\b{word}){rest}" if word else source


def _flags(source: str) -> int:
    try:
        return re.compile(source).flags
    except re.error:
        return 0


def _as_bytes_pattern(pattern):
    if not pattern.pattern.isascii():
        return None
    source = pattern.pattern.encode("ascii")
    if isinstance(pattern, re.Pattern):
        try:
            return re.compile(source, pattern.flags & ~re.UNICODE)
        except (re.error, ValueError):  # an inline (?u), say
            return None
    import regex

    try:
        return regex.compile(source, (pattern.flags & ~regex.UNICODE) | regex.VERSION0)
    except (regex.error, ValueError):
        return None
