"""A run that prints thousands of metric names (per-class metrics): the view draws, sends, saves
and keeps a bounded amount, chosen well, while the whole log still gives every value."""

import json
import os
import re
import subprocess
import sys

import pytest

from jupyter_trainer.backends import build_spec
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.metrics.series import MetricSeries
from jupyter_trainer.spec.job_spec import DetachedSpec
from jupyter_trainer.view.job_html import plot_html, saved_view_html
from jupyter_trainer.view.job_widget import JobWidget
from jupyter_trainer.view.monitor import JobMonitor

CLASSES = 5_000
# what "bounded" means here, whatever the log: a few charts drawn, a few dozen metrics kept
MAX_CHARTS = 8
MAX_SERIES = 32


pytestmark = pytest.mark.usefixtures("quiet_comm")  # see conftest


def fake_job(store, backends, name="flood"):
    spec = DetachedSpec(script="x", backend="fake", workdir=os.getcwd())
    return submit_detached(spec, name=name, store=store, backends=backends).job


def append(job, text):
    with open(job.run_dir / "output.log", "a") as handle:
        handle.write(text)


def per_class(step, classes=CLASSES):
    """One accuracy per class, each its own name, at `step`."""
    return f"step {step}\n" + "".join(f"class_{k}_acc: {k % 100 / 100}\n" for k in range(classes))


def epochs(count=3, classes=CLASSES):
    """A run's log: each epoch its losses, its per-class accuracies, then the validation's."""
    text = ""
    for epoch in range(count):
        step = (epoch + 1) * 10
        text += "".join(f"step {s} loss: {1 / s:.4f} acc: {s / 100}\n" for s in range(step - 9, step + 1))
        text += per_class(step, classes) + f"step {step} val_loss: {1 / step:.4f} val_acc: {epoch / 10}\n"
    return text


def read_through(monitor):
    monitor.start()
    while not monitor.caught_up:
        monitor.read_log()
    return monitor


def titles(html):
    """The charts drawn, in order, by their titles."""
    return re.findall(r'<svg [^>]*aria-label="([^"]*)"', html)


def legends(html, title):
    """The metrics drawn on the chart titled `title`."""
    svg = re.search(r'<svg [^>]*aria-label="' + re.escape(title) + r'".*?</svg>', html, re.S).group()
    return re.findall(r'<tspan class="jt-name"> ([^<]*)</tspan>', svg)


@pytest.fixture
def flooded(store, fake_backend, backends):
    job = fake_job(store, backends)
    append(job, epochs())
    return job, read_through(JobMonitor(job))


def test_a_log_of_5000_names_draws_a_few_charts(flooded):
    job, monitor = flooded
    html = plot_html(monitor.snapshot(0.0))
    assert 1 <= len(titles(html)) <= MAX_CHARTS
    assert len(html) < 200_000  # what one update of the charts sends


def test_the_view_says_how_many_more_metrics_there_are_and_how_to_see_them(flooded):
    job, monitor = flooded
    html = plot_html(monitor.snapshot(0.0))
    line = re.search(r'<div class="jt-more">([^<]*)</div>', html).group(1)
    drawn = sum(len(legends(html, title)) for title in titles(html))
    total = CLASSES + 4  # loss, acc, val_loss, val_acc
    number = int(re.search(r"([\d,]+) more metrics not drawn", line).group(1).replace(",", ""))
    assert abs(number - (total - drawn)) <= 0.05 * total  # an estimate past a thousand names, said so
    assert line.startswith("about ") and f"jupyter-trainer metrics {job.name}" in line


def test_the_view_saved_in_the_notebook_is_bounded(flooded):
    job, monitor = flooded
    saved = saved_view_html(monitor.snapshot(0.0), "0123456789abcdef", 0.0)
    assert len(saved.encode()) < 256 * 1024 and "more metrics not drawn" in saved


def test_the_metrics_cache_and_the_views_memory_are_bounded(store, fake_backend, backends):
    job = fake_job(store, backends)
    append(job, epochs())
    fake_backend.finish(job.name, 0)
    monitor = read_through(JobMonitor(job))
    monitor.refresh_status()
    monitor.read_log()  # ended and read: the series is saved next to the record
    cache = job.run_dir / "metrics.json"
    assert cache.stat().st_size < 256 * 1024
    series = monitor.metrics
    kept = [series.axes, series.windows, series.latest, series.counts, series.updated]
    assert all(len(names) <= MAX_SERIES for names in kept) and len(series.families) <= 256
    reader = monitor.reader  # the reader forgets the names the series does not keep
    assert all(len(names) <= MAX_SERIES for names in (reader.axes, reader.counts, reader.pending))
    again = JobMonitor(job)  # and the next view starts from that cache
    again.start()
    assert again.cursor.offset > 0 and again.metrics.names() == series.names()
    assert again.metrics.name_count() == series.name_count()


def test_loss_like_metrics_are_drawn_first(store, fake_backend, backends):
    job = fake_job(store, backends)
    # the per-class accuracies come first, each with a curve of two values, then the loss
    append(job, per_class(1) + per_class(2) + "step 2 acc: 0.1\n" + "".join(f"step {s} train_loss: {1 / s}\n" for s in range(2, 6)))
    html = plot_html(read_through(JobMonitor(job)).snapshot(0.0))
    assert titles(html)[0] == "loss" and legends(html, "loss") == ["train_loss"]
    assert len(titles(html)) <= MAX_CHARTS


