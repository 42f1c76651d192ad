"""A log's output as a terminal would have shown it.

Progress bars draw on a terminal, not into a file: tqdm redraws a line with \\r, and a nested bar
(`position=1`, Hugging Face's evaluation bar, Lightning's validation bar) steps down to its own line
with \\n and back up with ESC[A, then erases itself (ESC[K, or spaces) when it is done. A log keeps
every one of those strokes. `Screen` replays them on a small screen, as a terminal of unbounded width
and `SCREEN_ROWS` rows would: carriage return, backspace, cursor up, down and to a column, erase in
the line and below. Lines that scroll off its top are kept as printed (a terminal's scrollback).
Other escapes (colours, window titles) are dropped, and so are Unicode's direction controls, which
would reorder the text around them (see wording.py). A character is one column wide (wide East Asian
characters would take two on a terminal), and a tab is kept as a character.

It is only ever given the bytes of what is shown (a log's tail, new lines of a followed log), and a
line longer than MAX_LINE is first cut to its last redraws, so a log of one endless progress bar
costs no more than a short one.
"""

from __future__ import annotations

import re

from ..core.wording import DIRECTION_CONTROLS

SCREEN_ROWS = 24  # as many rows as a terminal: how far up a redraw can reach
MAX_LINE = 64 * 1024  # characters (or bytes) of one log line replayed: a longer one by its last redraws
MAX_SHOWN_LINE = 16 * 1024  # a longer row is shown by its end
MAX_ROW = 2 * MAX_SHOWN_LINE  # a row grows no longer than this while it is drawn (its start is let go)

# What moves the cursor or erases, and what is dropped: CSI sequences (parameters, final byte), other
# escape sequences (string sequences up to their terminator), C0/C1 controls but tab and \n (a run of
# NULs at once: a sparse file's hole read, megabytes of them, draws nothing), and the direction
# controls that would reorder the text around them (wording.py).
_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)([0-?]*)[ -/]*([@-~])"
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b([ -/]*[0-~])?"
    r"|\x00+|[\x01-\x08\x0b-\x1f\x7f-\x9f" + DIRECTION_CONTROLS + r"]"
)
# anything but text, tab and \r
_SPECIAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + DIRECTION_CONTROLS + r"]")


def bounded_line(line):
    """A log line (str or bytes, without its newline) cut to about its last MAX_LINE characters, at a
    redraw (\\r) where there is one: what came before it was drawn over."""
    if len(line) <= MAX_LINE:
        return line
    redraw = line.find("\r" if isinstance(line, str) else b"\r", len(line) - MAX_LINE)
    return line[redraw:] if redraw >= 0 else line[-MAX_LINE:]


def shown(row: str) -> str:
    """A row as a view shows it: its trailing blanks are not seen, and a very long one by its end."""
    row = row.rstrip(" ")
    return "…" + row[-MAX_SHOWN_LINE:] if len(row) > MAX_SHOWN_LINE else row


