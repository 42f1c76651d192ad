"""Metric charts as inline SVG: no plotting library, nothing heavy to import, cheap to resend.

A `MetricSeries` keeps a bounded number of points per metric however long the
job runs. Values go into windows of `stride` values each, and a window keeps
only its lowest and its highest value (in their order): past the bound, the
stride doubles and neighbouring windows merge, so a spike or a dip is never
thinned away while memory does not grow.

A chart shows a metric with its twins (`loss`, `val_loss`, `eval_loss`, ...) on
one x axis, titled by what x is (step, epoch, seconds or value number), on a log scale
when the values span more than two decades. Hovering shows the values at that
x (SVG titles: the browser's own tooltip, no script).
"""

from __future__ import annotations

import html
import math

from .metrics import AXIS_TITLES, twin_key

# Colours that read on a light and on a dark background alike (and tell a metric from its twin).
PALETTE = ("#3b82f6", "#ef4444", "#22a06b", "#f59e0b", "#a855f7", "#ec4899")
MAX_POINTS = 1000
LOG_SCALE_SPAN = 100  # a chart goes logarithmic when its positive values span more than this factor
HOVER_BANDS = 48  # vertical strips of a chart, each with a tooltip of the values nearest to it


class MetricSeries:
    def __init__(self, max_points: int = MAX_POINTS):
        self.max_points = max_points
        self.axes: dict[str, str] = {}
        self.windows: dict[str, list[list]] = {}  # per metric: [values in it, lowest/highest points...]
        self.stride: dict[str, int] = {}  # per metric: the values a window holds
        self.latest: dict[str, tuple[float, float]] = {}  # per metric: its newest (x, value)
        self.counts: dict[str, int] = {}  # per metric: the values read

    def add(self, point: tuple) -> None:
        """A metric's next value whose x is settled: (name, axis, x, value)."""
        name, axis, x, value = point
        if not (_finite(x) and _finite(value)):  # a gap: counted by the reader, never drawn
            return
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

    def set_latest(self, pending: dict, counts: dict) -> None:
        """The newest value of each metric (not yet settled: a redraw may still replace it)."""
        for name, axis, x, value in pending.values():
            self._follow_axis(name, axis)
            if _finite(x) and _finite(value):
                self.latest[name] = (x, value)
        self.counts = dict(counts)

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
        return list(dict.fromkeys([*self.windows, *self.latest]))

    def __bool__(self) -> bool:
        return bool(self.windows or self.latest)

    # -- kept next to the record, for the next view --------------------------------

    def state(self) -> dict:
        return {"axes": self.axes, "windows": self.windows, "stride": self.stride, "latest": self.latest, "counts": self.counts}

    def restore(self, state: dict) -> None:
        self.axes = {str(name): str(axis) for name, axis in state["axes"].items()}
        self.windows = {
            str(name): [[int(window[0]), *((float(x), float(y)) for x, y in window[1:])] for window in windows]
            for name, windows in state["windows"].items()
        }
        self.stride = {str(name): int(stride) for name, stride in state["stride"].items()}
        self.latest = {str(name): (float(x), float(y)) for name, (x, y) in state["latest"].items()}
        self.counts = {str(name): int(count) for name, count in state["counts"].items()}


def _extremes(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lowest and the highest of `points`, in their order (one point when they are the same)."""
    low = min(range(len(points)), key=lambda index: points[index][1])
    high = max(range(len(points)), key=lambda index: points[index][1])
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


def chart_svg(title: str, axis: str, curves: list[tuple[str, list[tuple[float, float]], str]], width: int = 360, height: int = 170) -> str:
    """One chart: each curve (name, points, colour) over one x axis; its range, its latest values,
    what x is. Any numbers give coordinates inside the chart: values that are not finite (which a
    metrics cache on disk could hold) are left out."""
    left, right, top, bottom = 58, 10, 22, 32
    plot_w, plot_h = width - left - right, height - top - bottom
    curves = [(name, [(x, y) for x, y in points if _finite(x) and _finite(y)], colour) for name, points, colour in curves]
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


def charts_html(series: MetricSeries) -> str:
    if not series:
        return ""
    colours = {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(series.names())}
    charts = [
        chart_svg(title, axis, [(name, series.curve(name), colours[name]) for name in names])
        for title, axis, names in chart_groups(series)
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
