"""Runs side by side: which metric to compare, which value is best, which x to draw, the table.

`%train_compare` and `jupyter-trainer compare` show one metric of several jobs. What
they show is decided here, from plain values (the jobs' names, statuses and series),
so that the widget, the text table and the JSON say the same:

* the metric: the one asked for, else the first loss-like name the jobs share, else
  the main metric of all their names;
* the best value: the lowest for a loss- or error-like name (loss, perplexity, mae,
  wer, ...), the highest for an accuracy- or score-like one (acc, f1, auc, reward,
  ...); none for a name that is neither (lr, grad_norm);
* the x axis: the metric's own (step, epoch, ...) when every job that has it gives it
  on the same one, else (or when asked) the seconds since each job's start.

Pure logic: no IPython, no widget library, no runtime library.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..core.wording import text_table
from .names import AXIS_TITLES, TIME, main_metric, twin_key

# The words of a metric's name that say which way is better.
LOWER_IS_BETTER = frozenset({"loss", "ppl", "perplexity", "mae", "mse", "rmse", "wer", "cer", "error", "err", "nll"})
HIGHER_IS_BETTER = frozenset({
    "acc", "accuracy", "f1", "f1_score", "precision", "recall", "auc", "roc_auc", "r2", "iou", "miou", "map",
    "bleu", "rouge", "dice", "top1", "top5", "top_1", "top_5", "top1_acc", "top5_acc", "reward", "score",
})  # fmt: skip
LOWEST, HIGHEST = "lowest", "highest"
_WORDS = re.compile(r"[^a-z0-9]+")


def direction(name: str) -> str | None:
    """Which value of metric `name` is best: LOWEST, HIGHEST, or None when its name does not say."""
    base = twin_key(name.lower())
    for words in (base, *_WORDS.split(base)):
        if words in LOWER_IS_BETTER:
            return LOWEST
        if words in HIGHER_IS_BETTER:
            return HIGHEST
    return None


def loss_like(name: str) -> bool:
    return direction(name) == LOWEST


def default_metric(names_of_each: Sequence[Sequence[str]]) -> str | None:
    """The metric compared when none is asked for: of the names every job (that has any) prints,
    the first loss-like one (`loss` before `train_loss` before the others, as `main_metric`
    ranks them); else the main metric of every name of every job; None with no name at all."""
    having = [list(names) for names in names_of_each if names]
    if not having:
        return None
    shared = [name for name in having[0] if all(name in names for names in having[1:])]
    losses = [name for name in shared if loss_like(name)]
    if losses:
        return main_metric(losses)
    everything = list(dict.fromkeys(name for names in having for name in names))
    return main_metric(everything)


def shared_axis(axes: Iterable[str | None], by_time: bool = False) -> str:
    """The x the chart is drawn on: the metric's own axis when every job that has the metric
    gives it on the same one (and time is not asked for), else TIME."""
    found = {axis for axis in axes if axis is not None}
    if by_time or len(found) != 1:
        return TIME
    return found.pop()


def axis_note(axes: dict[str, str | None], axis: str, by_time: bool) -> str:
    """One line that says what x is, and why when it is the time."""
    if axis != TIME:
        return f"x: {AXIS_TITLES.get(axis, axis)}"
    if by_time:
        return "x: seconds since each job's start (--x time)"
    own = sorted({found for found in axes.values() if found is not None})
    if len(own) > 1:
        return (
            "x: seconds since each job's start "
            f"(the jobs give the metric by {', '.join(AXIS_TITLES.get(a, a) for a in own)})"
        )
    return "x: seconds since each job's start"


@dataclass(frozen=True)
class Row:
    """One job's line of the comparison."""

    name: str  # as the table shows it (with its run when not the first)
    status: str
    metric: str | None
    last: float | None
    best: float | None
    points: int
    note: str = ""  # said under the table: the job has no value of the metric, say

    def as_json(self) -> dict:
        return {
            "name": self.name, "status": self.status, "metric": self.metric,
            "last": _json_number(self.last), "best": _json_number(self.best), "points": self.points,
        }  # fmt: skip


@dataclass
class Stats:
    """What the table says of one series, kept as its values arrive: how many, the last, the
    lowest and the highest (values that are not finite are counted, never best)."""

    count: int = 0
    last: float | None = None
    lowest: float | None = None
    highest: float | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.last = value
        if math.isfinite(value):  # (of equal values the first is kept: 0.0 before -0.0)
            if self.lowest is None:
                self.lowest = self.highest = value
            elif value < self.lowest:
                self.lowest = value
            elif value > self.highest:
                self.highest = value

    def extend(self, values: Sequence[float]) -> None:
        """`add` each of `values`, in order (a batch of a run of lines: one pass at C speed)."""
        if not values:
            return
        self.count += len(values)
        self.last = values[-1]
        finite = values if all(map(math.isfinite, values)) else [value for value in values if math.isfinite(value)]
        if finite:
            # min() and max() keep the first of equal values, as add does
            low, high = min(finite), max(finite)
            self.lowest = low if self.lowest is None else min(self.lowest, low)
            self.highest = high if self.highest is None else max(self.highest, high)

    def best(self, name: str) -> float | None:
        way = direction(name)
        return self.lowest if way == LOWEST else self.highest if way == HIGHEST else None


def row(name: str, status: str, metric: str | None, stats: Stats | None, names: Sequence[str] = ()) -> Row:
    """The job's row: its values of `metric`, or empty values and why."""
    if metric is None:
        return Row(name, status, None, None, None, 0, f"{name}: no metric in its log yet")
    if stats is None or stats.count == 0:
        others = ", ".join(sorted(names)[:6]) + (", ..." if len(names) > 6 else "")
        said = f" (it has {others})" if others else ""
        return Row(name, status, metric, None, None, 0, f"{name}: no value of {metric} in its log{said}")
    return Row(name, status, metric, stats.last, stats.best(metric), stats.count)


def stats_of(values: Iterable[float]) -> Stats:
    stats = Stats()
    for value in values:
        stats.add(value)
    return stats


def format_value(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def columns(metric: str | None) -> tuple[str, ...]:
    """The table's titles, text and notebook alike: best says which way is best where the metric's
    name tells."""
    way = direction(metric) if metric else None
    return ("name", "status", "metric", "last", f"best ({way})" if way else "best", "points")


def cells(row: Row) -> tuple[str, ...]:
    """A row's cells, as both tables show them."""
    return (row.name, row.status, row.metric or "-", format_value(row.last), format_value(row.best), str(row.points))


def notes(rows: Sequence[Row], note: str = "") -> list[str]:
    """What both tables say under the rows: each run's note, whether best could be told, `note`."""
    said = [row.note for row in rows if row.note]
    metric = next((row.metric for row in rows if row.metric), None)
    if metric and direction(metric) is None:
        said.append(f"best: {metric}'s name does not say whether lower or higher is better")
    return said + ([note] if note else [])


def table_text(rows: Sequence[Row], note: str = "") -> str:
    """The comparison as a text table (a terminal, --no-widget), its notes under it."""
    metric = next((row.metric for row in rows if row.metric), None)
    text = text_table([cells(row) for row in rows], columns(metric), right={3, 4, 5})
    return "\n".join([text, *notes(rows, note)])


def rows_json(rows: Sequence[Row]) -> str:
    return json.dumps([r.as_json() for r in rows], indent=1)


def _json_number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def unique(names: Iterable[str]) -> list[str]:
    """The names in order, each once."""
    return list(dict.fromkeys(names))
