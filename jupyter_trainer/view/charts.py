"""Metric charts as inline SVG: no plotting library, nothing heavy to import, cheap to resend.

The series they draw are kept by `metrics.series.MetricSeries`.

A chart shows a metric with its twins (`loss`, `val_loss`, `eval_loss`, ...) on
one x axis, titled by what x is (step, epoch, seconds or value number), on a log scale
when the values span more than two decades. Hovering shows the values at that
x (SVG titles: the browser's own tooltip, no script). A view draws at most
`MAX_CHARTS` charts.
"""

from __future__ import annotations

import html
import math
from collections.abc import Collection

from ..metrics.names import AXIS_TITLES, twin_key
from ..metrics.series import MetricSeries, _finite
from .chart_controls import SMOOTHING, ChartControls, controls_html, ema

# Colours that read on a light and on a dark background alike (and tell a metric from its twin).
PALETTE = ("#3b82f6", "#ef4444", "#22a06b", "#f59e0b", "#a855f7", "#ec4899")
# One colour per job on a chart of several (`%train_compare`): each has 3:1 contrast or more on
# white and on JupyterLab's dark background (#111), and its hue differs from the others'.
RUN_PALETTE = ("#3b82f6", "#ef4444", "#22a06b", "#d97706", "#a855f7", "#ec4899", "#0891b2", "#65a30d")
LEGEND_LINE = 15  # pixels between two lines of a legend that wraps
LEGEND_CHAR = 7  # about how wide a legend's character is, in pixels
MAX_CHARTS = 6  # charts a view draws at once
LOG_SCALE_SPAN = 100  # a chart goes logarithmic when its positive values span more than this factor
SMOOTH_POINTS = 150  # points of a smoothed curve at most (it has no spike to keep)
HOVER_BANDS = 48  # vertical strips of a chart, each with a tooltip of the values nearest to it
# an alternative not shown by default: a presentation attribute, so any CSS rule overrides it
HIDDEN = ' display="none"'


def _format(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4g}"


def nice_ticks(low: float, high: float, most: int = 5) -> list[float]:
    """Round values between `low` and `high` to mark an axis with (1, 2 or 5 times a power of ten
    apart), at most `most` of them; none when the range is empty or not finite."""
    if not (_finite(low) and _finite(high)) or high <= low or not _finite(high - low):
        return []
    raw = (high - low) / max(1, most)
    power = 10 ** math.floor(math.log10(raw))
    step = next(factor * power for factor in (1, 2, 5, 10) if factor * power >= raw)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9 and len(ticks) <= most:
        ticks.append(0.0 if abs(value) < step * 1e-9 else round(value, 12))
        value = first + step * len(ticks)
    return ticks


def log_ticks(low: float, high: float, most: int = 6) -> list[float]:
    """Powers of ten between `low` and `high` (positive), every few when there are many; with fewer
    than two, 1, 2 and 5 times them."""
    if not (low > 0 and high > low and _finite(high)):
        return []
    first, last = math.ceil(math.log10(low)), math.floor(math.log10(high))
    decades = list(range(first, last + 1))
    if len(decades) >= 2:
        every = max(1, math.ceil(len(decades) / most))
        return [10.0**power for power in decades[::every]]
    candidates = [factor * 10.0**power for power in range(first - 1, last + 2) for factor in (1, 2, 5)]
    return [value for value in candidates if low <= value <= high][:most]


