"""Metric charts as inline SVG: no plotting library, nothing heavy to import, cheap to resend.

A `MetricSeries` keeps a bounded number of points per metric however long the
job runs. Values go into windows of `stride` values each, and a window keeps
only its lowest and its highest value (in their order): past the bound, the
stride doubles and neighbouring windows merge, so a spike or a dip is never
thinned away while memory does not grow.

It also keeps a bounded number of metrics however many names the log prints
(per-class metrics: `class_17_acc` for each of 5,000 classes): a whole series
for at most `max_names` of them, chosen as the view draws them (loss-like first,
then the most recently updated; the names of a numbered family after the names
that stand alone), and for the others only how many distinct names there are.
The whole log always has every value (`Job.metrics()`, `jupyter-trainer metrics`).

A chart shows a metric with its twins (`loss`, `val_loss`, `eval_loss`, ...) on
one x axis, titled by what x is (step, epoch, seconds or value number), on a log scale
when the values span more than two decades. Hovering shows the values at that
x (SVG titles: the browser's own tooltip, no script). A view draws at most
`MAX_CHARTS` charts.
"""

from __future__ import annotations

import hashlib
import html
import math
import re

from ..metrics.reader import AXIS_TITLES, twin_key

# Colours that read on a light and on a dark background alike (and tell a metric from its twin).
PALETTE = ("#3b82f6", "#ef4444", "#22a06b", "#f59e0b", "#a855f7", "#ec4899")
# One colour per job on a chart of several (`%train_compare`): each has 3:1 contrast or more on
# white and on JupyterLab's dark background (#111), and its hue differs from the others'.
RUN_PALETTE = ("#3b82f6", "#ef4444", "#22a06b", "#d97706", "#a855f7", "#ec4899", "#0891b2", "#65a30d")
LEGEND_LINE = 15  # pixels between two lines of a legend that wraps
LEGEND_CHAR = 7  # about how wide a legend's character is, in pixels
MAX_POINTS = 1000
MAX_SERIES = 24  # metrics a view keeps the series of; of the others it only counts the names
MAX_CHARTS = 6  # charts a view draws at once
LOG_SCALE_SPAN = 100  # a chart goes logarithmic when its positive values span more than this factor
HOVER_BANDS = 48  # vertical strips of a chart, each with a tooltip of the values nearest to it

# A family is the names that differ only in their numbers (class_0_acc, class_1_acc, ...): one with
# this many is a flood, whose names go after the others. At most MAX_FAMILIES are told apart; the
# names of any more count as a flood too (a run that prints hundreds of kinds of numbered names).
FLOOD_MEMBERS = 8
MAX_FAMILIES = 256
# A kept metric that has been silent while this many values of other metrics were read gives its
# place to a newcomer of any rank (a phase of training that ended, a name printed once).
SILENT_AFTER = 1_000_000
_NUMBERS = re.compile(r"\d+")

# What a metric's rank starts with: which comes first when charts or kept series are chosen.
FLOOD, PLAIN, LOSS, MAIN, CHOSEN = range(5)
MAIN_KEYS = ("loss",)  # the metric a training run is judged by, with its twins (val_loss, eval_loss)
_WORDS = re.compile(r"[^a-z0-9]+")


class NameCount:
    """How many distinct names were seen, in bounded memory: exact up to EXACT names, then a
    HyperLogLog estimate (within about 2% of the truth) that no number of names makes larger."""

    EXACT = 1024
    BITS = 12  # 4,096 one-byte registers

    def __init__(self):
        self.names: set[str] | None = set()  # None once counted by estimate
        self.registers = bytearray()
        self._estimate: float | None = None

    def add(self, name: str) -> bool:
        """Count `name`; True if the count may have changed."""
        if self.names is not None:
            if name in self.names:
                return False
            self.names.add(name)
            if len(self.names) > self.EXACT:  # from here on, an estimate
                self.registers = bytearray(1 << self.BITS)
                for known in self.names:
                    self._register(known)
                self.names = None
            return True
        return self._register(name)

    def _register(self, name: str) -> bool:
        digest = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")
        rest_bits = 64 - self.BITS
        index, rest = digest >> rest_bits, digest & ((1 << rest_bits) - 1)
        rank = rest_bits - rest.bit_length() + 1  # the place of the first 1 bit
        if rank <= self.registers[index]:
            return False
        self.registers[index] = rank
        self._estimate = None
        return True

    @property
    def exact(self) -> bool:
        return self.names is not None

    def count(self) -> int:
        if self.names is not None:
            return len(self.names)
        if self._estimate is None:
            size = len(self.registers)
            raw = 0.7213 / (1 + 1.079 / size) * size * size / sum(2.0 ** -rank for rank in self.registers)
            zeros = self.registers.count(0)
            self._estimate = size * math.log(size / zeros) if raw <= 2.5 * size and zeros else raw
        return round(self._estimate)

    def state(self) -> dict:
        if self.names is not None:
            return {"names": sorted(self.names)}
        return {"registers": self.registers.hex()}

    def restore(self, state: dict) -> None:
        if "names" in state:
            names = {str(name) for name in state["names"]}
            if len(names) > self.EXACT:
                raise ValueError("more names than a count keeps")
            self.names, self.registers = names, bytearray()
        else:
            registers = bytearray.fromhex(state["registers"])
            if len(registers) != 1 << self.BITS or max(registers) > 64 - self.BITS + 1:
                raise ValueError("not a count's registers")
            self.names, self.registers = None, registers
        self._estimate = None


