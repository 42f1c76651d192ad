"""A job's view as HTML: the header (status, clocks, what it uses), the log, the charts, the copy
saved in the notebook, and the style they share. Whatever a job wrote is escaped here."""

from __future__ import annotations

import dataclasses
import html
import json
import time

from ..core.record import Status, format_duration
from ..core.resources import describe as describe_usage
from ..metrics.names import AXIS_TITLES
from .chart_controls import HOST, state_html
from .charts import chart_groups, charts_html, chosen_groups, job_chart_controls, sparkline_svg
from .fields import (
    ASKING,
    CLOCK,
    CLOCKS,
    FACT,
    HEADER,
    NAME,
    OUTCOME,
    PROGRESS,
    QUIET,
    STATUS,
    USAGE,
    Field,
    clock_fields,
    shown_in,
)
from .monitor import Snapshot

LOG_CHARS = 128 * 1024  # of the log's last lines the view shows (long lines could make megabytes)
SAVED_LOG_CHARS = 32 * 1024  # and the saved view (see SAVED_LINES)
CHOOSER_DEFAULT = "loss-like, then the latest"  # the chart chooser's first option: the view's own choice
SAVED_LINES = 40  # log lines the saved view keeps (it is written into the notebook file)
# a bell drawn in the text's colour: an emoji's glyph is missing where no emoji font is installed
BELL = (
    '<svg width="10" height="10" viewBox="0 0 16 16" fill="currentColor" aria-hidden="true" '
    'style="vertical-align: -1px">'
    '<path d="M8 16a2 2 0 0 0 2-2H6a2 2 0 0 0 2 2zm5-5V7a5 5 0 0 0-4-4.9V1a1 1 0 0 0-2 0v1.1'
    'A5 5 0 0 0 3 7v4l-1.5 1.5V13h13v-.5z"/></svg>'
)
ERROR_CHARS = 300  # an error line is cut to this many characters


# Badge colours, each with white text at WCAG AA contrast (4.5:1 or more) on any theme.
STATUS_COLOURS = {
    Status.PENDING: "#5c636a",
    Status.RUNNING: "#0b5ed7",
    Status.COMPLETED: "#146c43",
    Status.FAILED: "#b02a37",
    Status.STOPPED: "#9a4a00",
    Status.LOST: "#6f42c1",
}
# What the view's final colour is, in ipywidgets' bar_style words.
BAR_STYLES = {Status.COMPLETED: "success", Status.FAILED: "danger", Status.STOPPED: "warning", Status.LOST: "danger"}