class Screen:
    """A terminal's screen, fed text. `scrolled` holds the lines that scrolled off its top, oldest
    first, until taken; `rows()` the screen's own rows."""

    def __init__(self, height: int = SCREEN_ROWS, at_bottom: bool = False):
        """`at_bottom`: the cursor starts on the last row, as on a terminal that has been printing
        a while (output that starts mid-log can move up into the rows above, whose earlier output
        is not known); those rows are not shown while nothing is drawn on them."""
        self.height = height
        # from the screen's top; rows below the last are blank
        self._rows: list[str] = [""] * (height if at_bottom else 1)
        self.row = len(self._rows) - 1
        self.column = 0
        self.scrolled: list[str] = []
        # rows that ever scrolled off: a row's number in the whole output is this plus its index
        self.scrolled_count = 0
        self._unknown = self.row  # of the output's first rows, how many were there before it began

    def copy(self) -> Screen:
        other = Screen(self.height)
        other._rows, other.row, other.column = list(self._rows), self.row, self.column
        other.scrolled_count, other._unknown = self.scrolled_count, self._unknown
        return other

    def feed(self, text: str) -> None:
        lines = text.split("\n")
        self._line(bounded_line(lines[0]))
        for line in lines[1:]:
            self._line_feed()
            self.column = 0  # a terminal turns \n into \r\n
            if line:
                self._line(bounded_line(line))

    def take_scrolled(self) -> list[str]:
        # the rows not known that scrolled off are gone too, shown or not
        gone = len(self.scrolled)
        taken, self.scrolled = self._known([shown(line) for line in self.scrolled]), []
        self._unknown = max(0, self._unknown - gone)
        return taken

    def rows(self) -> list[str]:
        """The screen's rows as shown, down to the last one with something on it."""
        rows = [shown(row) for row in self._rows]
        while rows and not rows[-1]:
            rows.pop()
        return rows

    def lines(self) -> list[str]:
        """What scrolled off and was not taken (it is left there), then the rows; down to the last
        line with something on it."""
        lines = self._known([shown(line) for line in self.scrolled] + self.rows())
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def _known(self, lines: list[str]) -> list[str]:
        """`lines` from the output's first, less the rows that were there before it, still blank."""
        start = 0
        while start < min(self._unknown, len(lines)) and not lines[start]:
            start += 1
        if start < self._unknown and start < len(lines):
            self._unknown = 0  # something was drawn on them: they are shown from there on
        return lines[start:]

    # -- drawing -------------------------------------------------------------

    def _line(self, text: str) -> None:
        """Text with no \\n in it."""
        if _SPECIAL.search(text) is None:  # the usual line, or a bar redrawn with \r alone
            parts = text.split("\r")
            if parts[0]:
                self._put(parts[0])
            if len(parts) > 1:
                self._redraw(parts[1:])
            return
        position = 0
        for control in _CONTROL.finditer(text):
            if control.start() > position:
                self._put(text[position : control.start()])
            position = control.end()
            self._control(control)
        if position < len(text):
            self._put(text[position:])

    def _control(self, control: re.Match) -> None:
        sequence = control.group(0)
        if sequence == "\r":
            self.column = 0
        elif sequence == "\b":
            self.column = max(0, self.column - 1)
        elif control.group(2) is not None:
            self._csi(control.group(1), control.group(2))
        elif sequence in ("\x1bM", "\x8d"):  # reverse index: up a row
            self.row = max(0, self.row - 1)
        elif sequence in ("\x1bD", "\x84"):  # index: down a row
            self._line_feed()
        elif sequence in ("\x1bE", "\x85"):  # next line
            self._line_feed()
            self.column = 0
        # anything else (colours, titles, a bell) draws nothing

    def _csi(self, parameters: str, final: str) -> None:
        if final not in "ABCDEFGHJKdf" or (parameters[:1] in ("?", ">", "<", "=")):
            return
        numbers = [int(number) if number.isdigit() else 0 for number in parameters.split(";")]
        count = max(1, numbers[0])
        if final in "AF":
            self.row = max(0, self.row - count)
        elif final in "BE":
            self.row = min(self.height - 1, self.row + count)
        elif final == "C":
            self.column += count
        elif final == "D":
            self.column = max(0, self.column - count)
        elif final == "G":
            self.column = count - 1
        elif final == "d":
            self.row = min(self.height - 1, count - 1)
        elif final in "Hf":
            self.row = min(self.height - 1, count - 1)
            self.column = max(1, numbers[1] if len(numbers) > 1 else 1) - 1
        if final in "EF":
            self.column = 0
        self._reach(self.row)
        if final == "K":
            self._erase_in_line(numbers[0])
        elif final == "J":
            self._erase_in_display(numbers[0])

    def _reach(self, row: int) -> None:
        while len(self._rows) <= row:
            self._rows.append("")

    def _line_feed(self) -> None:
        if self.row < self.height - 1:
            self.row += 1
            self._reach(self.row)
            return
        self.scrolled.append(self._rows.pop(0))
        self.scrolled_count += 1
        self._rows.append("")

    def _put(self, text: str) -> None:
        row = self._rows[self.row]
        column = self.column
        if column > len(row):
            row += " " * (column - len(row))
        row = row[:column] + text + row[column + len(text) :]
        self.column = column + len(text)
        if len(row) > MAX_ROW:  # one endless line: its start is let go
            cut = len(row) - MAX_ROW
            row, self.column = row[cut:], max(0, self.column - cut)
        self._rows[self.row] = row

    def _redraw(self, parts: list[str]) -> None:
        """Each part written from the row's start: the row is the last part, with what longer
        earlier ones (and the row before them) leave beyond it."""
        last = parts[-1]
        self.column = len(last)
        earlier = [part for part in parts[:-1] if len(part) > len(last)] if max(map(len, parts)) > len(last) else []
        result = last
        for part in reversed([self._rows[self.row], *earlier]):
            if len(part) > len(result):
                result += part[len(result) :]
        self._rows[self.row] = result

    def _erase_in_line(self, how: int) -> None:
        row = self._rows[self.row]
        if how == 0:
            self._rows[self.row] = row[: self.column]
        elif how == 1:
            self._rows[self.row] = " " * (self.column + 1) + row[self.column + 1 :]
        elif how == 2:
            self._rows[self.row] = ""

    def _erase_in_display(self, how: int) -> None:
        if how == 0:
            self._erase_in_line(0)
            del self._rows[self.row + 1 :]
        elif how == 1:
            self._erase_in_line(1)
            for index in range(self.row):
                self._rows[index] = ""
        elif how in (2, 3):  # the whole screen; the scrollback stays (the log's lines as printed)
            self._rows = [""] * len(self._rows)


