"""Column tables: a header of names, then rows of numbers under them.

scikit-learn's verbose gradient boosting prints `Iter  Train Loss  Remaining Time` and then a row
per iteration; ultralytics' YOLO prints `Epoch  GPU_mem  box_loss  cls_loss ...` and then its
progress bar, whose description is the row (`1/3  0G  1.234  2.345 ...  640: 50%|...| 4/8`). A
header is a line of three or more cells, each one or two words, set apart by two blanks or more;
the rows under it take a cell for each of its columns, in order. A column is read when its name
is a metric's (`Train Loss` is train_loss), an iteration or step counter (the step), or an epoch
(`1/3`: the first of three, as "Epoch 1/3" says). The first line under a header that is not a row
ends the table.

`column_tokens` gives the reader's tokens for them; the reader keeps the header between reads.
"""

from __future__ import annotations

import re

_CELL_WORD = rb"[a-z][a-z0-9_()/.@-]{0,63}"
# a line (or a bar's redraw) of cells, or a bar's description that is one (YOLO's validation bar:
# "  Class  Images  Instances  Box(P  R  mAP50  mAP50-95): 100%|...")
_HEADER = re.compile(
    rb"(?<![^\r\n])[ \t]*("
    + _CELL_WORD
    + rb"(?: "
    + _CELL_WORD
    + rb")?(?:[ \t]{2,}"
    + _CELL_WORD
    + rb"(?: "
    + _CELL_WORD
    + rb")?){2,})"
    rb"[ \t]*(?:(?=[\r\n])|\Z|:[ \t]*\d{1,3}%(?:\||[ \t]+\xe2\x94[\x80\x81]))"  # tqdm's bar, or ultralytics' own
)
# YOLO's validation columns: the box's precision and recall, its mAP at IoU 0.5 and 0.5-0.95
_CELL_NAMES = {
    "box(p": "precision",
    "p": "precision",
    "r": "recall",
    "map50": "map50",
    "map50-95)": "map50-95",
    "map50-95": "map50-95",
}
_CELLS = re.compile(rb"\S+")
_COLUMN_GAP = re.compile(rb"[ \t]{2,}")
_EPOCH_CELL = re.compile(rb"(\d+)/(\d+)$")
_LINE_END = re.compile(rb"[\r\n]")
MAX_COLUMNS = 32
STEP_COLUMNS = ("iter", "iteration", "step", "global_step")


def header_columns(words: bytes, metric_name) -> list | None:
    """The columns a header line names, or None when it is no table's: [(kind, name), ...] with
    kind "value", "step", "epoch" or None (a column not read)."""
    cells = _COLUMN_GAP.split(words.strip())
    if len(cells) > MAX_COLUMNS:
        return None
    columns = []
    for cell in cells:
        text = cell.decode("ascii")
        if text in STEP_COLUMNS:
            columns.append(("step", None))
        elif text == "epoch":
            columns.append(("epoch", None))
        else:
            name = _CELL_NAMES.get(text) or metric_name(text, generic=True)
            columns.append(("value", name) if name else (None, None))
    return tuple(columns) if any(kind == "value" for kind, _ in columns) else None


def column_tokens(low: bytes, columns: list | None, metric_name, kinds) -> list[tuple]:
    """Tokens of the tables in `low`, the header of one already begun being `columns`: the header
    (COLUMNS, its columns), each row's cells (VALUE, STEP, EPOCH_HEADING) and a table's end
    (COLUMNS, None) at the first line under it that is no row."""
    value_kind, step_kind, epoch_kind, columns_kind = kinds
    tokens: list[tuple] = []
    at, length = 0, len(low)
    while at < length:
        if columns is None:  # find the next header: the regex engine skips what is not one
            header = _HEADER.search(low, at)
            if header is None:
                break
            at = _past_segment(low, header.end(), length)
            columns = header_columns(header.group(1), metric_name)
            if columns is not None:
                tokens.append((header.start(), columns_kind, columns, None))
            continue
        found = _LINE_END.search(low, at)
        end = found.start() if found else length
        if at == end:  # nothing between two line ends (a bar's last redraw, then its \n)
            at = end + 1
            continue
        row = _row(low, at, end, columns, value_kind, step_kind, epoch_kind)
        if row is None:
            header = _HEADER.match(low, at)
            if header is not None and header.end() <= end + 1:
                columns = header_columns(header.group(1), metric_name)
                tokens.append((at, columns_kind, columns, None))
                at = end + 1
                continue
            tokens.append((at, columns_kind, None, None))  # the table ends here
            columns = None
            continue  # this line may start the next header
        tokens += row
        at = end + 1
    return tokens


def _past_segment(low: bytes, at: int, length: int) -> int:
    """Where the line or redraw `at` is on ends, past its end."""
    found = _LINE_END.search(low, at)
    return found.end() if found else length


def _row(low: bytes, start: int, end: int, columns: list, value_kind, step_kind, epoch_kind) -> list[tuple] | None:
    """The tokens of the line [start, end) as a row under `columns`, or None if it is none."""
    cells = _CELLS.finditer(low, start, end)
    tokens = []
    for kind, name in columns:
        cell = next(cells, None)
        if cell is None:
            return None
        text = cell.group()
        if kind is None:
            continue
        if kind == "epoch":
            epoch = _EPOCH_CELL.match(text)
            if epoch is None:
                return None
            tokens.append((cell.start(), epoch_kind, float(epoch.group(1)), float(epoch.group(2))))
            continue
        try:
            value = float(text)
        except ValueError:
            return None
        if kind == "step":
            tokens.append((cell.start(), step_kind, value, False))
        else:
            tokens.append((cell.start(), value_kind, name, value))
    return tokens