class MetricSeries:
    """The series a view draws from: at most `max_points` points for each of at most `max_names`
    metrics (see the module's docstring), fed by a MetricReader (`add`, `set_latest`)."""

    def __init__(self, max_points: int = MAX_POINTS, max_names: int = MAX_SERIES):
        self.max_points = max_points
        self.max_names = max(1, max_names)
        self.axes: dict[str, str] = {}
        self.windows: dict[str, list[list]] = {}  # per metric: [values in it, lowest/highest points...]
        self.stride: dict[str, int] = {}  # per metric: the values a window holds
        self.latest: dict[str, tuple[float, float]] = {}  # per metric: its newest (x, value)
        self.counts: dict[str, int] = {}  # per metric: the values read
        # the metrics kept (all the dicts above hold only these), least recently updated first, each
        # with when it last was: the number of values of any metric seen by then
        self.updated: dict[str, int] = {}
        self.seen = 0
        self.seen_names = NameCount()  # every name seen, kept or not
        self.families: dict[str, list[str] | None] = {}  # a numbered family's names so far; None: a flood
        self.chosen: tuple[str, str] | None = None  # the chart (title, axis) a view was asked to draw first
        self.version = 0  # moves on whenever what a view shows may have changed
        self._set_latest_at = 0  # `seen` when set_latest last ran: a metric updated since was updated in order
        self._floor: int | None = None  # the lowest rank of a kept metric, once worked out

    def add(self, point: tuple) -> None:
        """A metric's next value whose x is settled: (name, axis, x, value)."""
        name, axis, x, value = point
        if not (_finite(x) and _finite(value)):  # a gap: counted by the reader, never drawn
            return
        if not self._keeps(name):
            return
        self._touch(name)
        self._follow_axis(name, axis)
        windows = self.windows.setdefault(name, [])
        stride = self.stride.setdefault(name, 1)
        if windows and windows[-1][0] < stride:
            window = windows[-1]
            window[0] += 1
            window.append((x, value))
            window[1:] = _extremes(window[1:])
            return
        windows.append([1, (x, value)])
        if len(windows) > max(1, self.max_points // 2):
            self.stride[name] = stride * 2
            windows[:] = [_merged(windows[index : index + 2]) for index in range(0, len(windows), 2)]

    def add_many(self, name: str, axis: str, xs: list, values: list, offsets=None) -> None:
        """A metric's next values, in order, as `add` would take them one by one (a reader's batch)."""
        if name not in self.updated and len(self.updated) >= self.max_names:
            for x, value in zip(xs, values):  # whether it is kept turns on the others: one by one
                self.add((name, axis, x, value))
            return
        points = [(x, value) for x, value in zip(xs, values) if _finite(x) and _finite(value)]
        if not points or not self._keeps(name):
            return
        self.seen += len(points) - 1  # one for each value, as one by one
        self._touch(name)
        self._follow_axis(name, axis)
        windows = self.windows.setdefault(name, [])
        stride = self.stride.setdefault(name, 1)
        half = max(1, self.max_points // 2)
        # as `add` one by one: the last window filled up to the stride, new windows of `stride`
        # values each, and past `half` windows the stride doubles and neighbours merge
        at = 0
        while at < len(points):
            if windows and windows[-1][0] < stride:
                window = windows[-1]
                taken = points[at : at + stride - window[0]]
                window[0] += len(taken)
                window[1:] = _extremes(window[1:] + taken)
                at += len(taken)
                continue
            room = max(1, half + 1 - len(windows))  # windows to add before the series thins
            block = points[at : at + room * stride]
            windows.extend([len(block[i : i + stride]), *_extremes(block[i : i + stride])] for i in range(0, len(block), stride))
            at += len(block)
            if len(windows) > half:
                stride *= 2
                self.stride[name] = stride
                windows[:] = [_merged(windows[index : index + 2]) for index in range(0, len(windows), 2)]

    def set_latest(self, pending: dict, counts: dict) -> None:
        """The newest value of each metric (not yet settled: a redraw may still replace it), and
        how many values of each were read."""
        for name, axis, x, value in pending.values():
            count = counts.get(name, 0)
            if name in self.updated:
                if count == self.counts.get(name):
                    continue  # nothing new
                if self.updated[name] <= self._set_latest_at:  # not yet touched by `add` in log order
                    self._touch(name)
            elif not (_finite(x) and _finite(value)):
                self._count_name(name)  # no value to draw: not worth a place
                continue
            elif not self._keeps(name):
                continue
            self._follow_axis(name, axis)
            if _finite(x) and _finite(value):
                self.latest[name] = (x, value)
        for name in self.updated:
            if name in counts and counts[name] != self.counts.get(name):
                self.counts[name] = counts[name]
                self.version += 1
        self._set_latest_at = self.seen

    def choose(self, chart: tuple[str, str] | None) -> None:
        """Draw the chart (title, axis) first, and keep its metrics whatever comes (None: let the
        view choose)."""
        self.chosen = chart
        self._floor = None
        self.version += 1

    # -- which metrics are kept ----------------------------------------------------

    def _keeps(self, name: str) -> bool:
        """Whether `name` has a series here, taking it in if it ranks above a kept one."""
        if name in self.updated:
            return True
        self.seen += 1
        self._count_name(name)
        rank = self.rank_of(name)
        if len(self.updated) >= self.max_names:
            victim = self._victim(rank)
            if victim is None:
                return False
            self._forget(victim)
        self.updated[name] = self.seen
        self._floor = None
        self.version += 1
        return True

    def _count_name(self, name: str) -> None:
        if self.seen_names.add(name):
            self.version += 1

    def _touch(self, name: str) -> None:
        """`name` was just updated: it moves to the end of `updated`."""
        self.seen += 1
        del self.updated[name]
        self.updated[name] = self.seen
        self.version += 1

    def _victim(self, rank: int) -> str | None:
        """The kept metric a newcomer of `rank` takes the place of, if any: one silent for long,
        else the least recently updated of the lowest rank, if that is below the newcomer's."""
        oldest = next(iter(self.updated))
        if self.seen - self.updated[oldest] >= SILENT_AFTER and not self._is_chosen(oldest):
            return oldest
        if self._floor is None:
            self._floor = min(self.rank_of(kept) for kept in self.updated)
        if rank <= self._floor:
            return None
        return next(kept for kept in self.updated if self.rank_of(kept) == self._floor)

    def _forget(self, name: str) -> None:
        for kept in (self.axes, self.windows, self.stride, self.latest, self.counts, self.updated):
            kept.pop(name, None)
        self._floor = None
        self.version += 1

    def rank_of(self, name: str) -> int:
        """CHOSEN, MAIN, LOSS, PLAIN or FLOOD: which comes first when metrics are kept or drawn."""
        if self._is_chosen(name):
            return CHOSEN
        if self._in_flood(name):
            return FLOOD
        if twin_key(name) in MAIN_KEYS:
            return MAIN  # before any other loss, however many of those the run prints first
        return LOSS if "loss" in _WORDS.split(name.lower()) else PLAIN  # a word of its name: not "glossary_acc"

    def _is_chosen(self, name: str) -> bool:
        chosen = self.chosen
        return chosen is not None and twin_key(name) == chosen[0] and self.axes.get(name, chosen[1]) == chosen[1]

    def _in_flood(self, name: str) -> bool:
        """Whether `name` belongs to a numbered family with many names (noting it in its family)."""
        key = _NUMBERS.sub("#", name)
        if key == name:
            return False  # no number in it: a family of its own
        members = self.families.get(key, [])
        if members is None:
            return True
        if name in members:
            return False
        if key not in self.families and len(self.families) >= MAX_FAMILIES:
            return True
        members.append(name)
        self.families[key] = members
        if len(members) < FLOOD_MEMBERS:
            return False
        self.families[key] = None  # a flood: its kept names now rank lower too
        self._floor = None
        return True

    def _follow_axis(self, name: str, axis: str) -> None:
        """The reader moved the metric to another x (see MetricReader._settle): it starts again."""
        if self.axes.get(name, axis) != axis:
            self.windows.pop(name, None)
            self.stride.pop(name, None)
            self.latest.pop(name, None)
        self.axes[name] = axis

    def _kept(self, name: str) -> list[tuple[float, float]]:
        return [point for window in self.windows.get(name, []) for point in window[1:]]

    @property
    def points(self) -> dict[str, list[tuple[float, float]]]:
        return {name: self._kept(name) for name in self.windows}

    def curve(self, name: str) -> list[tuple[float, float]]:
        """The kept points, ending at the newest value."""
        points = self._kept(name)
        latest = self.latest.get(name)
        if latest is not None and (not points or points[-1] != latest):
            points.append(latest)
        return points

    def last(self, name: str) -> float | None:
        latest = self.latest.get(name)
        if latest is not None:
            return latest[1]
        windows = self.windows.get(name)
        return windows[-1][-1][1] if windows else None

    def names(self) -> list[str]:
        """The kept metrics that have a value to draw."""
        return list(dict.fromkeys([*self.windows, *self.latest]))

    def name_count(self) -> tuple[int, bool]:
        """How many distinct metrics were seen, kept or not, and whether that is exact."""
        return self.seen_names.count(), self.seen_names.exact

    def __bool__(self) -> bool:
        return bool(self.windows or self.latest)

    # -- kept next to the record, for the next view --------------------------------

    def state(self) -> dict:
        return {
            "axes": self.axes, "windows": self.windows, "stride": self.stride, "latest": self.latest,
            "counts": self.counts, "updated": self.updated, "seen": self.seen,
            "names": self.seen_names.state(), "families": self.families,
        }  # fmt: skip

    def restore(self, state: dict) -> None:
        """Take `state` (as `state()` gave it); ValueError if it holds more than a series keeps."""
        updated = {str(name): int(when) for name, when in state["updated"].items()}
        families = {str(key): None if names is None else [str(name) for name in names] for key, names in state["families"].items()}
        if len(updated) > self.max_names or len(families) > MAX_FAMILIES or any(len(names or ()) > FLOOD_MEMBERS for names in families.values()):
            raise ValueError("more metrics than a series keeps")
        self.axes = {str(name): str(axis) for name, axis in state["axes"].items()}
        self.windows = {
            str(name): [[int(window[0]), *((float(x), float(y)) for x, y in window[1:])] for window in windows]
            for name, windows in state["windows"].items()
        }
        self.stride = {str(name): int(stride) for name, stride in state["stride"].items()}
        self.latest = {str(name): (float(x), float(y)) for name, (x, y) in state["latest"].items()}
        self.counts = {str(name): int(count) for name, count in state["counts"].items()}
        if not set(self.axes) | set(self.windows) | set(self.latest) | set(self.counts) <= set(updated):
            raise ValueError("a series of a metric that is not kept")
        self.updated, self.seen, self.families = updated, int(state["seen"]), families
        self.seen_names = NameCount()
        self.seen_names.restore(state["names"])
        self._floor = None
        self.version += 1


def _extremes(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lowest and the highest of `points`, in their order (one point when they are the same)."""
    values = [point[1] for point in points]
    low, high = values.index(min(values)), values.index(max(values))  # the first of each
    return [points[low]] if low == high else [points[min(low, high)], points[max(low, high)]]


def _merged(windows: list[list]) -> list:
    return [sum(window[0] for window in windows), *_extremes([point for window in windows for point in window[1:]])]


def _format(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4g}"


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except (OverflowError, TypeError):  # an int too large for a float, or not a number at all
        return False


def _fraction(value: float, low: float, high: float) -> float:
    """Where `value` lies from `low` (0) to `high` (1); the middle when they are equal. Computed
    so that no finite input overflows (1e308 - -1e308 is inf) or divides by zero."""
    if not high > low:
        return 0.5
    span = high - low
    if _finite(span):
        fraction = (value - low) / span
    else:  # halves cannot overflow, and for numbers this large they are exact
        fraction = (value / 2 - low / 2) / (high / 2 - low / 2)
    return min(1.0, max(0.0, fraction))


def _value_range(ys: list[float]) -> tuple[float, float]:
    """The values the chart's bottom and top stand for."""
    low, high = min(ys), max(ys)
    if low == high:  # a flat line: a band around it, where the floats have room for one
        pad = max(abs(low) * 0.05, 0.5)  # relative: low - 0.5 == low once low is about 1e16
        if _finite(low - pad) and _finite(high + pad):
            return low - pad, high + pad
    return low, high  # at the largest floats a flat line is drawn across the middle


def uses_log_scale(ys: list[float]) -> bool:
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) > LOG_SCALE_SPAN


def chart_svg(
    title: str, axis: str, curves: list[tuple[str, list[tuple[float, float]], str]], width: int = 360, height: int = 170,
    wrap_legend: bool = False,
) -> str:
    """One chart: each curve (name, points, colour) over one x axis; its range, its latest values,
    what x is. Any numbers give coordinates inside the chart: values that are not finite (which a
    metrics cache on disk could hold) are left out. `wrap_legend`: the legend goes on as many
    lines as its entries need (a chart of many runs), the plot below it."""
    left, right, top, bottom = 58, 10, 22, 32
    curves = [(name, [(x, y) for x, y in points if _finite(x) and _finite(y)], colour) for name, points, colour in curves]
    if wrap_legend:
        rows = _legend_rows(curves, width - left - right)
        top += LEGEND_LINE * (len(rows) - 1)
        height += LEGEND_LINE * (len(rows) - 1)
    plot_w, plot_h = width - left - right, height - top - bottom
    label = html.escape(title)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{label}" class="jt-chart">'
    )
    frame = f'<rect class="jt-frame" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}"/>'
    legend = "".join(
        f'<tspan class="jt-swatch" style="fill:{html.escape(colour)}">■</tspan>'
        f'<tspan class="jt-name"> {html.escape(name)}</tspan> {_format(points[-1][1]) if points else "no finite value"}  '
        for name, points, colour in curves
    )
    legend_svg = f'<text class="jt-legend" x="{left}" y="14">{legend}</text>'
    if wrap_legend:
        legend_svg = "".join(
            f'<text class="jt-legend" x="{left}" y="{14 + LEGEND_LINE * index}">{"".join(_legend_entry(*curve, gap=bool(at)) for at, curve in enumerate(row))}</text>'
            for index, row in enumerate(rows)
        )
    everything = [point for _, points, _ in curves for point in points]
    if not everything:
        return head + legend_svg + frame + "</svg>"
    xs = [x for x, _ in everything]
    ys = [y for _, y in everything]
    x0, x1 = min(xs), max(xs)
    logarithmic = uses_log_scale(ys)
    scale = math.log10 if logarithmic else (lambda value: value)
    y0, y1 = (math.log10(min(ys)), math.log10(max(ys))) if logarithmic else _value_range(ys)

    def position(x: float, y: float) -> tuple[float, float]:
        return left + _fraction(x, x0, x1) * plot_w, top + (1 - _fraction(scale(y), y0, y1)) * plot_h

    lines = []
    for name, points, colour in curves:
        if not points:
            continue
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in (position(x, y) for x, y in points))
        lines.append(f'<polyline class="jt-line" style="stroke:{html.escape(colour)}" points="{path}"><title>{html.escape(name)}</title></polyline>')
        if len(points) == 1:  # a one-point line draws nothing: show the point
            px, py = position(*points[0])
            lines.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" style="fill:{html.escape(colour)}"/>')
    top_label, bottom_label = (max(ys), min(ys)) if logarithmic else (y1, y0)
    axis_title = AXIS_TITLES.get(axis, axis) + (" · log scale" if logarithmic else "")
    axes = (
        f'<text class="jt-tick" x="{left - 4}" y="{top + 9}" text-anchor="end">{_format(top_label)}</text>'
        f'<text class="jt-tick" x="{left - 4}" y="{top + plot_h}" text-anchor="end">{_format(bottom_label)}</text>'
        f'<text class="jt-tick" x="{left}" y="{top + plot_h + 12}">{_format(x0)}</text>'
        f'<text class="jt-tick" x="{left + plot_w}" y="{top + plot_h + 12}" text-anchor="end">{_format(x1)}</text>'
        f'<text class="jt-axis-title" x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle">{html.escape(axis_title)}</text>'
    )
    return head + legend_svg + frame + axes + "".join(lines) + _hover_bands(curves, x0, x1, left, top, plot_w, plot_h, axis) + "</svg>"