# The view's colours come from the frontend's theme: JupyterLab's and Notebook 7's CSS variables, then
# VS Code's, then light defaults. A text and the background it sits on come from the same family, so
# the two always belong to one theme. Sent once per view, not with every update.
STYLE = """<style>
.jupyter-trainer-job {
  --jt-fg: var(--jp-ui-font-color1, var(--vscode-foreground, #1f2328));
  --jt-muted: var(--jp-ui-font-color2, var(--vscode-descriptionForeground, #57606a));
  --jt-border: var(--jp-border-color1, var(--vscode-panel-border, #d0d7de));
  --jt-log-bg: var(--jp-cell-editor-background, var(--vscode-editor-background, #f6f8fa));
  --jt-log-fg: var(--jp-content-font-color1, var(--vscode-editor-foreground, #1f2328));
  --jt-error: var(--jp-error-color1, var(--vscode-errorForeground, #b00020));
  --jt-warn-bg: var(--jp-warn-color3, #fff3cd);
  --jt-warn-fg: var(--jp-ui-font-color0, #3d2c00);
  color: var(--jt-fg);
  border: 1px solid var(--jt-border);
}
.jupyter-trainer-job .jt-header { display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: center;
  color: var(--jt-fg); }
.jupyter-trainer-job .jt-clocks { display: flex; gap: 4px 12px; align-items: center; color: var(--jt-fg);
  margin-right: 8px; }
.jupyter-trainer-job .jt-name { font-size: 1.1em; font-weight: bold; }
.jupyter-trainer-job .jt-status { color: #fff; border-radius: 4px; padding: 1px 8px; }
.jupyter-trainer-job .jt-muted, .jupyter-trainer-job .jt-reading, .jupyter-trainer-job .jt-asking {
  color: var(--jt-muted); }
.jupyter-trainer-job .jt-status-words { color: var(--jt-muted); white-space: normal; }
.jupyter-trainer-job .jt-usage { color: var(--jt-muted); white-space: nowrap; }
.jupyter-trainer-job .jt-spark { vertical-align: middle; }
.jupyter-trainer-job .jt-reading { font-size: 11px; }
.jupyter-trainer-job .jt-quiet { color: var(--jt-warn-fg); background: var(--jt-warn-bg); border-radius: 4px;
  padding: 0 6px; }
.jupyter-trainer-job .jt-error { color: var(--jt-error); }
.jupyter-trainer-job .jt-exception { font-family: var(--jp-code-font-family, monospace); }
.jupyter-trainer-job .jt-facts { color: var(--jt-muted); font-size: 12px; }
.jupyter-trainer-job .jt-log-pane { display: flex; flex-direction: column-reverse; max-height: 320px; overflow-y: auto;
  background: var(--jt-log-bg); border: 1px solid var(--jt-border); }
.jupyter-trainer-job .jt-log { flex: none; overflow: visible; margin: 0; padding: 6px; font-size: 12px;
  line-height: 1.35; white-space: pre-wrap; color: var(--jt-log-fg); background: transparent;
  font-family: var(--jp-code-font-family, monospace); }
.jupyter-trainer-job .jt-charts { display: flex; flex-wrap: wrap; gap: 8px; }
.jupyter-trainer-job .jt-more { color: var(--jt-muted); font-size: 12px; margin: 2px 0; }
.jupyter-trainer-job .jt-chart text { fill: var(--jt-fg); font-family: var(--jp-ui-font-family, sans-serif);
  font-size: 10px; }
.jupyter-trainer-job .jt-chart .jt-legend { font-size: 12px; }
.jupyter-trainer-job .jt-chart .jt-name { font-weight: bold; }
.jupyter-trainer-job .jt-chart .jt-tick, .jupyter-trainer-job .jt-chart .jt-axis-title { fill: var(--jt-muted); }
.jupyter-trainer-job .jt-chart .jt-frame { fill: none; stroke: var(--jt-border); }
.jupyter-trainer-job .jt-chart .jt-grid { stroke: var(--jt-border); stroke-width: 0.5; opacity: 0.7; }
.jupyter-trainer-job .jt-chart .jt-line { fill: none; stroke-width: 1.6; }
.jupyter-trainer-job .jt-chart .jt-hover { fill: transparent; }
.jupyter-trainer-job .jt-chart .jt-hover:hover { fill: var(--jt-border); fill-opacity: 0.35; }
.jupyter-trainer-job .jt-plot { flex: none; }
.jupyter-trainer-job .jt-chart-controls, .jupyter-trainer-job .jt-entries {
  line-height: 1.6; }  /* not a widget's 28px lines */
.jupyter-trainer-job .jt-chart-controls { gap: 2px 12px; flex-wrap: wrap; align-items: center; margin: 2px 0 2px 16px;
  font-size: 11px; color: var(--jt-muted); font-family: var(--jp-ui-font-family, sans-serif); }
@supports selector(:has(*)) { .jupyter-trainer-job .jt-chart-controls[hidden] { display: flex; } }
.jupyter-trainer-job .jt-pick { padding: 0 6px; margin-left: 3px; border: 1px solid var(--jt-border);
  border-radius: 3px; cursor: pointer; user-select: none; color: var(--jt-muted); }
.jupyter-trainer-job .jt-pick:hover { color: var(--jt-fg); }
.jupyter-trainer-job .jt-entries { display: flex; flex-wrap: wrap; gap: 0 14px; margin-left: 58px; font-size: 12px;
  color: var(--jt-fg); font-family: var(--jp-ui-font-family, sans-serif); }
.jupyter-trainer-job .jt-entries .jt-name { font-size: inherit; font-weight: bold; }
.jupyter-trainer-job .jt-entry { white-space: nowrap; }
.jupyter-trainer-job label.jt-entry { cursor: pointer; user-select: none; }
.jupyter-trainer-job label.jt-entry:hover .jt-name { text-decoration: underline; }
.jupyter-trainer-job .jt-disconnected { display: none; }
.jupyter-trainer-job.jupyter-widgets-disconnected .jt-disconnected { display: block; color: var(--jt-warn-fg);
  background: var(--jt-warn-bg); padding: 2px 6px; border-radius: 4px; }
.jupyter-trainer-job.jupyter-widgets-disconnected .jt-stop { opacity: 0.4; pointer-events: none; }
.jupyter-trainer-job.jupyter-widgets-disconnected .jt-status { filter: grayscale(1); opacity: 0.6; }
.jupyter-trainer-job.jupyter-widgets-disconnected::before,
.jupyter-trainer-job .jupyter-widgets-disconnected::before { content: none; }  /* the notice says it once */
.jupyter-trainer-job .jt-saved-note { color: var(--jt-warn-fg); background: var(--jt-warn-bg); padding: 2px 6px;
  border-radius: 4px; margin: 4px 0; }
.jupyter-trainer-job.jt-saved .jt-disconnected, .jupyter-trainer-job.jt-saved .jt-bell { display: none; }
.jupyter-trainer-job .jt-bell { font-size: 11px; padding: 0 6px; border: 1px solid var(--jt-border); border-radius: 4px;
  background: transparent; color: var(--jt-muted); cursor: pointer; }
body:not([data-jt-notify="default"]) .jupyter-trainer-job .jt-bell { display: none; }
</style>"""