def test_a_twin_is_drawn_on_the_chart_of_its_base(store, fake_backend, backends):
    job = fake_job(store, backends)
    append(job, "step 1 acc: 0.5\n" + per_class(1) + "step 1 val_acc: 0.4\n")
    html = plot_html(read_through(JobMonitor(job)).snapshot(0.0))
    assert len(titles(html)) <= MAX_CHARTS
    assert "acc" in titles(html) and legends(html, "acc") == ["acc", "val_acc"]


def test_the_most_recently_updated_metrics_are_drawn_next(store, fake_backend, backends):
    job = fake_job(store, backends)
    append(job, "step 1 loss: 1\nstep 1 f1: 0.1\nstep 1 top1_acc: 0.2\n" + per_class(1))
    monitor = read_through(JobMonitor(job))
    assert titles(plot_html(monitor.snapshot(0.0)))[:3] == ["loss", "top1_acc", "f1"]
    append(job, "step 2 f1: 0.3\n")  # f1 is updated again: now the newest
    monitor.read_log()
    shown = titles(plot_html(monitor.snapshot(0.0)))
    assert shown[:3] == ["loss", "f1", "top1_acc"] and len(shown) <= MAX_CHARTS


def test_the_chooser_draws_a_kept_chart_first(store, fake_backend, backends):
    job = fake_job(store, backends)
    append(job, epochs(count=1))
    view = JobWidget(job)
    now = 0.0
    while not view.monitor.caught_up:
        now += 1
        view.poll(now)
    view.poll(now + 10)
    offered = [value for _, value in view.chooser.options]
    assert view.chooser.layout.display != "none" and offered[0] is None and len(offered) <= MAX_SERIES + 1
    drawn = titles(view.plot.value)
    chosen = next(value for value in offered[1:] if value[0] not in drawn)
    view.chooser.value = chosen  # as the frontend sets it: drawn first at once, the rest still bounded
    assert titles(view.plot.value)[0] == chosen[0] and len(titles(view.plot.value)) <= MAX_CHARTS
    append(job, per_class(99))  # more of the flood never takes the chosen metric's place
    view.poll(now + 20)
    assert titles(view.plot.value)[0] == chosen[0]


def test_job_metrics_and_the_cli_still_give_every_name(home, workdir):
    script = f"import sys\nsys.stdout.write({epochs(count=2)!r})\n"
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    job = submit_detached(spec, name="everything").job
    assert job.wait(timeout=60).value == "completed"
    names = {"loss", "acc", "val_loss", "val_acc", *(f"class_{k}_acc" for k in range(CLASSES))}
    found = job.metrics()
    assert set(found) == names and found["class_4999_acc"] == [(10.0, 0.99), (20.0, 0.99)]
    monitor = read_through(JobMonitor(job))
    assert len(monitor.metrics.updated) <= MAX_SERIES  # while the view keeps only a few
    shell = subprocess.run([sys.executable, "-m", "jupyter_trainer", "metrics", "everything", "--json"], capture_output=True, text=True, timeout=120)
    assert shell.returncode == 0 and set(json.loads(shell.stdout)) == names


def test_a_count_of_names_is_exact_up_to_a_thousand_then_close():
    from jupyter_trainer.metrics.series import NameCount

    count = NameCount()
    for index in range(NameCount.EXACT):
        count.add(f"class_{index}_acc")
        count.add(f"class_{index}_acc")
    assert count.exact and count.count() == NameCount.EXACT
    for index in range(50_000):
        count.add(f"class_{index}_acc")
    assert not count.exact and abs(count.count() - 50_000) < 2_500 and len(json.dumps(count.state())) < 16 * 1024
    again = NameCount()
    again.restore(json.loads(json.dumps(count.state())))
    assert again.count() == count.count()


@pytest.mark.parametrize("state", [{"names": [str(i) for i in range(5000)]}, {"registers": "00"}, {"registers": "ff" * 4096}, {}])
def test_a_count_written_by_someone_else_is_refused(state):
    from jupyter_trainer.metrics.series import NameCount

    with pytest.raises((ValueError, KeyError)):
        NameCount().restore(state)


def test_a_series_keeps_at_most_its_names_and_refuses_a_state_with_more():
    series = MetricSeries(max_names=4)
    for index in range(100):
        series.add((f"m{index}_acc", "step", 1.0, 0.5))
    assert len(series.updated) == 4 and len(series.names()) == 4
    state = json.loads(json.dumps(series.state()))
    state["updated"] = {f"x{i}": i for i in range(5)}
    with pytest.raises(ValueError):
        MetricSeries(max_names=4).restore(state)


def test_the_loss_is_drawn_first_however_many_other_losses_came_before(store, fake_backend, backends):
    """Thousands of word-named losses (no number to make them a family) fill every kept place
    before `loss` and `val_loss` are printed: those still take one, and their chart comes first."""
    import random

    words = random.Random(7)
    names = ["".join(words.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8)) + "_loss" for _ in range(3000)]
    job = fake_job(store, backends)
    text = "".join(f"step {step} {name}: 0.5\n" for step in (1, 2) for name in names)
    append(job, text + "".join(f"step {step} loss: {1 / step}\nstep {step} val_loss: {2 / step}\n" for step in (1, 2, 3)))
    html = plot_html(read_through(JobMonitor(job)).snapshot(0.0))
    assert titles(html)[0] == "loss" and legends(html, "loss") == ["loss", "val_loss"]
    # a name holding "loss" inside a word is not loss-like: "glossary_acc" ranks as any accuracy
    assert MetricSeries().rank_of("glossary_acc") == MetricSeries().rank_of("acc")