def _legend_entry(name: str, points: list[tuple[float, float]], colour: str, gap: bool = False) -> str:
    """■ name latest: `gap` after the entry before it (SVG text collapses spaces)."""
    shift = f' dx="{LEGEND_CHAR * 2}"' if gap else ""
    return (
        f'<tspan class="jt-swatch"{shift} style="fill:{html.escape(colour)}">■</tspan>'
        f'<tspan class="jt-name"> {html.escape(name)}</tspan> {_format(points[-1][1]) if points else "no value"}'
    )


def _legend_rows(curves, width: int) -> list[list]:
    """The curves' legend entries, as many on each line as fit in `width` (at least one)."""
    rows: list[list] = [[]]
    used = 0
    for curve in curves:
        name, points, _ = curve
        size = LEGEND_CHAR * (len(name) + len(_format(points[-1][1]) if points else "no value") + 6)
        if rows[-1] and used + size > width:
            rows.append([])
            used = 0
        rows[-1].append(curve)
        used += size
    return rows


def _hover_bands(curves, x0: float, x1: float, left: int, top: int, plot_w: int, plot_h: int, axis: str) -> str:
    """Invisible strips across the chart; hovering one shows each curve's value nearest its middle."""
    bands = HOVER_BANDS if x1 > x0 else 1
    width = plot_w / bands
    axis_name = AXIS_TITLES.get(axis, axis)
    said: list[list[str]] = [[] for _ in range(bands)]
    for name, points, _ in curves:
        nearest: dict[int, tuple[float, float, float]] = {}  # band: (distance to its middle, x, y)
        for x, y in points:
            where = _fraction(x, x0, x1) * bands
            band = min(bands - 1, int(where))
            distance = abs(where - band - 0.5)
            if band not in nearest or distance < nearest[band][0]:
                nearest[band] = (distance, x, y)
        for band, (_, x, y) in nearest.items():
            said[band].append(f"{name} {_format(y)} at {axis_name} {_format(x)}")
    return "".join(
        f'<rect class="jt-hover" x="{left + band * width:.1f}" y="{top}" width="{width:.1f}" height="{plot_h}">'
        f"<title>{html.escape(chr(10).join(lines))}</title></rect>"
        for band, lines in enumerate(said)
        if lines
    )