def terminal_lines(text: str, height: int = SCREEN_ROWS) -> list[str]:
    """`text` as a terminal shows it, scrollback and screen, from a blank screen."""
    screen = Screen(height)
    screen.feed(text)
    return screen.lines()


class SettledLines:
    """What `logs -f` prints of a followed log, given its text as it grows: each line once it is
    settled, in its latest state. A line is printed when the cursor has moved below it, and again
    (once per feed, at most) if it was redrawn since: a progress bar that redraws a hundred times
    between two reads prints once, a nested bar's line (the cursor goes back up from it) not until
    it scrolls away or the log ends, and a line erased after it was printed is not printed blank.
    """

    def __init__(self, screen: Screen | None = None):
        self.screen = screen or Screen()
        self._printed: dict[int, str] = {}  # by row number in the whole output: what was printed of it
        if screen is not None:
            self.seen()

    def seen(self) -> None:
        """Count everything drawn so far as printed (the tail shown before following)."""
        screen = self.screen
        screen.take_scrolled()
        self._printed = {screen.scrolled_count + index: row for index, row in enumerate(screen.rows())}

    def feed(self, text: str) -> list[str]:
        screen = self.screen
        first = screen.scrolled_count - len(screen.scrolled)  # the number of the first line not taken yet
        screen.feed(text)
        scrolled = screen.take_scrolled()
        printed = [line for number, line in enumerate(scrolled, first) if self._news(number, line)]
        for number in range(first, first + len(scrolled)):  # gone from the screen: never redrawn again
            self._printed.pop(number, None)
        rows = screen.rows()
        for index, row in enumerate(rows[: screen.row]):  # the rows the cursor has gone below
            if self._news(screen.scrolled_count + index, row):
                printed.append(row)
        return printed

    def end(self, text: str = "") -> list[str]:
        """What is left to print once the log has ended (`text`: its unended last line)."""
        printed = self.feed(text)
        screen = self.screen
        for index, row in enumerate(screen.rows()):
            if self._news(screen.scrolled_count + index, row):
                printed.append(row)
        return printed

    def _news(self, number: int, line: str) -> bool:
        before = self._printed.get(number)
        if line == before or (before is not None and not line):  # unchanged, or erased once printed
            return False
        self._printed[number] = line
        return True
