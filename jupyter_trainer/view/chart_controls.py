"""A chart's controls without a script: smoothing, a linear or log y axis, and hiding a run from its
legend, as TensorBoard's and W&B's charts offer them.

Every alternative is drawn in advance (each curve at each smoothing level, the axis at both
scales) and CSS shows the one chosen. The choice is the state of hidden radio buttons and
checkboxes (`state_html`), which the chart's labels (`for=` their ids) toggle; a rule on the
element holding both (`HOST`, with `:has()`) shows and hides. A live view keeps those inputs in an
element it never redraws, so a choice outlives the updates that redraw the chart; a static copy
(a view saved in the notebook) holds them beside its charts.

What is drawn without the stylesheet, or where `:has()` is missing, is the default view: the
scale the chart chose, no smoothing, every run; the control bar is `hidden` there (an attribute
that JupyterLab's sanitizer keeps), so no control that does nothing is shown.
"""

from __future__ import annotations

import dataclasses
import html
import secrets

SMOOTHING = (0.0, 0.6, 0.9)  # the levels offered, as TensorBoard's slider's weight; the first is the default
HOST = "jt-chart-host"  # the class of the element that holds a chart's state and the chart
STATE = "jt-chart-state"  # the class of the state's element, a child of the host
SCALES = ("auto", "lin", "log")


@dataclasses.dataclass(frozen=True)
class ChartControls:
    """Where a chart's state is: its ids start with `prefix` (one per view, unique on the page),
    `slot` tells the view's charts apart, `hideable` runs (the first ones) have a hide control."""

    prefix: str
    slot: int = 0
    hideable: int = 0

    def input_id(self, what: str) -> str:
        return f"{self.prefix}-k{self.slot}-{what}"

    def input_class(self, what: str) -> str:
        return f"jt-k{self.slot}-{what}"


def new_prefix() -> str:
    """Ids for one view's charts: several views (and their saved copies) share one page."""
    return "jt" + secrets.token_hex(5)


def ema(values: list[float], weight: float) -> list[float]:
    """Exponential moving average as TensorBoard smooths: each value is `weight` of the one before
    and the rest of the new one, debiased so that the first values are not pulled towards zero."""
    if weight <= 0:
        return list(values)
    smoothed, last, count = [], 0.0, 0
    for value in values:
        count += 1
        last = last * weight + (1 - weight) * value
        smoothed.append(last / (1 - weight**count))
    return smoothed


def _inputs(controls: ChartControls) -> str:
    """The radio buttons and checkboxes that hold one chart's choices."""

    def one(kind: str, what: str, group: str = "", checked: bool = False) -> str:
        name = f' name="{controls.input_id(group)}"' if group else ""
        return (
            f'<input type="{kind}" id="{controls.input_id(what)}" class="{controls.input_class(what)}"{name}'
            f'{" checked" if checked else ""} tabindex="-1">'
        )

    parts = [one("radio", f"y{scale}", "y", scale == "auto") for scale in SCALES]
    parts += [one("radio", f"s{level}", "s", level == 0) for level in range(len(SMOOTHING))]
    parts += [one("checkbox", f"h{index}") for index in range(controls.hideable)]
    return "".join(parts)


def _rules(controls: ChartControls) -> str:
    """What each choice shows and hides in its chart."""
    chart = f".jt-slot-{controls.slot}"

    def when(what: str) -> str:
        return f".{HOST}:has(> .{STATE} .{controls.input_class(what)}:checked) {chart}"

    rules = []
    picked = [f"{when(f'y{scale}')} .jt-pick-y{scale}" for scale in SCALES] + [
        f"{when(f's{level}')} .jt-pick-s{level}" for level in range(len(SMOOTHING))
    ]
    rules.append(", ".join(picked) + " { background: var(--jt-border); color: var(--jt-fg); }")
    rules.append(f"{when('ylin')} .jt-scale-log, {when('ylog')} .jt-scale-lin {{ display: none; }}")
    rules.append(f"{when('ylin')} .jt-scale-lin, {when('ylog')} .jt-scale-log {{ display: inline; }}")
    for level in range(1, len(SMOOTHING)):
        rules.append(f"{when(f's{level}')} .jt-sm{level} {{ display: inline; }}")
    faint = ", ".join(f"{when(f's{level}')} .jt-raw.jt-smoothed" for level in range(1, len(SMOOTHING)))
    rules.append(f"{faint} {{ stroke-opacity: 0.35; stroke-width: 1.2; }}")
    for index in range(controls.hideable):
        rules.append(f"{when(f'h{index}')} .jt-run-{index} {{ display: none; }}")
        rules.append(f"{when(f'h{index}')} .jt-entry-{index} {{ opacity: 0.45; text-decoration: line-through; }}")
    return " ".join(rules)


def state_html(charts: list[ChartControls]) -> str:
    """The choices of these charts, and the rules that apply them: to be put, once, in a child of the
    element (`HOST`) that holds the charts. Hidden: the labels on the charts are what is clicked."""
    # one line: the saved copy's lines are few
    style = "<style>" + " ".join(_rules(controls) for controls in charts) + "</style>"
    return style + f'<div class="{STATE}" hidden>' + "".join(_inputs(controls) for controls in charts) + "</div>"


def controls_html(controls: ChartControls, log_possible: bool) -> str:
    """The bar above a chart: y scale (auto, linear, log: log only where every value is positive) and
    smoothing. `hidden` until the stylesheet (STYLE) shows it where `:has()` works."""

    def pick(what: str, text: str, hint: str) -> str:
        return (
            f'<label class="jt-pick jt-pick-{what}" for="{controls.input_id(what)}" title="{html.escape(hint)}">'
            f"{html.escape(text)}</label>"
        )

    scales = [
        pick("yauto", "auto", "the y axis as the chart chooses it: log when the values span more than two decades")
    ]
    scales.append(pick("ylin", "linear", "a linear y axis"))
    if log_possible:
        scales.append(pick("ylog", "log", "a logarithmic y axis"))
    levels = [
        pick(
            f"s{level}",
            "off" if weight == 0 else f"{weight:g}",
            "no smoothing"
            if weight == 0
            else f"exponential moving average, weight {weight:g} (the raw curve faint behind)",
        )
        for level, weight in enumerate(SMOOTHING)
    ]
    return (
        '<div class="jt-chart-controls" hidden>'
        f'<span class="jt-picks"><span class="jt-pick-title">y</span>{"".join(scales)}</span>'
        f'<span class="jt-picks"><span class="jt-pick-title">smoothing</span>{"".join(levels)}</span>'
        "</div>"
    )