def chart_groups(series: MetricSeries) -> list[tuple[str, str, list[str]]]:
    """(title, axis, names) of each chart: a metric and its twins share one when their x is the same."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name in series.names():
        axis = series.axes.get(name, "n")
        groups.setdefault((twin_key(name), axis), []).append(name)
    return [(key, axis, names) for (key, axis), names in groups.items()]


def chosen_groups(series: MetricSeries, limit: int = MAX_CHARTS) -> list[tuple[str, str, list[str]]]:
    """The charts a view draws, at most `limit`: the one chosen in the view, then the loss-like,
    then the most recently updated (a numbered family's after the others); a chart ranks as its
    best metric."""

    def rank(group: tuple[str, str, list[str]]) -> tuple[int, int]:
        _, _, names = group
        return max(series.rank_of(name) for name in names), max(series.updated.get(name, 0) for name in names)

    return sorted(chart_groups(series), key=rank, reverse=True)[:limit]


def charts_html(series: MetricSeries, groups: list[tuple[str, str, list[str]]] | None = None) -> str:
    """The charts of `groups` (by default those chosen_groups gives)."""
    if not series:
        return ""
    if groups is None:
        groups = chosen_groups(series)
    charts = [
        chart_svg(title, axis, [(name, series.curve(name), PALETTE[index % len(PALETTE)]) for index, name in enumerate(names)])
        for title, axis, names in groups
    ]
    return '<div class="jt-charts">' + "".join(charts) + "</div>"


def sparkline_svg(values, top: float | None = None, width: int = 60, height: int = 14) -> str:
    """A small line of recent values (None: unknown, left out), from 0 to `top` (default their
    highest), drawn in the text's colour; "" with fewer than two known values."""
    known = [(index, value) for index, value in enumerate(values) if value is not None and math.isfinite(value)]
    if len(known) < 2:
        return ""
    highest = max(top or 0.0, max(value for _, value in known)) or 1.0
    step = width / max(1, len(values) - 1)
    points = " ".join(f"{index * step:.1f},{height - 1 - (height - 2) * max(0.0, value) / highest:.1f}" for index, value in known)
    return (
        f'<svg class="jt-spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" aria-hidden="true">'
        f'<polyline points="{points}" fill="none" stroke="currentColor" stroke-width="1.2"/></svg>'
    )
