"""The values and markers a buffer of log lines holds, each with where it is: `name: value`
fields, pipe fields, steps, epochs, progress bars, tables and column tables, and the user's
`--metric` patterns' matches. The reader orders them and gives each value its x (reader.py).

`named_before` says what the words before a separator name (the reader remembers them),
`overridden` the names the user's patterns take over, `columns` the header of the column table
being read."""

from __future__ import annotations

from typing import Callable

from . import names
from .columns import column_tokens
from .line_parts import (
    _ASSIGNMENT,
    _BARE_VALUE,
    _BARS,
    _DIGITS_BEFORE,
    _EPOCH_BAR,
    _HEADINGS,
    _MM_EPOCH,
    _MM_ITER,
    _PIPE_FIELD,
    _ROUND,
    _TABLE_EDGE,
    _TABLE_ROW,
    _TIMM_EPOCH,
    _VALUE_AFTER,
    _YAML_SETTING,
    _among_word_settings,
    _field_name,
    _follows,
    _inside_call,
    _is_setting,
)


def find_tokens(
    low: bytes,
    data: bytes,
    named_before: Callable[[bytes, int], tuple[str | None, str | None]],
    overridden: frozenset,
    columns: tuple | None,
    patterns: list,
) -> list[tuple]:
    """(position, kind, ...) of every value and marker in the bytes, unordered across kinds."""
    tokens: list[tuple] = []
    append = tokens.append
    reversed_low = low[::-1]
    length = len(low)
    taken: set[int] = set()  # where the values of pipe fields start: read there, not again
    if b"|" in low:
        for match in _PIPE_FIELD.finditer(low):
            kind, name = _field_name(match.group(1))
            if kind == names.VALUE and name not in overridden:
                taken.add(match.start(2))
                append((match.start(2) - 1, names.VALUE, name, float(match.group(2))))
    has_call = b"(" in low  # once: a look for each value would read the buffer again each time
    word_settings: dict[int, bool] = {}  # per line: whether it is a printed list of settings
    for match in _VALUE_AFTER.finditer(low):
        if match.start(1) in taken:
            continue
        position = match.start()
        if low[position - 1 : position + 2] == b" = " and _is_setting(_ASSIGNMENT, low, position):
            continue
        if data[position - 1 : position].isupper() and _is_setting(_YAML_SETTING, data, position):
            continue
        if low[position : position + 1] == b"=" and (
            (has_call and _inside_call(low, position)) or _among_word_settings(low, position, word_settings)
        ):
            continue
        kind, name = named_before(reversed_low, length - position)
        if kind is None:
            continue
        text, denominator = match.groups()
        try:
            value = float(text)
        except ValueError:
            continue
        if kind == names.VALUE:
            if name in overridden:
                continue
            if denominator:  # "Accuracy: 9838/10000" is a fraction
                value = value / float(denominator) if float(denominator) else float("nan")
            append((position, names.VALUE, name, value))
        else:
            append((position, kind, value, b"." in text))
    for match in _BARE_VALUE.finditer(low):
        if match.start(1) in taken:
            continue
        kind, name = named_before(reversed_low, length - match.start())
        if kind == names.VALUE and name not in overridden:
            try:
                append((match.start(1) - 1, names.VALUE, name, float(match.group(1))))
            except ValueError:
                continue
    if b"(train)" in low or b"(val)" in low or b"(test)" in low:
        for match in _MM_EPOCH.finditer(low):
            append((match.start(), names.EPOCH_HEADING, float(match.group(1)), True))
            if float(match.group(3)) > 0:
                append((match.start(2), names.BAR, float(match.group(2)), float(match.group(3))))
        for match in _MM_ITER.finditer(low):
            append((match.start(), names.STEP_HEADING, float(match.group(1)), None))
    if b"|" in low and (low[:1] == b"|" or b"\n|" in low):
        for match in _TABLE_ROW.finditer(low):
            number = match.group(2)
            append(
                (
                    match.start(),
                    names.TABLE_ROW,
                    match.group(1).decode("ascii"),
                    None if number is None else float(number),
                )
            )
    if columns is not None or b"  " in low:
        tokens += column_tokens(
            low, columns, names.metric_name, (names.VALUE, names.STEP, names.EPOCH_HEADING, names.COLUMNS)
        )
    if b"--------" in low:
        for match in _TABLE_EDGE.finditer(low):
            append((match.start(), names.TABLE_EDGE, None, None))
    if b"train: " in low:
        for match in _TIMM_EPOCH.finditer(low):
            append((match.start(), names.EPOCH_HEADING, float(match.group(1)), None))
    if b"[" in low:
        for match in _ROUND.finditer(low):
            start = match.start()
            if start == 0 or low[start - 1 : start] in (b"\n", b"\r"):
                append((start, names.STEP_HEADING, float(match.group(1)), None))
    for kind, heading in _HEADINGS:
        for match in heading.finditer(low):
            total = match.group(2)
            # a total, or (for an epoch) a pipe after it: the epoch counts from 1
            extra = float(total) if total else (True if kind == names.EPOCH_HEADING and match.group(3) else None)
            append((match.start(), kind, float(match.group(1)), extra))
    epoch_bars = set()  # where the n of an epochs loop's bar is: an epoch, not a bar of steps
    if b"epoch" in low and b"%|" in low:
        for match in _EPOCH_BAR.finditer(low):
            epoch_bars.add(match.start(1))
            append((match.start(), names.EPOCH_HEADING, float(match.group(1)), None))
    for bar, openings, zero_based in _BARS:
        for match in bar.finditer(low):
            start = match.start()
            digits = _DIGITS_BEFORE.match(reversed_low, length - start)
            if digits is None:
                continue
            first = start - len(digits.group())  # where n starts
            if first in epoch_bars:
                continue
            if openings and not _follows(low, first, openings):
                before = first
                while before > 0 and low[before - 1] in b" \t":  # "[   5/100": n padded
                    before -= 1
                if not _follows(low, before, openings):
                    continue
            if low[first - 6 : first] == b"epoch ":  # "Epoch 11/11 ━━━ 4/4": the heading, not the bar
                continue
            total = float(match.group(1))
            if total > 0:
                append((start, names.RICH_BAR if zero_based else names.BAR, float(digits.group()[::-1]), total))
    for name, finditer in patterns:
        for position, text in finditer(data):
            try:
                append((position, names.VALUE, name, float(text)))
            except (TypeError, ValueError):
                pass
    return tokens