def _tick(value: float) -> str:
    """A round value as an axis shows it: 0.2, 1e-05, 2e+05 (an end of the range: as values are)."""
    text = f"{value:g}"
    return text if len(text) <= 8 else _format(value)


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
    title: str,
    axis: str,
    curves: list[tuple[str, list[tuple[float, float]], str]],
    width: int = 360,
    height: int = 170,
    wrap_legend: bool = False,
    controls: ChartControls | None = None,
    smooth_points: int = SMOOTH_POINTS,
    smoothed_runs: Collection[int] | None = None,
) -> str:
    """One chart: each curve (name, points, colour) over one x axis; its range, its latest values,
    what x is. Any numbers give coordinates inside the chart: values that are not finite (which a
    metrics cache on disk could hold) are left out. `wrap_legend`: the legend goes on as many
    lines as its entries need (a chart of many runs), the plot below it.

    With `controls` (see chart_controls.py) the chart is HTML: a bar of y scale and smoothing, a
    legend whose entries hide their run, and the SVG with every alternative drawn (the smoothed
    curves at `smooth_points` points at most each; only those of `smoothed_runs`, by place, if
    given), the default view shown."""
    left, right, top, bottom = 58, 10, 22, 32
    curves = [
        (name, [(x, y) for x, y in points if _finite(x) and _finite(y)], colour) for name, points, colour in curves
    ]
    if controls is not None:
        top = 10
    elif wrap_legend:
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
    if controls is not None:
        legend_svg = ""
    elif wrap_legend:
        legend_svg = "".join(
            f'<text class="jt-legend" x="{left}" y="{14 + LEGEND_LINE * index}">'
            f"{''.join(_legend_entry(*curve, gap=bool(at)) for at, curve in enumerate(row))}</text>"
            for index, row in enumerate(rows)
        )
    else:
        legend = "".join(
            f'<tspan class="jt-swatch" style="fill:{html.escape(colour)}">■</tspan>'
            f'<tspan class="jt-name"> {html.escape(name)}</tspan> '
            f"{_format(points[-1][1]) if points else 'no finite value'}  "
            for name, points, colour in curves
        )
        legend_svg = f'<text class="jt-legend" x="{left}" y="14">{legend}</text>'
    everything = [point for _, points, _ in curves for point in points]
    if not everything:
        return _with_controls(head + legend_svg + frame + "</svg>", curves, controls, False, width)
    xs = [x for x, _ in everything]
    ys = [y for _, y in everything]
    x0, x1 = min(xs), max(xs)
    logarithmic = uses_log_scale(ys)
    box = (left, top, plot_w, plot_h)
    x_axis = _x_ticks_svg(nice_ticks(x0, x1), (x0, x1), left, top, plot_w, plot_h)
    if controls is None:
        y_axis, lines = _layer(curves, logarithmic, axis, (x0, x1), ys, box)
        layers = y_axis + x_axis + lines
    else:  # both scales (log where every value is positive), the one the chart chose shown
        scales = [False, True] if min(ys) > 0 else [False]
        smoothed = [
            _smoothed(points, smooth_points) if smoothed_runs is None or index in smoothed_runs else []
            for index, (_, points, _) in enumerate(curves)
        ]
        layers = x_axis + "".join(
            f'<g class="jt-scale-{"log" if log else "lin"}"{"" if log == logarithmic else HIDDEN}>'
            + "".join(_layer(curves, log, axis, (x0, x1), ys, box, smoothed))
            + "</g>"
            for log in scales
        )
    svg = head + legend_svg + frame + layers + _hover_bands(curves, x0, x1, left, top, plot_w, plot_h, axis) + "</svg>"
    return _with_controls(svg, curves, controls, min(ys) > 0, width)


def _layer(
    curves, logarithmic: bool, axis: str, x_range, ys: list[float], box, smoothed: list | None = None
) -> tuple[str, str]:
    """What a y scale draws: its ticks and grid with the axis title, and the curves (with `smoothed`,
    each curve's points at each smoothing level after the first, drawn but not shown: see
    chart_controls.py)."""
    left, top, plot_w, plot_h = box
    x0, x1 = x_range
    scale = math.log10 if logarithmic else (lambda value: value)
    y0, y1 = (math.log10(min(ys)), math.log10(max(ys))) if logarithmic else _value_range(ys)

    def position(x: float, y: float) -> tuple[float, float]:
        return left + _fraction(x, x0, x1) * plot_w, top + (1 - _fraction(scale(y), y0, y1)) * plot_h

    def polyline(points, css: str, hidden: bool = False) -> str:
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in (position(x, y) for x, y in points))
        return f'<polyline class="{css}"{HIDDEN if hidden else ""} points="{path}"/>'

    lines = []
    for index, (name, points, colour) in enumerate(curves):
        if not points:
            continue
        levels = smoothed[index] if smoothed else []
        drawn = [polyline(points, "jt-line jt-raw jt-smoothed" if levels else "jt-line")]
        if len(points) == 1:  # a one-point line draws nothing: show the point
            px, py = position(*points[0])
            drawn.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" style="fill:{html.escape(colour)}"/>')
        drawn += [polyline(kept, f"jt-line jt-sm{level}", hidden=True) for level, kept in enumerate(levels, 1)]
        # the colour and the name (the tooltip over the line) once for the run's lines
        group = f'<g class="jt-run-{index}" style="stroke:{html.escape(colour)}"><title>{html.escape(name)}</title>'
        lines.append(group + "".join(drawn) + "</g>")
    ticks = log_ticks(min(ys), max(ys)) if logarithmic else nice_ticks(y0, y1)
    axis_title = AXIS_TITLES.get(axis, axis) + (" · log scale" if logarithmic else "")
    return (
        _y_ticks_svg(ticks, position, x0, (min(ys), max(ys)), left, plot_w)
        + f'<text class="jt-axis-title" x="{left + plot_w / 2:.0f}" y="{top + plot_h + 28}" text-anchor="middle">'
        f"{html.escape(axis_title)}</text>",
        "".join(lines),
    )


