"""Reading a run of lines of one shape at once.

Training logs repeat a few lines: "step 120 loss: 0.3117 lr: 0.00100" differs from the line
before it only in its digits. Two lines that are the same once every digit is made a 0 (their
*shape*) are read alike by every pattern of the reader, which treats all digits alike: the same
tokens, at the same places, with the same names. So the reader reads the first line of each run
of such lines as any line, learns from it which number is the step and which are values (the
shape's *template*), and takes the other lines' numbers by slicing, a column at a time: no
pattern runs over them, and each metric's values go to the sink as one batch.

A run is read so only where the outcome cannot differ from reading its lines one by one: no
redraw (\\r) or escape in the bytes, no pattern of the user's, a line that sets one step (or one
epoch) or none and gives values of distinct names, none of them named with a digit, every name
already on the axis the template's marker gives, and each line at another x than the one before.
Where a run stops meeting these, the rest of it is read line by line.
"""

from __future__ import annotations

import math
import operator
import re
from itertools import groupby, islice

from .line_parts import line_split
from .names import EPOCH, NTH, STEP, STEP_HEADING, VALUE, twin_key

MIN_RUN = 4  # lines of one shape worth a template
MAX_LINE = 4096  # longer lines are read one by one (a printed setting is looked for within this)
MAX_TEMPLATES = 256  # shapes a reader remembers the template (or the refusal) of
MAX_SHAPES_SEEN = 4096  # shapes of short runs a reader remembers having seen
COLUMN_SAMPLE = 1024  # a column's first values, looked at for repeats (see _column)

