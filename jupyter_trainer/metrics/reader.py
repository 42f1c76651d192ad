"""Metrics read from training output with no configuration, each at its step or epoch.

A `MetricReader` is fed a log's bytes in order (whole lines, or a progress bar's
completed redraws) and finds what common training output prints: `name: value`,
`name=value`, `'name': value` and `'name': 'value'`, case-insensitively, for
loss- and score-like names (`loss`, `val_loss`, `Test loss`, `accuracy`, `lr`,
...). Each name is its own series (`test loss` is `test_loss`, not `loss`).

A value's x is where the training was when it was printed: the step (`step 5`,
`'step': 5`), else the epoch (`Epoch 3/10`, `'epoch': 0.5`, and inside an epoch
the progress bar's `n/total` as a fraction of it), else a bare progress bar's
`n`, else the time since the job started (from the log's clock: the supervisor
notes the log's size now and then), else the value's number in its series.
Markers count for the whole line or redraw they are on (Hugging Face prints the
epoch after the loss), and carry on to later lines (Keras prints `Epoch 3/10`
above its bars).

Scanning starts at the separators (`:` and `=`), which the regex engine finds
fast, and reads the name before each one backwards; a name is looked up, never
matched by a pattern of many alternatives (which costs a regex attempt at every
byte of the log).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from . import names
from .clock import LogClock
from .columns import MAX_COLUMNS
from .line_parts import (
    _NAME_BEFORE,
    _SPLIT_WORDS,
    TABLE_STEPS,
    _name_of,
    _segment,
    _shifted,
    _split_of_a_metric,
    _unshifted,
    _without_unseen,
    line_split,
)
from .line_runs import read_in_runs
from .tokens import find_tokens

# An endless line with no redraw in it is read in windows of WINDOW bytes, each with the
# WINDOW_CONTEXT bytes before it (a name before its value may start there) and the WINDOW_AHEAD
# after it (a value that starts in it ends there).
WINDOW = 64 << 10
BULK_BYTES = 8192  # complete lines worth looking for runs of one shape in
WINDOW_CONTEXT = 512
WINDOW_AHEAD = 512
MAX_NAMES_SEEN = 4096  # words before a separator a reader remembers the meaning of (a log may print endless ones)
MAX_HELD = 1024  # values held at one x (a bar that never moves on is given out in groups of these)


class MetricReader:
    """Reads metric values from a log, fed in order; `sink(point)` gets each value once its x is
    settled (a progress bar redrawn at the same step replaces its value rather than adding one).

    `patterns` are the user's `--metric NAME=REGEX` definitions as `(name, finditer)` pairs, where
    `finditer(data)` gives `(position, value)` of each match in the bytes; a user's name overrides
    the series of the same name found on its own."""

    def __init__(
        self,
        sink: Callable[[names.Point], None],
        patterns: Iterable[tuple[str, Callable]] = (),
        clock: "LogClock | None" = None,
        bulk: Callable | None = None,
    ):
        self.sink = sink
        # takes a metric's settled values in one call, (name, axis, xs, values, where each was
        # printed), when the reader has many at once; without it the sink takes them one by one
        self.bulk = bulk
        self.clock = clock  # when the log had how many bytes: the time of a value with no step or epoch
        self.patterns = list(patterns)
        self.overridden = frozenset(name for name, _ in self.patterns)
        self.epoch_base: float | None = None  # the epoch a progress bar's fraction is added to
        self.epoch: float | None = None
        self.step: float | None = None
        self.bar: float | None = None  # a progress bar's n, when no epoch is known
        self.axes: dict[str, str] = {}
        self.counts: dict[str, int] = {}  # values read per name
        self.pending: dict[str, names.Point] = {}  # each name's latest value (shown as its newest, not yet given out)
        self.segment: tuple[int, int] = (0, -1)  # the line or redraw being read
        self.heading: tuple[tuple[int, int], float] | None = None  # where the last "Epoch E/T" was, and E
        self.restarted = False  # the line being read shows a bar just reset (its values are stale)
        self.redraw = False  # the line being read redraws the one before it (it followed a \r)
        self.done = 0.0  # the last bar's n
        self.epoch_total: float | None = None  # the total of the epoch's own bar, once it has one
        self.evaluating = False  # the line being read shows another loop's bar (evaluate's)
        self._last_byte = b""  # the byte before the buffer's: \r when its first line is a redraw
        # per name: [axis, x, the values drawn at x, whether the first was carried over, where each was]
        self.held: dict[str, list] = {}
        self._buffer = bytearray()  # the log's bytes not read yet (with `_context` bytes read before them)
        self._context = 0
        self._continued = b""  # the byte before an endless line read in windows
        self._shifts: list[tuple[int, int]] | None = None  # where escapes were cut out of what is being read
        self.position = 0  # where the buffer starts in the log
        self.given_at = 0  # where in the log the value being given to the sink was printed
        self._line_start = 0  # where the line being read starts in the log
        self._names: dict[bytes, tuple[str | None, str | None]] = {}  # see _named_before
        self._templates: dict = {}  # the lines of a shape, as read in bulk (see metric_runs)
        self._shapes_seen: set = set()
        self.table: list = ["", None, []]  # a table being read: its section, its step, its values so far
        self.columns: tuple | None = None  # the header of the column table being read (see metric_columns)

    # -- reading -------------------------------------------------------------

    def feed(self, data: bytes, offset: int | None = None) -> None:
        """Read the log's next bytes, cut anywhere (inside a redraw, a line or a character): what
        is read of them does not depend on where. `offset`: where they start in the log, when known
        (a value's time is then found from the log's clock); the reader counts on from there."""
        if offset is not None and not self._buffer:
            self.position = offset - self._context
        self._buffer += data
        buffer = self._buffer
        cut = max(buffer.rfind(b"\n"), buffer.rfind(b"\r")) + 1
        if cut > self._context:  # complete lines and redraws: read them, keep the rest
            self._read_lines(bytes(buffer[:cut]), self._context, cut)
            self._last_byte = buffer[cut - 1 : cut]
            self._advance(cut, 0)
        # one line endless and unredrawn: read in windows fixed from the line's start (never where
        # the reads happened to end), each seeing the bytes before it as the names' context
        while len(self._buffer) - self._context >= WINDOW + WINDOW_AHEAD:
            ahead = self._context + WINDOW
            self._read(bytes(self._buffer[: ahead + WINDOW_AHEAD]), self._context, ahead)
            self._advance(ahead - WINDOW_CONTEXT, WINDOW_CONTEXT)

    def flush(self) -> None:
        """The log has ended: read its unended last line, and give out every value still held."""
        if len(self._buffer) > self._context:
            self._read(bytes(self._buffer), self._context, len(self._buffer))
            self._advance(len(self._buffer), 0)
        for name in list(self.held):
            self._give_out(name, None)
        self.pending.clear()

    def skip_hole(self, offset: int) -> None:
        """The log's bytes up to `offset` are a hole (a sparse file's, never written: NULs) that was
        not read: the unended line before it is read as a run of NULs would end it (see _read)."""
        if len(self._buffer) > self._context:
            self._read(bytes(self._buffer), self._context, len(self._buffer))
        self.skip_to(offset)

    def skip_to(self, offset: int) -> None:
        """Read on from `offset` (the log was cut, and is read from its new start): what was held
        of an unended line is let go."""
        self._buffer, self._context, self.position = bytearray(), 0, offset
        self._last_byte = self._continued = b""

    @property
    def resume_at(self) -> int:
        """Where reading the log again goes on from with this reader (see `state`)."""
        return self.position

    def _advance(self, drop: int, context: int) -> None:
        """Let the buffer's first `drop` bytes go; the first `context` bytes left were read already."""
        if context and not self._context:  # the first window of an endless line: what came before it
            self._continued = self._last_byte
        del self._buffer[:drop]
        self.position += drop
        self._context = context

    def _read_lines(self, data: bytes, first: int, end: int) -> None:
        """Read complete lines: runs of one shape in bulk where that reads them alike (see
        metric_runs), the others one by one."""
        if first or self.patterns or end < BULK_BYTES or b"\r" in data or b"\x1b" in data or b"\0" in data:
            self._read(data, first, end)
        else:
            read_in_runs(self, data)

    def _read_slice(self, data: bytes, start: int, end: int) -> None:
        """Read the whole lines of data[start:end] as reading all of `data` would."""
        if end <= start:
            return
        position, last_byte = self.position, self._last_byte
        self.position += start
        if start:
            self._last_byte = data[start - 1 : start]
        try:
            self._read(data[start:end], 0, end - start)
        finally:
            self.position, self._last_byte = position, last_byte

    def give_batch(self, name: str, axis: str, xs: list, values: list, offsets) -> None:
        """Settled values of one metric, in order, each printed where `offsets` says."""
        if not xs:
            return
        if self.bulk is not None:
            self.given_at = offsets[-1]
            self.bulk(name, axis, xs, values, offsets)
            return
        sink = self.sink
        for x, value, at in zip(xs, values, offsets):
            self.given_at = at
            sink((name, axis, x, value))

    def _read(self, data: bytes, first: int, end: int) -> None:
        """Read the values of `data` that lie in [first, end): the bytes before `first` were read
        already (they are there for the names that start in them), those from `end` on will be."""
        shifts = None
        if b"\x1b" in data or b"\0" in data:  # as a terminal shows them (a run of NULs ends a line)
            data, shifts = _without_unseen(data)
            first, end = _shifted(first, shifts), _shifted(end, shifts)
        self._shifts = shifts
        low = data.lower()
        tokens = [token for token in self._tokens(low, data) if first <= token[0] < end]
        if not tokens:
            return
        tokens.sort()  # by position: tokens of one pass are in order, so this merges runs
        length = len(low)
        segment_end = -1
        split = ""
        overridden = self.overridden
        values: list[tuple[str, float, int]] = []
        line_start = window = 0
        for position, kind, first_value, second in tokens:
            if position >= segment_end:  # a new line or redraw: the last one's values take its x
                if values:
                    self._settle(values)
                    values = []
                self.restarted = self.evaluating = False
                start, segment_end = _segment(low, position, length, max(segment_end, 0))
                continued = start == 0 and self._context
                # where the line starts in the log (one read in windows started before `data`)
                line_start = self._line_start if continued else self.position + _unshifted(start, shifts)
                self._line_start = line_start
                window = 0
                before = low[start - 1 : start] if start else (self._continued if continued else self._last_byte)
                self.redraw = before == b"\r"
                split = line_split(low, start, segment_end)
            # a line longer than a WINDOW is read as lines of a WINDOW each, counted from its start:
            # however the log is read, its values take the same x
            at_window = (self.position + _unshifted(position, shifts) - line_start) // WINDOW
            if at_window != window:
                if values:
                    self._settle(values)
                    values = []
                window = at_window
            self.segment = (line_start, window)
            if kind == names.VALUE:
                if split and first_value not in overridden and names.twin_key(first_value) == first_value:
                    first_value = f"{split}_{first_value}"
                values.append((first_value, second, position))
            else:
                if kind == names.TABLE_ROW:
                    self._table_row(first_value, second, self.position + _unshifted(position, shifts))
                elif kind == names.TABLE_EDGE:
                    self._table_end()
                elif kind == names.COLUMNS:
                    self.columns = first_value
                else:
                    self._mark(kind, first_value, second)
        if values:
            self._settle(values)

    def _tokens(self, low: bytes, data: bytes) -> list[tuple]:
        """(position, kind, ...) of every value and marker in the bytes, unordered across kinds."""
        return find_tokens(low, data, self._named_before, self.overridden, self.columns, self.patterns)

    def _named_before(self, reversed_low: bytes, at: int) -> tuple[str | None, str | None]:
        """What the words ending where `at` is in the reversed bytes are (see _name_of), remembered
        by their bytes: logs repeat a few names millions of times."""
        found = _NAME_BEFORE.match(reversed_low, at)
        if found is None:
            return None, None
        words = found.group(1)
        named = self._names.get(words)
        if named is None:
            named = _name_of(words[::-1].decode("ascii"))
            if len(self._names) < MAX_NAMES_SEEN:
                self._names[words] = named
        if named[0] is None and words in _SPLIT_WORDS:
            return _split_of_a_metric(reversed_low, found.end(), words[::-1].decode("ascii"))
        return named

    def _mark(self, kind: str, value: float, extra) -> None:
        if not math.isfinite(value):  # "epoch: nan" says nothing of where training is
            return
        if kind == names.EPOCH:  # "'epoch': 0.5" is where training is; "Epoch: 3" also starts epoch 3's bars
            self.epoch = value
            self.epoch_base = None if extra else value
            self.bar = None
            self.epoch_total = None
        elif kind == names.STEP:
            self.step = value
        elif kind == names.EPOCH_HEADING:  # "Epoch 3/10" counts from 1 (epoch 3 ends at 3.0), "Epoch 3:" from 0
            self.epoch_base = value - 1 if extra else value
            self.heading = (self.segment, value) if extra else None
            self.epoch_total = None
            self.epoch = value
            self.bar = None
        elif kind == names.RICH_BAR:
            heading = self.heading
            if heading is not None and heading[0] == self.segment:  # "Epoch 1/1 ━━━ 4/4": 1 of 0..1
                self.epoch_base = heading[1]
            self._bar(value, extra)
        elif kind == names.STEP_HEADING:
            if extra:  # "Step [100/600]": how far through the epoch, as a bar would say
                self._bar(value, extra)
            else:
                self.step = value
        elif kind == names.BAR:
            self._bar(value, extra)

    def _bar(self, done: float, total: float) -> None:
        if done == 0 and self.redraw and self.done:  # a bar redrawn from 0: what it shows beside is the last run's
            self.restarted = True
        self.done = done
        if self.epoch_base is not None and self.epoch_total not in (None, total):
            # another loop's bar inside an epoch (Keras's evaluate after fit): it does not move the
            # epoch on, and what it shows is an evaluation's
            self.evaluating = True
            return
        if self.epoch_base is not None:
            self.epoch_total = total
            self.epoch = self.epoch_base + done / total
        else:
            self.bar = done

    def _table_row(self, key: str, value: float | None, where: int) -> None:
        if value is None:  # "| rollout/ |  |": the section of the rows below it
            self.table[0] = key if key.endswith("/") else ""
            return
        name = self.table[0] + key
        if key in TABLE_STEPS:
            self.table[1] = value
        elif len(self.table[2]) < MAX_HELD:
            self.table[2].append((name, value, where))

    def _table_end(self) -> None:
        """A table's values, at the step it gives (they are printed before it)."""
        _, step, values = self.table
        self.table = ["", None, []]
        if step is not None and math.isfinite(step):
            self.step = step
        if values:
            self._settle(values, printed_at=True)

    def _settle(self, values: list[tuple[str, float, int]], printed_at: bool = False) -> None:
        if self.restarted:
            return
        if self.evaluating:
            values = [
                (f"eval_{name}" if names.twin_key(name) == name else name, value, at) for name, value, at in values
            ]
        axes, counts, held = self.axes, self.counts, self.held
        step = self.step if self.step is not None else self.bar
        timed = self.clock is not None and self.clock.known
        preferred = (
            names.STEP if self.step is not None else names.EPOCH if self.epoch is not None
            else names.STEP if self.bar is not None else names.TIME if timed else names.NTH
        )  # fmt: skip
        for name, value, at in values:
            # where in the log it was printed
            where = at if printed_at else self.position + _unshifted(at, self._shifts)
            axis = axes.get(name)
            if axis is None or (axis in (names.NTH, names.TIME) and preferred not in (names.NTH, names.TIME)):
                # a name first seen with no step or epoch (a config printed before training) moves to
                # the step or epoch once the log gives one: its numbered values were not training's
                if axis is not None:
                    held.pop(name, None)
                    self.pending.pop(name, None)
                    counts[name] = 0
                axis = preferred
                axes[name] = axis
            if axis == names.STEP:
                x = step
            elif axis == names.EPOCH:
                x = self.epoch
            elif axis == names.TIME:
                x = self.clock.seconds_at(where) if timed else None
            else:
                x = float(counts.get(name, 0) + 1)
            if x is None:
                continue
            group = held.get(name)
            if group is None or group[1] != x or axis in (names.TIME, names.NTH) or len(group[2]) >= MAX_HELD:
                # a new x: the values held at the last one are given out. The first value a redraw
                # shows at a new x may be the last one's, drawn again as the bar moved on (tqdm
                # redraws the postfix it has until the loop sets the next): the next value there
                # replaces it. Lines of their own print what they mean: each is a value.
                carried = self.redraw and group is not None and group[2][-1] == value
                if group is not None:
                    self._give_out(name, x)
                held[name] = [axis, x, [value], carried, [where], False]
            elif self.redraw and group[2][-1] == value:
                continue  # the same drawn again (tqdm redraws for its description and its postfix)
            elif group[3]:
                group[2][-1], group[3], group[4][-1] = value, False, where
                self.pending[name] = (name, axis, x, value)
                continue
            else:
                # another value at the same x: a bar whose count lags behind the loop (tqdm draws
                # its n at most every mininterval, its postfix at every step) shows each step's
                # value at the n it last drew; each is kept
                group[2].append(value)
                group[4].append(where)
                group[5] = group[5] or self.redraw
            counts[name] = counts.get(name, 0) + 1
            self.pending[name] = (name, axis, x, value)

    def _give_out(self, name: str, next_x: float | None) -> None:
        """The values held at one x; those a bar drew as it lagged behind the loop are spread up to
        the next x (the steps it had not drawn yet), those of lines of their own stay at theirs."""
        axis, x, held, _, offsets, redrawn = self.held.pop(name)
        spacing = (next_x - x) / len(held) if redrawn and next_x is not None and next_x > x and len(held) > 1 else 0.0
        for index, value in enumerate(held):
            self.given_at = offsets[index]  # for a sink that asks when the value was printed
            self.sink((name, axis, x + index * spacing, value))

    def keep_only(self, kept) -> None:
        """Forget the metrics not in `kept` (a view that keeps only some): new dicts, not
        deletions, as a dict keeps the room it once grew to."""
        self.axes = {name: axis for name, axis in self.axes.items() if name in kept}
        self.counts = {name: count for name, count in self.counts.items() if name in kept}
        self.pending = {name: point for name, point in self.pending.items() if name in kept}
        self.held = {name: group for name, group in self.held.items() if name in kept}

    # -- a reader carried over to another view (the metrics cache) ---------------

    def state(self) -> dict:
        """What the reader knows, to read on from `resume_at` with: the first `context` bytes from
        there were read already (an endless line's window before them)."""
        return {
            "epoch_base": self.epoch_base,
            "epoch": self.epoch,
            "step": self.step,
            "bar": self.bar,
            "epoch_total": self.epoch_total,
            "axes": self.axes,
            "counts": self.counts,
            "pending": [list(point) for point in self.pending.values()],
            "held": [[name, *group] for name, group in self.held.items()],
            "context": self._context,
            "line_start": self._line_start,
            "before": (self._continued if self._context else self._last_byte).hex(),
            "done": self.done,
            "table": [self.table[0], self.table[1], [list(value) for value in self.table[2]]],
            "columns": None if self.columns is None else [list(column) for column in self.columns],
        }

    def restore(self, state: dict) -> None:
        def number(value):
            return None if value is None else float(value)

        self.epoch_base, self.epoch = number(state["epoch_base"]), number(state["epoch"])
        self.step, self.bar = number(state["step"]), number(state["bar"])
        self.epoch_total = number(state.get("epoch_total"))
        self.axes = {str(name): str(axis) for name, axis in state["axes"].items()}
        self.counts = {str(name): int(count) for name, count in state["counts"].items()}
        self.pending = {str(n): (str(n), str(a), float(x), float(y)) for n, a, x, y in state["pending"]}
        self.held = {}
        for name, axis, x, values, carried, offsets, redrawn in state["held"]:
            values = [float(value) for value in values][:MAX_HELD] or [0.0]
            offsets = ([int(offset) for offset in offsets] + [0] * len(values))[: len(values)]
            self.held[str(name)] = [str(axis), float(x), values, bool(carried), offsets, bool(redrawn)]
        self._buffer = bytearray()
        self._context = max(0, min(int(state["context"]), WINDOW_CONTEXT))
        self._line_start = int(state["line_start"])
        before = bytes.fromhex(state["before"])[:1]
        self._continued = self._last_byte = before
        self.done = float(state.get("done") or 0.0)
        section, step, values = state.get("table") or ("", None, [])
        self.table = [str(section), number(step), [(str(n), float(v), int(w)) for n, v, w in values][:MAX_HELD]]
        columns = state.get("columns")
        self.columns = (
            None
            if columns is None
            else tuple((kind and str(kind), name and str(name)) for kind, name in columns[:MAX_COLUMNS])
        )
