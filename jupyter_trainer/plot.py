"""Metric charts as inline SVG: no plotting library, nothing heavy to import, cheap to resend.

A `MetricSeries` keeps a bounded number of points per metric however long the
job runs: past the bound it keeps every other point, so the curve's shape stays
while memory does not grow.
"""

from __future__ import annotations

import html
import math
from typing import Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
MAX_POINTS = 1000


class MetricSeries:
    def __init__(self, max_points: int = MAX_POINTS):
        self.max_points = max_points
        self.points: dict[str, list[tuple[int, float]]] = {}  # the kept points, by match number
        self.counts: dict[str, int] = {}
        self.latest: dict[str, tuple[int, float]] = {}
        self.stride: dict[str, int] = {}  # per metric: the window of matches that gives one point

    def extend(self, name: str, values: Sequence[float | bytes | str]) -> None:
        """Append a metric's next values, in log order. A value's x is its match number, and the
        series keeps the first number in each window of `stride` matches (the stride doubles
        whenever the bound is passed). Only the values looked at are converted to floats, so a
        backlog of millions of matches costs about one conversion per kept point."""
        index = self.counts.get(name, 0)
        self.counts[name] = index + len(values)
        self._note_latest(name, index, values)
        points = self.points.get(name, [])
        stride = self.stride.get(name, 1)
        position = 0
        while position < len(values):
            window = (index + position) // stride
            if points and points[-1][0] // stride == window:  # this window has its point: go to the next
                position = (window + 1) * stride - index
                continue
            value = _number(values[position])
            if value is None:  # not a number: the window's point is the next one that is
                position += 1
                continue
            points.append((index + position, value))
            if len(points) > self.max_points:
                stride *= 2
                points[:] = _first_in_each_window(points, stride)
                self.stride[name] = stride
        if points:
            self.points[name] = points

    def _note_latest(self, name: str, index: int, values: Sequence[float | bytes | str]) -> None:
        for position in range(len(values) - 1, -1, -1):
            value = _number(values[position])
            if value is not None:
                self.latest[name] = (index + position, value)
                return

    def curve(self, name: str) -> list[tuple[int, float]]:
        """The kept points, ending at the latest value even when the stride skipped it."""
        points = self.points.get(name, [])
        latest = self.latest.get(name)
        if latest is not None and (not points or latest[0] > points[-1][0]):
            return points + [latest]
        return points

    def last(self, name: str) -> float | None:
        latest = self.latest.get(name)
        return latest[1] if latest else None

    def __bool__(self) -> bool:
        return bool(self.points)


def _first_in_each_window(points: list[tuple[int, float]], stride: int) -> list[tuple[int, float]]:
    kept: list[tuple[int, float]] = []
    for point in points:
        if not kept or kept[-1][0] // stride != point[0] // stride:
            kept.append(point)
    return kept


def _number(value: float | bytes | str) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _format(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4g}"


def _finite(value: float) -> bool:
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


def chart_svg(name: str, points: list[tuple[int, float]], colour: str, width: int = 320, height: int = 140) -> str:
    """One metric: its curve, its range and its latest value. Any numbers give coordinates inside
    the chart: values that are not finite (which a metrics cache on disk could hold) are left out."""
    left, right, top, bottom = 56, 10, 22, 20
    plot_w, plot_h = width - left - right, height - top - bottom
    label, colour = html.escape(name), html.escape(colour)
    points = [(x, y) for x, y in points if _finite(x) and _finite(y)]
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{label}" class="jt-chart">'
    )
    if not points:
        return (
            head + f'<text x="{left}" y="14" font-size="12" font-family="sans-serif" fill="#333">'
            f'<tspan font-weight="bold">{label}</tspan> no finite value</text>'
            f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ddd"/></svg>'
        )
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = _value_range(ys)

    def position(x: float, y: float) -> tuple[float, float]:
        return left + _fraction(x, x0, x1) * plot_w, top + (1 - _fraction(y, y0, y1)) * plot_h

    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in (position(x, y) for x, y in points))
    dot = ""
    if len(points) == 1:  # a one-point line draws nothing: show the point
        px, py = position(*points[0])
        dot = f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{colour}"/>'
    return (
        head + f'<text x="{left}" y="14" font-size="12" font-family="sans-serif" fill="#333">'
        f'<tspan font-weight="bold">{label}</tspan> {_format(ys[-1])}</text>'
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ddd"/>'
        f'<text x="{left - 4}" y="{top + 9}" font-size="10" text-anchor="end" fill="#666">{_format(y1)}</text>'
        f'<text x="{left - 4}" y="{top + plot_h}" font-size="10" text-anchor="end" fill="#666">{_format(y0)}</text>'
        f'<text x="{left}" y="{height - 5}" font-size="10" fill="#666">{x0 + 1}</text>'
        f'<text x="{left + plot_w}" y="{height - 5}" font-size="10" text-anchor="end" fill="#666">{x1 + 1}</text>'
        f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>{dot}'
        "</svg>"
    )


def charts_html(series: MetricSeries) -> str:
    if not series:
        return ""
    charts = [
        chart_svg(name, series.curve(name), PALETTE[index % len(PALETTE)])
        for index, name in enumerate(series.points)
    ]
    return '<div style="display:flex;flex-wrap:wrap;gap:8px">' + "".join(charts) + "</div>"
