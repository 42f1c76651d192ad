"""The charts' axes: round values (1, 2 or 5 times a power of ten apart) with grid lines, as
TensorBoard's and W&B's charts mark theirs, rather than only each axis's lowest and highest value."""

import re

import pytest

from jupyter_trainer.view.charts import chart_svg, log_ticks, nice_ticks


def test_round_ticks_inside_the_range():
    assert nice_ticks(0.2101, 1.977) == [0.5, 1.0, 1.5]
    assert nice_ticks(0, 1000) == [0, 200, 400, 600, 800, 1000]
    assert nice_ticks(-3, 3) == [-2, 0, 2]
    assert nice_ticks(1.0, 1.0) == [] and nice_ticks(float("nan"), 1) == [] and nice_ticks(-1e308, 1e308) == []


def test_log_ticks_are_decades_or_one_two_five():
    assert log_ticks(1e-5, 1e-1) == [1e-5, 1e-4, 1e-3, 1e-2, 1e-1]
    assert log_ticks(0.3, 4) == [0.5, 1, 2]
    assert log_ticks(1e-30, 1e30)[0] == 1e-30 and len(log_ticks(1e-30, 1e30)) <= 7
    assert log_ticks(0, 1) == [] and log_ticks(-1, 1) == []


def test_a_chart_labels_round_values_and_draws_their_grid():
    points = [(float(step), 2.0 - step / 100) for step in range(0, 178)]  # from 2.0 down to 0.23
    svg = chart_svg("loss", "step", [("loss", points, "#3b82f6")])
    labels = re.findall(r'<text class="jt-tick"[^>]*>([^<]*)</text>', svg)
    assert labels == ["0.5", "1", "1.5", "2", "0", "50", "100", "150"]
    assert svg.count('class="jt-grid"') == len(labels)


# -- the controls: smoothing, y scale, a legend that hides a run (chart_controls.py) -------------

from jupyter_trainer.view.chart_controls import ChartControls, ema, new_prefix, state_html  # noqa: E402

RUNS = [
    ("lr-0.1", [(float(step), 1 + 2 * (step % 2) + 40 * (step == 9)) for step in range(10)], "#3b82f6"),  # 1, 3, 1, 3 ... 43
    ("lr-0.01", [(float(step), 2.0 + step) for step in range(10)], "#ef4444"),
]


def _group(markup: str, css: str) -> str:
    """The SVG group of that class (groups of one scale hold no other group but the runs')."""
    start = markup.index(f'<g class="{css}"')
    return markup[start : markup.index("</g></g>", start) + 8]


def _points(polyline: str) -> list[tuple[float, float]]:
    return [tuple(map(float, pair.split(","))) for pair in re.search(r'points="([^"]*)"', polyline)[1].split()]


def test_the_exponential_moving_average_is_tensorboards_debiased_one():
    assert ema([1.0, 3.0, 1.0], 0.0) == [1.0, 3.0, 1.0]
    first, second, third = ema([1.0, 3.0, 1.0], 0.6)
    assert first == pytest.approx(1.0)  # debiased: not pulled towards zero
    assert second == pytest.approx((0.4 * 0.6 + 0.4 * 3) / (1 - 0.36))
    assert third == pytest.approx(((0.4 * 0.6 + 0.4 * 3) * 0.6 + 0.4) / (1 - 0.216))


def test_a_chart_with_controls_has_a_label_for_each_choice_and_its_input():
    controls = ChartControls("jtone", 0, hideable=2)
    chart = chart_svg("loss", "step", RUNS, 640, 260, wrap_legend=True, controls=controls)
    state = state_html([controls])
    labels = re.findall(r'<label class="([^"]*)" for="([^"]*)"', chart)
    targets = [target for _, target in labels]
    ids = re.findall(r'<input type="(?:radio|checkbox)" id="([^"]*)"', state)
    assert set(targets) <= set(ids) and len(ids) == len(set(ids))
    for what in ("yauto", "ylin", "ylog", "s0", "s1", "s2", "h0", "h1"):
        assert f"jtone-k0-{what}" in targets, what
    # the default choices are checked: the chart as it is drawn without any rule
    assert re.findall(r'id="([^"]*)"[^>]* checked', state) == ["jtone-k0-yauto", "jtone-k0-s0"]
    # where no rule shows them, the controls and the inputs are not shown at all
    assert '<div class="jt-chart-controls" hidden>' in chart and '<div class="jt-chart-state" hidden>' in state


def test_ids_differ_between_two_views_and_their_labels_point_at_their_own():
    first, second = ChartControls(new_prefix(), 0, 2), ChartControls(new_prefix(), 0, 2)
    page = "".join(state_html([each]) + chart_svg("loss", "step", RUNS, controls=each) for each in (first, second))
    ids = re.findall(r' id="([^"]*)"', page)
    assert len(ids) == 2 * 8 and len(set(ids)) == len(ids)
    radio_groups = re.findall(r'type="radio" id="[^"]*" class="[^"]*" name="([^"]*)"', page)
    assert len(set(radio_groups)) == 4  # a scale and a smoothing group each: one never unchecks the other's
    second_chart = chart_svg("loss", "step", RUNS, controls=second)
    assert all(target.startswith(second.prefix + "-") for target in re.findall(r' for="([^"]*)"', second_chart))


