"""The charts' axes: round values (1, 2 or 5 times a power of ten apart) with grid lines, as
TensorBoard's and W&B's charts mark theirs, rather than only each axis's lowest and highest value."""

import re

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