_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NUMBER = re.compile(rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_MARKERS = (STEP, STEP_HEADING, EPOCH)


class Template:
    """What a shape's line says: where its marker's number is (if it has one) and where each value is."""

    def __init__(self, marker, values):
        self.marker = marker  # (kind, (start, end), extra) or None
        self.values = values  # [(name, (start, end), where the value's token is), ...]


def read_in_runs(reader, data: bytes) -> None:
    """Read `data` (whole lines, each ended by \\n, no \\r and no escape in them) as `reader._read`
    would, runs of same-shaped lines in bulk."""
    lines = data.translate(_DIGITS_AS_ZERO).split(b"\n")
    lines.pop()  # what follows the last \n: nothing
    position = slow_from = 0
    for shape, same in groupby(lines):
        count = len(list(same))
        length = len(shape) + 1
        end = position + count * length
        if length <= MAX_LINE and (count >= MIN_RUN or _seen_before(reader, shape)):
            template = _template_of(reader, shape, data, position, length)
            if template is not None:
                reader._read_slice(data, slow_from, position)
                done = _read_run(reader, template, data, position, end, length)
                if not done:  # the reader is not ready for it (a name not seen yet): its first line as any
                    reader._read_slice(data, position, position + length)
                    done = 1 + _read_run(reader, template, data, position + length, end, length)
                slow_from = position + done * length
        position = end
    reader._read_slice(data, slow_from, len(data))


def _seen_before(reader, shape: bytes) -> bool:
    """Whether a shape of a few lines was seen before (a line that comes back, one at a time, is
    worth a template too)."""
    seen = reader._shapes_seen
    if shape in seen or (shape, reader.columns) in reader._templates:
        return True
    if len(seen) >= MAX_SHAPES_SEEN:
        seen.clear()
    seen.add(shape)
    return False


def _template_of(reader, shape: bytes, data: bytes, start: int, length: int) -> Template | None:
    templates = reader._templates
    key = (shape, reader.columns)  # a line under a column table's header is read by its columns
    if key in templates:
        return templates[key]
    if len(templates) >= MAX_TEMPLATES:
        templates.clear()
    line = data[start : start + length]
    template = templates[key] = _learn(reader, line)
    return template


def _learn(reader, line: bytes) -> Template | None:
    """The template of `line`'s shape, or None when lines of it must be read one by one."""
    low = line.lower()
    tokens = sorted(reader._tokens(low, line))
    spans = [match.span() for match in _NUMBER.finditer(low)]
    split = line_split(low, 0, len(low))
    marker, values, used = None, [], set()
    for position, kind, first, second in tokens:
        if kind != VALUE and (
            kind not in _MARKERS or marker is not None or (kind == STEP_HEADING and second is not None)
        ):
            return None  # a bar, a heading with a total, two markers: read line by line
        span = next((span for span in spans if span[0] >= position), None)
        if span is None or span in used:
            return None
        number = float(low[span[0] : span[1]])
        if kind == VALUE:
            name = first
            if split and twin_key(name) == name:
                name = f"{split}_{name}"
            # a fraction ("9838/10000") or a transformed value; a name with a digit in it
            if number != second or low[span[1] : span[1] + 1] == b"/" or any(char.isdigit() for char in name):
                return None
            if any(name == known for known, _, _ in values):
                return None
            values.append((name, span, position))
        else:
            if number != first:
                return None
            marker = (kind, span, second)
        used.add(span)
    if not values:
        return None
    return Template(marker, values)


def _read_run(reader, template: Template, data: bytes, start: int, end: int, length: int) -> int:
    """Read the lines of [start, end) by `template`, as far as reading them one by one would give the
    same; how many lines were read."""
    count = (end - start) // length
    if count == 0:
        return 0
    marker = template.marker
    if marker is None:
        if reader.step is not None or reader.epoch is not None or reader.bar is not None:
            return 0  # values numbered one by one move to the step or epoch the log now gives
        axis, current = NTH, None
    else:
        kind, span, _ = marker
        axis = EPOCH if kind == EPOCH else STEP
        current = reader.step if axis == STEP else reader.epoch
    held = reader.held
    for name, _, _ in template.values:
        group = held.get(name)
        # each name's last values held at the x the reader is at: a line at another x gives them out
        if (
            reader.axes.get(name) != axis
            or group is None
            or group[0] != axis
            or (current is not None and group[1] != current)
        ):
            return 0
    if marker is not None:
        xs = _column(data, start, end, length, span)
        count = _distinct_prefix(xs, current)
        if count == 0:
            return 0
        del xs[count:]
        end = start + count * length
    columns = []
    for name, span, at in template.values:
        if marker is None:
            done = reader.counts.get(name, 0)
            xs = [float(number) for number in range(done + 1, done + count + 1)]
        # where each value was printed, as reading the lines one by one says it
        offsets = range(reader.position + start + at, reader.position + end, length)
        columns.append((name, xs, _column(data, start, end, length, span), offsets))
    _hand_out(reader, axis, columns)
    reader._line_start = reader.position + end - length
    reader.segment = (reader._line_start, 0)
    if marker is not None:
        reader._mark(kind, xs[-1], marker[2])
    reader.redraw = reader.restarted = reader.evaluating = False
    return count


def _column(data: bytes, start: int, end: int, length: int, span: tuple[int, int]) -> list[float]:
    """The numbers at `span` of each line: their bytes gathered a byte column at a time (a strided
    slice each), then converted, each distinct text once where texts repeat (a loss printed with
    four digits, a learning rate)."""
    begin, finish = span
    width = finish - begin
    count = (end - start) // length
    gathered = bytearray(b" ") * (count * (width + 1))
    for index in range(width):
        gathered[index :: width + 1] = data[start + begin + index : end : length]
    texts = bytes(gathered).split()
    sample = texts[:COLUMN_SAMPLE]
    if 2 * len(set(sample)) <= len(sample):
        return list(map(_Floats().__getitem__, texts))
    return list(map(float, texts))


class _Floats(dict):
    """Each text's float, converted once."""

    def __missing__(self, text: bytes) -> float:
        value = self[text] = float(text)
        return value


def _distinct_prefix(xs: list[float], current: float | None) -> int:
    """How many of `xs` can be read in bulk: each finite and other than the one before it."""
    if xs[0] != current and all(map(math.isfinite, xs)) and all(map(operator.ne, xs, islice(xs, 1, None))):
        return len(xs)  # (at C speed: the loop below finds where it stops)
    previous = current
    for index, x in enumerate(xs):
        if x == previous or not math.isfinite(x):
            return index
        previous = x
    return len(xs)


def _hand_out(reader, axis: str, columns: list) -> None:
    """Each metric's values in a run: the one held before it given out, each line's but the last
    one given out at its x, the last one held (a value after it at the same x may replace it).
    A sink that takes batches gets one per metric; one that takes points gets them in the order
    reading the lines one by one gives them."""
    held = reader.held
    for name, xs, _, _ in columns:
        reader._give_out(name, xs[0])
    if reader.bulk is not None:
        for name, xs, ys, offsets in columns:
            reader.give_batch(name, axis, xs[:-1], ys[:-1], offsets[:-1])
    else:
        sink = reader.sink
        for index in range(len(columns[0][1]) - 1):
            for name, xs, ys, offsets in columns:
                reader.given_at = offsets[index]
                sink((name, axis, xs[index], ys[index]))
    for name, xs, ys, offsets in columns:
        held[name] = [axis, xs[-1], [ys[-1]], False, [offsets[-1]], False]  # lines of their own: nothing carried over
        reader.counts[name] = reader.counts.get(name, 0) + len(ys)
        reader.pending[name] = (name, axis, xs[-1], ys[-1])