# -- a snapshot as HTML: everything a job controls is escaped -------------------------------


def header_html(snapshot: Snapshot, clocks: bool = True) -> str:
    """The header: the fields shown there (fields.py), each drawn by its kind, and under it what the
    runtime says of the job besides. `clocks`: with the fields that move with the clock alone (a
    live view draws those in an element of their own: see clocks_html)."""
    parts, facts = [], []
    usage = iter(usage_html(snapshot))  # drawn with their sparklines, in the fields' order
    for field in shown_in(HEADER, snapshot):
        if field.kind in CLOCKS and not clocks:
            continue
        if field.kind == FACT:
            facts.append(f"<span>{html.escape(field.text)}</span>")
        elif field.kind == USAGE:
            parts.append(next(usage, ""))
        else:
            parts.append(field_html(field, snapshot))
    if not snapshot.status.is_final:  # the browser can say when it ends (see notification_script)
        parts.append(
            '<button class="jt-bell" title="a browser notification when the job ends (while this page is open)">'
            f"{BELL} notify me</button>"
        )
    return (
        '<div class="jt-header">'
        + "".join(parts)
        + "</div>"
        + (f'<div class="jt-header jt-facts">{"".join(facts)}</div>' if facts else "")
        + f'<div class="jt-disconnected">{html.escape(disconnected_text(snapshot.name))}</div>'
    )


def field_html(field: Field, snapshot: Snapshot) -> str:
    """One field as a span, drawn by its kind; its text escaped."""
    text = html.escape(field.text)
    if field.kind == NAME:
        return f'<span class="jt-name">{text}</span>'
    if field.kind == STATUS:
        return status_badge(snapshot.status, field.text, field.title)
    if field.kind in (ASKING, QUIET, PROGRESS, CLOCK):
        return f'<span class="jt-{field.kind}">{text}</span>'
    if field.kind == OUTCOME:
        return f'<span class="{"jt-exit" if snapshot.exit_code is not None else "jt-reason"}">{text}</span>'
    return f"<span>{text}</span>"


def status_badge(status: Status, shown: str, title: str = "") -> str:
    """The status in its colour (`shown`: as the fields word it), its reason on hover; what the
    words say after a " · " (what a job waits for, a sweep's progress) beside the badge, in the
    muted colour, free to wrap."""
    hover = f' title="{html.escape(title)}"' if title else ""
    badge, _, more = shown.partition(" · ")
    beside = f' <span class="jt-status-words">{html.escape(more)}</span>' if more else ""
    return (
        f'<span class="jt-status" style="background:{STATUS_COLOURS[status]}"{hover}>'
        f"{html.escape(badge)}</span>{beside}"
    )


def clocks_html(elapsed: float | None, quiet_for: float | None) -> str:
    """The fields that move with the clock alone, in their own element of a live view's header."""
    shown = [field for field in clock_fields(elapsed, quiet_for) if field is not None]
    return (
        '<div class="jt-clocks">'
        + "".join(f'<span class="jt-{field.kind}">{html.escape(field.text)}</span>' for field in shown)
        + "</div>"
    )


# What usage_html drew last for each reading (by its id, with the reading and its series to tell a
# reused id): a view draws its header with every update, and a reading comes every few seconds.
_drawn_usage: dict[int, tuple[object, dict, list[str]]] = {}
DRAWN_USAGE_KEPT = 256