def _smoothed(points: list[tuple[float, float]], most: int) -> list[list[tuple[float, float]]]:
    """The curve at each smoothing level after the first (none for a curve of two points or fewer),
    at most `most` points each."""
    if len(points) <= 2:
        return []
    xs = [x for x, _ in points]
    return [_evenly(list(zip(xs, ema([y for _, y in points], weight))), most) for weight in SMOOTHING[1:]]


def _evenly(points: list[tuple[float, float]], most: int) -> list[tuple[float, float]]:
    """At most `most` of the points, evenly spaced in order, the first and the last kept (a smoothed
    curve has no spike to keep)."""
    if len(points) <= most:
        return points
    step = (len(points) - 1) / max(1, most - 1)
    return [points[round(index * step)] for index in range(most)]


def _with_controls(svg: str, curves, controls: ChartControls | None, log_possible: bool, width: int) -> str:
    """The chart alone, or with its control bar and a legend whose entries hide their run."""
    if controls is None:
        return svg
    keys = []
    for index, (name, points, colour) in enumerate(curves):
        latest = _format(points[-1][1]) if points else "no value"
        entry = (
            f'<span class="jt-swatch" style="color:{html.escape(colour)}">■</span> '
            f'<span class="jt-name">{html.escape(name)}</span> {latest}'
        )
        if index < controls.hideable:
            keys.append(
                f'<label class="jt-entry jt-entry-{index}" for="{controls.input_id(f"h{index}")}" '
                f'title="hide or show {html.escape(name)}">{entry}</label>'
            )
        else:
            keys.append(f'<span class="jt-entry">{entry}</span>')
    return (
        f'<div class="jt-plot jt-slot-{controls.slot}" style="width:{width}px">'
        + controls_html(controls, log_possible)
        + f'<div class="jt-legend jt-entries">{"".join(keys)}</div>'
        + svg
        + "</div>"
    )


def _y_ticks_svg(y_ticks, position, x0: float, y_range, left, plot_w) -> str:
    """Round values along the y axis, with faint grid lines across the plot; where it has fewer than
    two round values inside its range, its two ends instead."""
    parts = []
    if len(y_ticks) < 2:
        y_ticks = list(y_range)
    for value in y_ticks:
        _, py = position(x0, value)
        parts.append(f'<line class="jt-grid" x1="{left}" x2="{left + plot_w}" y1="{py:.1f}" y2="{py:.1f}"/>')
        parts.append(f'<text class="jt-tick" x="{left - 4}" y="{py + 3:.1f}" text-anchor="end">{_tick(value)}</text>')
    return "".join(parts)


def _x_ticks_svg(x_ticks, x_range, left, top, plot_w, plot_h) -> str:
    """The same along the x axis (which every scale of the y axis shares)."""
    parts = []
    if len(x_ticks) < 2:
        x_ticks = list(x_range)
    for value in x_ticks:
        px = left + _fraction(value, *x_range) * plot_w
        anchor = "start" if px <= left + 1 else "end" if px >= left + plot_w - 1 else "middle"
        parts.append(f'<line class="jt-grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{top + plot_h}"/>')
        parts.append(
            f'<text class="jt-tick" x="{px:.1f}" y="{top + plot_h + 12}" text-anchor="{anchor}">{_tick(value)}</text>'
        )
    return "".join(parts)


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


JOB_HIDEABLE = 4  # curves of a job's chart (a metric and its twins) whose legend entry hides them


def job_chart_controls(prefix: str) -> list[ChartControls]:
    """The controls of a job view's charts, one per place (see chart_controls.py)."""
    return [ChartControls(prefix, slot, JOB_HIDEABLE) for slot in range(MAX_CHARTS)]


def charts_html(
    series: MetricSeries, groups: list[tuple[str, str, list[str]]] | None = None, prefix: str | None = None
) -> str:
    """The charts of `groups` (by default those chosen_groups gives); with `prefix`, with the
    controls of job_chart_controls(prefix)."""
    if not series:
        return ""
    if groups is None:
        groups = chosen_groups(series)
    controls = job_chart_controls(prefix) if prefix else [None] * len(groups)
    charts = [
        chart_svg(
            title,
            axis,
            [(name, series.curve(name), PALETTE[index % len(PALETTE)]) for index, name in enumerate(names)],
            controls=each,
        )
        for (title, axis, names), each in zip(groups, controls)
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
    points = " ".join(
        f"{index * step:.1f},{height - 1 - (height - 2) * max(0.0, value) / highest:.1f}" for index, value in known
    )
    return (
        f'<svg class="jt-spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" aria-hidden="true">'
        f'<polyline points="{points}" fill="none" stroke="currentColor" stroke-width="1.2"/></svg>'
    )