def test_the_smoothed_line_is_the_moving_average_of_the_raw_one_and_hidden_by_default():
    chart = chart_svg("loss", "step", RUNS, 640, 260, wrap_legend=True, controls=ChartControls("jt", 0, 2))
    frame = re.search(r'<rect class="jt-frame" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', chart)
    top, height = float(frame[2]), float(frame[4])
    linear = _group(chart, "jt-scale-lin")
    run = linear[linear.index('<g class="jt-run-0"') :]
    raw = re.search(r'<polyline class="jt-line jt-raw jt-smoothed" points="[^"]*"/>', run)[0]
    light = re.search(r'<polyline class="jt-line jt-sm1" display="none" points="[^"]*"/>', run)[0]
    heavy = re.search(r'<polyline class="jt-line jt-sm2" display="none" points="[^"]*"/>', run)[0]
    low, high = 1.0, 43.0  # every value of both runs

    def values(polyline):
        return [high - (y - top) / height * (high - low) for _, y in _points(polyline)]

    raw_values = [y for _, y in RUNS[0][1]]
    assert values(raw) == pytest.approx(raw_values, abs=0.2)
    assert values(light) == pytest.approx(ema(raw_values, 0.6), abs=0.2)
    assert values(heavy) == pytest.approx(ema(raw_values, 0.9), abs=0.2)
    assert values(light) != pytest.approx(raw_values, abs=0.5)


def test_the_other_scale_is_drawn_hidden_with_decade_ticks():
    chart = chart_svg("loss", "step", RUNS, 640, 260, controls=ChartControls("jt", 0, 2))
    linear, log = _group(chart, "jt-scale-lin"), _group(chart, "jt-scale-log")
    assert linear.startswith('<g class="jt-scale-lin">') and log.startswith('<g class="jt-scale-log" display="none">')
    tick = r'<text class="jt-tick"[^>]*>([^<]*)</text>'
    assert re.findall(tick, log) == ["1", "10"] and "log scale" in log
    assert re.findall(tick, linear) == ["10", "20", "30", "40"]
    # values over many decades: log is the chart's own choice, linear the hidden one
    spread = [("loss", [(float(step), 10.0**-step) for step in range(6)], "#3b82f6")]
    chart = chart_svg("loss", "step", spread, controls=ChartControls("jt", 0, 1))
    assert '<g class="jt-scale-log">' in chart and '<g class="jt-scale-lin" display="none">' in chart
    # no log scale for values that are not all positive, and no control for it
    signed = [("delta", [(0.0, -1.0), (1.0, 2.0), (2.0, 5.0)], "#3b82f6")]
    chart = chart_svg("delta", "step", signed, controls=ChartControls("jt", 0, 1))
    assert "jt-scale-log" not in chart and "jt-pick-ylog" not in chart and "jt-pick-ylin" in chart


def test_a_legend_entry_hides_its_own_run():
    controls = ChartControls("jt", 0, hideable=2)
    chart = chart_svg("loss", "step", RUNS, 640, 260, wrap_legend=True, controls=controls)
    rules = state_html([controls])
    for index, (name, _, _) in enumerate(RUNS):
        label = re.search(rf'<label class="jt-entry jt-entry-{index}" for="([^"]*)"[^>]*>(.*?)</label>', chart)
        assert label[1] == f"jt-k0-h{index}" and f">{name}<" in label[2]
        # the rule for that checkbox hides the groups of that run's lines, named as the run
        assert re.search(rf":has\(> \.jt-chart-state \.jt-k0-h{index}:checked\) \.jt-slot-0 \.jt-run-{index} {{ display: none; }}", rules)
        groups = re.findall(rf'<g class="jt-run-{index}" style="[^"]*"><title>([^<]*)</title>', chart)
        assert groups == [name, name]  # at each scale
    # past the runs that can be hidden, the legend says the run and offers nothing
    few = chart_svg("loss", "step", RUNS, controls=ChartControls("jt", 0, hideable=1))
    assert '<span class="jt-entry">' in few and "jt-k0-h1" not in few


def test_a_job_views_charts_keep_their_state_beside_them_in_the_saved_copy():
    from jupyter_trainer.metrics.series import MetricSeries
    from jupyter_trainer.view.charts import charts_html, job_chart_controls

    series = MetricSeries()
    series.add_many("loss", "step", [float(step) for step in range(20)], [1 / (step + 1) for step in range(20)])
    live, saved = charts_html(series, prefix="jtlive"), charts_html(series, prefix="jtlives")
    targets = set(re.findall(r' for="([^"]*)"', live)) | set(re.findall(r' for="([^"]*)"', saved))
    ids = re.findall(r' id="([^"]*)"', state_html(job_chart_controls("jtlive")) + state_html(job_chart_controls("jtlives")))
    assert targets <= set(ids) and len(ids) == len(set(ids)) and "jtlive-k0-ylog" in targets and "jtlives-k0-ylog" in targets
    assert charts_html(series).count("<label") == 0  # without a prefix: the chart as before, no control