def usage_html(snapshot: Snapshot) -> list[str]:
    """CPU, memory and each GPU: the latest reading and a sparkline of the recent ones."""
    usage = snapshot.usage
    if usage is None:
        return []
    drawn = _drawn_usage.get(id(usage))
    if drawn is not None and drawn[0] is usage and drawn[1] is snapshot.usage_series:
        return list(drawn[2])
    parts = _usage_parts(usage, snapshot.usage_series)
    if len(_drawn_usage) >= DRAWN_USAGE_KEPT:
        _drawn_usage.clear()
    _drawn_usage[id(usage)] = (usage, snapshot.usage_series, parts)
    return list(parts)


def _usage_parts(usage, series: dict) -> list[str]:
    tops = {"cpu": 100.0, "memory": None}  # memory's line spans its own range: against the limit it is flat
    parts = []
    for what, words in describe_usage(usage).items():
        line = sparkline_svg(series.get(what, []), tops.get(what, 100.0))
        title = f"{what} of the {usage.scope}" + (" (100% = one core)" if what == "cpu" else "")
        parts.append(
            f'<span class="jt-usage" title="{html.escape(title)}">'
            f"{html.escape(what.upper() if what == 'cpu' else what)} {html.escape(words)} {line}</span>"
        )
    return parts


def disconnected_text(name: str) -> str:
    return (
        f"Disconnected: the kernel that showed this view has stopped, so it no longer changes; the job "
        f"itself goes on. To follow it again, run %load_ext jupyter_trainer and %train_attach {name}."
    )


def log_html(snapshot: Snapshot, limit: int = LOG_CHARS) -> str:
    """The log's last lines, as many as fit in `limit` characters."""
    text = html.escape("\n".join(_last_lines(snapshot.lines, limit))) or '<span class="jt-muted">(no output yet)</span>'
    # column-reverse keeps the box scrolled to its newest line as lines arrive
    return f'<div class="jt-log-pane"><pre class="jt-log">{text}</pre></div>'


def _last_lines(lines: tuple[str, ...], limit: int) -> list[str]:
    """The last lines that fit in `limit` characters (at least the end of the last one)."""
    kept: list[str] = []
    for line in reversed(lines):
        limit -= len(line) + 1
        if limit < 0:
            if not kept:
                kept.append("…" + line[limit - 1 :])
            break
        kept.append(line)
    return kept[::-1]


def plot_html(snapshot: Snapshot, prefix: str | None = None) -> str:
    """The notes, a few charts (see chosen_groups) and how many metrics are not drawn: bounded
    whatever the log holds. `prefix`: the charts have the controls whose state is
    state_html(job_chart_controls(prefix))."""
    notes = "".join(f'<div class="jt-reading">{html.escape(note)}</div>' for note in snapshot.notes)
    groups = chosen_groups(snapshot.metrics)
    drawn = sum(len(names) for _, _, names in groups)
    return notes + charts_html(snapshot.metrics, groups, prefix) + more_metrics_html(snapshot, drawn)


def more_metrics_html(snapshot: Snapshot, drawn: int) -> str:
    """A line that says how many metrics are not drawn and where to see them all, if any are not."""
    count, exact = snapshot.metrics.name_count()
    more = count - drawn
    if more <= 0:
        return ""
    number = f"{more:,}" if exact else f"about {_rounded(more):,}"
    text = (
        f"{number} more metric{'s' * (more != 1)} not drawn: jupyter-trainer metrics {snapshot.name} "
        f"(or job.metrics() in Python) gives every value of each"
    )
    return f'<div class="jt-more">{html.escape(text)}</div>'


def _rounded(count: int) -> int:
    """An estimate to the digits it has: three."""
    digits = max(0, len(str(count)) - 3)
    return round(count, -digits) if digits else count


def chooser_options(snapshot: Snapshot) -> list[tuple[str, tuple[str, str] | None]]:
    """What the chart chooser offers: the charts of the metrics the view keeps, by name."""
    groups = chart_groups(snapshot.metrics)
    titles = [title for title, _, _ in groups]
    options = []
    for title, axis, names in groups:
        label = ", ".join(names)
        if titles.count(title) > 1:  # the same metrics by another x
            label += f" (by {AXIS_TITLES.get(axis, axis)})"
        options.append((label, (title, axis)))
    return [(CHOOSER_DEFAULT, None), *sorted(options)]


