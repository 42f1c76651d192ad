"""A job's metric series, kept bounded however long it runs and however many names it prints.

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
"""

from __future__ import annotations

import hashlib
import math
import re

from .names import twin_key

MAX_POINTS = 1000
MAX_SERIES = 24  # metrics a view keeps the series of; of the others it only counts the names


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
            raw = 0.7213 / (1 + 1.079 / size) * size * size / sum(2.0**-rank for rank in self.registers)
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
            windows.extend(
                [len(block[i : i + stride]), *_extremes(block[i : i + stride])] for i in range(0, len(block), stride)
            )
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
        families = {
            str(key): None if names is None else [str(name) for name in names]
            for key, names in state["families"].items()
        }
        if (
            len(updated) > self.max_names
            or len(families) > MAX_FAMILIES
            or any(len(names or ()) > FLOOD_MEMBERS for names in families.values())
        ):
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


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except (OverflowError, TypeError):  # an int too large for a float, or not a number at all
        return False
