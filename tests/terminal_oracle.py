"""What a terminal shows of some output, according to pyte (a maintained terminal emulator): the
oracle the log views are checked against."""

from __future__ import annotations

import pytest
from conftest import IN_CI

COLUMNS = 4000  # wider than any line written here: nothing wraps


def terminal_view(data: bytes, rows: int = 24) -> list[str]:
    """The lines a terminal of `rows` rows shows after `data`: its scrollback, then its screen
    down to the last row with something on it, each row without its trailing blanks."""
    try:
        import pyte
    except ImportError:
        if IN_CI:
            pytest.fail("pyte is not installed (the test extra has it)")
        pytest.skip("pyte is not installed")
    screen = pyte.HistoryScreen(COLUMNS, rows, history=1_000_000, ratio=0.001)
    stream = pyte.Stream(screen)
    stream.feed(data.decode("utf-8", errors="replace").replace("\n", "\r\n"))  # a tty's onlcr
    width = range(COLUMNS)
    lines = ["".join(line[column].data for column in width).rstrip() for line in screen.history.top]
    lines += [row.rstrip() for row in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return lines