def saved_view_html(snapshot: Snapshot, view_id: str, saved_at: float) -> str:
    """The view as a notebook keeps it: shown when no kernel shows the live one (the notebook
    opened another day, the kernel gone), with how to bring it back. While the live view is on
    the page, its stylesheet hides this copy; when the live one cannot be drawn ("model not
    found"), this copy's stylesheet hides that message instead."""
    shown = dataclasses.replace(snapshot, lines=snapshot.lines[-SAVED_LINES:], quiet_for=None, progress=None, asking="")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(saved_at))
    ended = snapshot.status.is_final
    how = (
        f"Saved {when}, when the job had ended. Run this cell again (it attaches to the job and never starts it "
        f"twice) or %train_attach {snapshot.name} to see it live; jupyter-trainer metrics {snapshot.name} "
        "gives its curves."
        if ended
        else f"Saved {when}: no kernel shows this job live now, and it may have gone on since. Run this cell again "
        f"(it attaches to the job and never starts it twice) or %train_attach {snapshot.name} to follow it live."
    )
    hide_dead_widget = (
        f".jp-OutputArea-child:has(+ .jp-OutputArea-child .jt-saved-{view_id}):not(:has(.jupyter-trainer-job)) "
        "{ display: none; }"
    )
    prefix = f"jt{view_id}s"  # the live view's charts are on the page too: ids of its own
    return (
        STYLE + f"<style>{hide_dead_widget}</style>"
        f'<div class="jupyter-trainer-job jt-saved jt-saved-{view_id} {HOST}" style="padding:6px">'
        + state_html(job_chart_controls(prefix))
        + header_html(shown)
        + f'<div class="jt-saved-note">{html.escape(how)}</div>'
        + plot_html(shown, prefix)
        + log_html(shown, SAVED_LOG_CHARS)
        + "</div>"
        + notification_script(snapshot)
    )


# Run by the frontend each time the saved copy is drawn (a trusted output's script): it makes the
# views' bells ask the browser for permission, and when a job this page saw running has ended,
# shows one browser notification (once per job run and browser; a notebook reopened later, whose
# jobs ended meanwhile, shows none).
NOTIFICATION_SCRIPT = """<script>(function (job) {
  if (!("Notification" in window)) { return; }
  document.body.dataset.jtNotify = Notification.permission;
  if (!window.__jupyterTrainerBell) {
    window.__jupyterTrainerBell = true;
    document.addEventListener("click", function (event) {
      if (event.target && event.target.closest && event.target.closest(".jt-bell")) {
        Notification.requestPermission().then(function (answer) { document.body.dataset.jtNotify = answer; });
      }
    });
  }
  var running = window.__jupyterTrainerRunning || (window.__jupyterTrainerRunning = {});
  var id = job.name + ":" + job.run;
  if (!job.ended_at) { running[id] = true; return; }
  if (!running[id]) { return; }  /* it ended before this page saw it run: nothing new to tell */
  delete running[id];
  if (Notification.permission !== "granted") { return; }
  var key = "jupyter-trainer-notified:" + id + ":" + job.ended_at;
  try { if (localStorage.getItem(key)) { return; } localStorage.setItem(key, "1"); } catch (error) { return; }
  new Notification(job.title, { body: job.body, tag: key });
})(%s);</script>"""


def notification_script(snapshot: Snapshot) -> str:
    job = {
        "name": snapshot.name,
        "run": snapshot.run,
        "ended_at": snapshot.ended_at if snapshot.status.is_final else None,
        "title": f"{snapshot.name} {snapshot.status.value}",
        "body": snapshot.outcome or f"after {format_duration(snapshot.elapsed)}",
    }
    # inside a script element only "</" could end it early: written as its JSON escape
    return NOTIFICATION_SCRIPT % json.dumps(job).replace("<", "\\u003c")


def describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}"


def error_html(text: str) -> str:
    """One line of error under the header. The text may quote what a job wrote (its record, its
    run files, a runtime's message about it), so it is escaped: shown, never interpreted."""
    line = " ".join(text.split())
    if len(line) > ERROR_CHARS:
        line = line[: ERROR_CHARS - 1] + "…"
    return f'<div class="jt-error">{html.escape(line)}</div>'
