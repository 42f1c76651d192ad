"""The widget's logic with a recording comm and an injected clock: no frontend, no sleeping."""

import json
import math
import os
import re
import shutil
import time
from html.parser import HTMLParser

import comm
import pytest
from comm.base_comm import BaseComm
from conftest import wait_for

from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.logs.terminal import SCREEN_ROWS
from jupyter_trainer.metrics.series import MetricSeries
from jupyter_trainer.spec.job_spec import DetachedSpec
from jupyter_trainer.view.job_html import header_html, log_html, plot_html
from jupyter_trainer.view.job_widget import WATCH_CHECK_SECONDS, JobWidget
from jupyter_trainer.view.poller import Poller
from jupyter_trainer.view.summary import snapshot_text


class RecordingComm(BaseComm):
    sent: list = []

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        RecordingComm.sent.append((self.comm_id, msg_type, data))


@pytest.fixture(autouse=True)
def recording_comm(monkeypatch):
    RecordingComm.sent = []
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))
    return RecordingComm.sent


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def fake_job(store, backends, name="w", metrics=()):
    spec = DetachedSpec(script="x", backend="fake", workdir=os.getcwd(), metrics=tuple(metrics))
    return submit_detached(spec, name=name, store=store, backends=backends).job


def append(job, text):
    with open(job.run_dir / "output.log", "a") as handle:
        handle.write(text)


def updates_of(sent, widget):
    return [data for comm_id, kind, data in sent if comm_id == widget.model_id and data and data.get("method") == "update"]


def test_widget_follows_log_metrics_and_final_status(store, fake_backend, backends):
    from jupyter_trainer.spec.job_spec import Metric

    job = fake_job(store, backends, metrics=[Metric("acc", r"acc=([0-9.]+)")])
    clock = Clock()
    view = JobWidget(job, log_lines=3, clock=clock)
    assert "no output yet" in view.log.value and "running" in view.header.value
    append(job, "".join(f"step {i} acc={i / 10}\n" for i in range(10)))
    assert view.poll(now=1.0)
    assert "step 9 acc=0.9" in view.log.value and "step 6" not in view.log.value  # the last 3 lines only
    assert "<svg" in view.plot.value and "acc" in view.plot.value
    fake_backend.finish("w", 137)
    clock.now += 65
    assert view.poll(now=10.0) is False  # ended and read: the poller can forget it
    assert "completed" not in view.header.value and "failed" in view.header.value
    assert "out of memory" in view.header.value
    assert view.stop_button.disabled and view.stop_button.button_style == "danger"


def test_progress_bars_and_colours_are_cleaned(store, fake_backend, backends):
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    append(job, "epoch 1\n\x1b[32m 10%|#         |\r 50%|#####     |\r")
    view.poll(now=1.0)
    assert " 50%|#####     |" in view.log.value and "10%" not in view.log.value and "\x1b" not in view.log.value
    append(job, "100%|##########|\r\n")
    view.poll(now=2.0)
    assert "100%|##########|" in view.log.value and "50%" not in view.log.value


def test_updates_are_rate_limited_whatever_the_print_rate(store, fake_backend, backends, recording_comm):
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    before = len(updates_of(recording_comm, view.log))
    for tick in range(40):  # 40 polls over 2 seconds, each with 1000 new lines
        append(job, "".join(f"tick {tick} line {i} loss: {i}\n" for i in range(1000)))
        view.poll(now=100.0 + tick * 0.05)
    log_updates = len(updates_of(recording_comm, view.log)) - before
    assert 1 <= log_updates <= 9  # at most 4 a second, not 40
    view.poll(now=110.0)  # a quiet moment later, the last line shows
    assert "tick 39 line 999" in view.log.value


def test_memory_stays_bounded(store, fake_backend, backends):
    job = fake_job(store, backends)
    view = JobWidget(job, log_lines=50, clock=Clock())
    append(job, "".join(f"loss: {i}\n" for i in range(200_000)))
    now = 0.0
    while view.poll(now=now) and not view.monitor.caught_up:
        now += 1
    # the lines that scrolled off, and a terminal's screen below them
    assert len(view.monitor.lines) == 50 and len(view.monitor.screen.rows()) <= SCREEN_ROWS
    assert len(view.monitor.snapshot(now).lines) == 50
    points = view.monitor.metrics.points["loss"]
    assert len(points) <= 1000 and points[-1][1] >= 199_000 - 1024


def test_catching_up_on_a_backlog_misses_no_rare_metric_and_numbers_every_match(store, fake_backend, backends):
    from jupyter_trainer.spec.job_spec import Metric
    from jupyter_trainer.view.monitor import JobMonitor

    metrics = [Metric("loss", r"\bloss\b\s*[:=]?\s*([-+]?\d*\.?\d+)"), Metric("val_loss", r"val_loss=([\d.]+)")]
    job = fake_job(store, backends, metrics=metrics)
    lines = []
    for step in range(120_000):
        lines.append(f"step {step} \x1b[1mloss\x1b[0m: {step}\n" if step % 7 else f"step {step} loss_scale: 4\n")
        if step % 40_000 == 39_999:
            lines.append(f"epoch done val_loss={step}\n")
    append(job, "".join(lines))
    monitor = JobMonitor(job, read_budget=100_000)  # many small reads: chunk edges everywhere
    monitor.history_end = 0
    while not monitor.caught_up:
        monitor.read_log()
    # each value at the step its line (or the last line before it) says
    assert monitor.metrics.curve("val_loss") == [(39_999, 39_999.0), (79_999, 79_999.0), (119_999, 119_999.0)]
    expected = [step for step in range(120_000) if step % 7]  # loss_scale is not a loss
    assert monitor.metrics.counts["loss"] == len(expected)
    points = monitor.metrics.points["loss"]
    assert 250 <= len(points) <= 1000 and all(value == x for x, value in points)
    assert points[0] == (1, 1.0) and monitor.metrics.last("loss") == expected[-1]


def test_one_poll_over_many_reads_shows_exactly_the_last_lines(store, fake_backend, backends):
    from jupyter_trainer.view.monitor import JobMonitor

    job = fake_job(store, backends)
    monitor = JobMonitor(job, log_lines=50, read_seconds=60)
    monitor.start()
    monitor.cursor.chunk_size = 100  # 30 reads in one poll, each of a few lines
    append(job, "".join(f"line {i:03}\n" for i in range(300)) + "half a li")
    assert monitor.read_log() and monitor.caught_up
    assert monitor.log_text() == "\n".join([f"line {i:03}" for i in range(250, 300)] + ["half a li"])


def test_a_poll_that_only_grows_the_unended_line_reports_a_change(store, fake_backend, backends):
    from jupyter_trainer.view.monitor import JobMonitor

    job = fake_job(store, backends)
    append(job, "epoch 1\n10%")
    monitor = JobMonitor(job)
    monitor.start()
    assert monitor.log_text() == "epoch 1"  # the unended line is shown once the cursor reaches it
    assert monitor.read_log() and monitor.log_text() == "epoch 1\n10%"
    assert not monitor.read_log()
    append(job, "\r20%")
    assert monitor.read_log() and monitor.log_text() == "epoch 1\n20%"
    # the same unended line, read first inside the shown history and then at its end
    other = fake_job(store, backends, name="other")
    append(other, "\nb\nb")
    monitor = JobMonitor(other, read_budget=2)
    monitor.start()
    assert monitor.log_text() == "\nb"  # the tail, without its unended line
    monitor.read_log()  # still inside the history, "b" unended
    assert monitor.read_log() and monitor.log_text() == "\nb\nb"


def test_metrics_in_lines_with_other_characters_match_as_in_text(store, fake_backend, backends):
    from jupyter_trainer.spec.job_spec import Metric
    from jupyter_trainer.view.monitor import JobMonitor

    job = fake_job(store, backends, metrics=[Metric("loss", r"\bloss\b\s*[:=]?\s*([-+]?\d*\.?\d+)"), Metric("acc", r"acc=(\d+)")])
    append(job, "训练loss: 9\nÉloss=9\nloss:\xa00.5 █\nacc=１２\nloss=0.25\n")
    monitor = JobMonitor(job)
    monitor.history_end = 0
    monitor.read_log()
    monitor.reader.flush()
    monitor.metrics.set_latest({}, monitor.reader.counts)
    assert monitor.metrics.points == {"loss": [(1, 0.5), (2, 0.25)], "acc": [(1, 12.0)]}  # numbered: no step in the log


def test_an_unended_progress_bar_does_not_grow_memory(store, fake_backend, backends):
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    append(job, "".join(f"\r{i:>10}/1000000 it" for i in range(200_000)))
    now = 1.0
    while not view.monitor.caught_up:
        view.poll(now=now)
        assert len(view.monitor.cursor.pending) <= 64 * 1024
        now += 1
    assert view.monitor.log_text().endswith("199999/1000000 it")


def test_opening_a_big_log_shows_its_tail_at_once(store, fake_backend, backends):
    job = fake_job(store, backends)
    append(job, "".join(f"old line {i}\n" for i in range(300_000)))
    view = JobWidget(job, log_lines=5, clock=Clock())
    assert "old line 299999" in view.log.value and "old line 299994" not in view.log.value
    append(job, "new line\n")
    for now in range(20):  # catching up on metrics must not scroll old lines back into view
        view.poll(now=float(now))
        assert "old line 1\n" not in view.log.value
    assert view.monitor.caught_up and view.log.value.count("new line") == 1


def test_a_long_history_says_how_far_its_metrics_are_read(store, fake_backend, backends, monkeypatch):
    from jupyter_trainer.view import monitor

    monkeypatch.setattr(monitor, "NOTE_HISTORY_FROM", 1000)
    job = fake_job(store, backends)
    append(job, "".join(f"step {i}\n" for i in range(500)) + "".join(f"loss: {i}\n" for i in range(1000)))
    view = monitor.JobMonitor(job, read_budget=3000)  # 3000 of 14280 bytes a poll
    view.start()
    assert "reading the log for metrics: 0%" in plot_html(view.snapshot(0.0))
    assert view.read_log() and "reading the log for metrics: 21%" in plot_html(view.snapshot(0.0))  # no metric yet
    assert "<svg" not in plot_html(view.snapshot(0.0))
    while view.read_log():
        pass
    assert view.caught_up and "reading the log" not in plot_html(view.snapshot(0.0)) and view.metrics.counts == {"loss": 1000}


def _read_through(view):
    while not view.caught_up:
        view.read_log()
    return view


def test_a_new_view_of_a_long_job_starts_from_the_saved_metrics(store, fake_backend, backends):
    from jupyter_trainer.view.monitor import JobMonitor

    job = fake_job(store, backends)
    append(job, "".join(f"step {i} loss: {i}\n" for i in range(50_000)) + "step 50000 loss: 3")  # unended
    first = JobMonitor(job)
    first.start()
    _read_through(first)
    fake_backend.finish("w", 0)
    first.refresh_status()
    first.read_log()  # the job has ended and the log is read: the series is saved
    assert (job.run_dir / "metrics.json").exists()

    class Counting(type(job.log_source())):
        read_bytes = 0

        def read(self, offset, limit):
            data = super().read(offset, limit)
            Counting.read_bytes += len(data)
            return data

    source = Counting(job.log_source().path)
    job.log_source = lambda: source
    again = JobMonitor(job)
    again.start()  # the tail and the saved series: a few kilobytes, not the whole log again
    assert Counting.read_bytes < 64 * 1024
    assert again.metrics.points == first.metrics.points and again.metrics.counts == {"loss": 50_000}
    assert again.cursor.offset == first.cursor.line_start  # the unended line is read again
    append(job, ".5\nstep 50001 loss: 7\n")
    _read_through(again)
    fresh = _read_through(JobMonitor(job, read_budget=1 << 30))
    assert again.metrics.counts == fresh.metrics.counts == {"loss": 50_002}  # the once unended line counted once
    assert again.metrics.points == fresh.metrics.points and again.metrics.last("loss") == 7.0


def test_saved_metrics_are_not_used_for_a_rewritten_log_or_other_metrics(store, fake_backend, backends):
    from jupyter_trainer.metrics import cache as metrics_cache
    from jupyter_trainer.view.monitor import JobMonitor

    job = fake_job(store, backends)
    append(job, "".join(f"loss: {i}\n" for i in range(1000)))
    first = JobMonitor(job)
    first.start()
    _read_through(first)
    metrics_cache.save(job.run_dir, first.metric_options, first.cursor.line_start, job.log_source(), first.metrics, first.reader)
    log = job.run_dir / "output.log"
    log.write_text(log.read_text().replace("loss: 999", "loss: 111"))  # refetched, say, with other content
    rewritten = JobMonitor(job)
    rewritten.start()
    assert rewritten.metrics.counts == {} and rewritten.cursor.offset == 0
    assert metrics_cache.load(job.run_dir, [["acc", r"acc=(\d+)"]], job.log_source(), log.stat().st_size, first.metrics, first.reader) is None


def test_stop_button_leaves_the_kernel_free_while_the_job_stops(store, fake_backend, backends, monkeypatch):
    import threading

    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    ended = threading.Event()
    stop = type(fake_backend).stop
    monkeypatch.setattr(type(fake_backend), "stop", lambda self, *a, **k: (ended.wait(30), stop(self, *a, **k)))
    view.stop_button.click()  # returns while the job takes its time to end
    assert view.stop_button.description == "Stopping…" and fake_backend.stopped == []
    ended.set()
    wait_for(lambda: fake_backend.stopped == [("w", False)], what="the stop")
    view.poll(now=5.0)
    assert "stopped" in view.header.value and view.stop_button.description == "stopped"


def test_poller_thread_serves_widgets_and_ends(store, fake_backend, backends):
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    poller = Poller(interval=0.01)
    poller.watch(view)
    append(job, "hello from the job\n")
    wait_for(lambda: "hello from the job" in view.log.value, timeout=10, what="the poller to show the line")
    fake_backend.finish("w", 0)
    wait_for(lambda: not poller.running, timeout=10, what="the poller to end")
    assert poller.widgets == [] and "completed" in view.header.value


def test_metric_series_is_bounded_and_keeps_every_spike_and_dip():
    series = MetricSeries(max_points=100)
    values = [1 / (i + 1) for i in range(10_000)]
    values[4321], values[7777] = 50.0, -3.0  # one spike and one dip, far apart
    for step, value in enumerate(values):
        series.add(("loss", "step", float(step), value))
    points = series.points["loss"]
    assert len(points) <= 100 and points[0] == (0, 1.0) and (4321, 50.0) in points and (7777, -3.0) in points
    assert [x for x, _ in points] == sorted(x for x, _ in points)  # in order, each kept point a real one
    assert all(values[int(x)] == value for x, value in points)
    series.add(("loss", "step", 10_000.0, float("nan")))  # a gap: not drawn
    assert series.points["loss"] == points and series.axes == {"loss": "step"}


@pytest.mark.parametrize("max_points", [2, 10, 100])
def test_each_window_keeps_its_lowest_and_highest_values(max_points):
    import random

    rng = random.Random(max_points)
    values = [rng.uniform(-1, 1) for _ in range(5_000)]
    series = MetricSeries(max_points=max_points)
    for step, value in enumerate(values):
        series.add(("acc", "epoch", step / 10, value))
    stride = series.stride["acc"]
    expected = []
    for start in range(0, len(values), stride):
        window = list(enumerate(values))[start : start + stride]
        low, high = min(window, key=lambda item: item[1]), max(window, key=lambda item: item[1])
        expected += [(index / 10, value) for index, value in sorted({low, high})]
    assert series.points["acc"] == expected and len(expected) <= max(2, max_points)
    assert min(values) in [y for _, y in expected] and max(values) in [y for _, y in expected]


def test_the_newest_value_ends_the_curve():
    series = MetricSeries()
    series.add(("loss", "n", 1.0, 3.0))
    series.set_latest({"loss": ("loss", "n", 2.0, 2.5)}, {"loss": 2})
    assert series.curve("loss") == [(1.0, 3.0), (2.0, 2.5)] and series.last("loss") == 2.5 and series.counts == {"loss": 2}


def test_text_summary_without_a_widget_frontend(store, fake_backend, backends):
    job = fake_job(store, backends)
    append(job, "epoch 1 loss: 0.5\n")
    view = JobWidget(job, clock=Clock())
    view.poll(now=1.0)
    text = snapshot_text(view.monitor.snapshot(1000.0))
    assert text.splitlines()[0].startswith("w running fake") and "loss 0.5" in text


# -- text a job controls is shown as text ------------------------------------------

# A job can put any text where the widget shows it: in its log, in its run files (its record is
# one: an error message quotes what it read there), in the reason a runtime gives. None of it may
# become markup.
PAYLOAD = '<img src=x onerror="window.__jt_pwned=1"><script>window.__jt_pwned=1</script>'
OWN_TAGS = {"div", "span", "b", "pre", "svg", "g", "text", "tspan", "rect", "polyline", "line", "circle", "path", "title", "button", "label", "input"}  # path: the bell


class _Markup(HTMLParser):
    def __init__(self, value):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []
        self.feed(value)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def shown_text(value):
    """The text `value` shows, after checking that it holds only the widget's own markup."""
    markup = _Markup(value)
    for tag, attrs in markup.tags:
        assert tag in OWN_TAGS and not any(name.startswith("on") for name in attrs), (tag, attrs, value)
    return "".join(markup.text)


def rewrite_record(job, **fields):
    """What a job can do to the record in its run directory."""
    path = job.run_dir / "record.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def test_text_a_job_controls_is_shown_as_text_never_as_markup(store, fake_backend, backends, monkeypatch):
    job = fake_job(store, backends)
    append(job, f"epoch 1 {PAYLOAD}\n</pre><script>window.__jt_pwned=1</script>\n")
    view = JobWidget(job, clock=Clock())
    assert PAYLOAD in shown_text(view.log.value)
    # the job names a backend in its record: the status check fails with an error that quotes it
    original = (job.run_dir / "record.json").read_text()
    rewrite_record(job, backend=PAYLOAD)
    view.poll(now=5.0)
    text = shown_text(view.header.value)
    assert f"InvalidOption: job 'w' uses the unknown backend '{PAYLOAD}'" in text, text
    (job.run_dir / "record.json").write_text(original)
    view.poll(now=10.0)
    assert PAYLOAD not in view.header.value and "jt-error" not in view.header.value

    def failing_observe(record, run_dir):
        raise RuntimeError(PAYLOAD)

    monkeypatch.setattr(fake_backend, "observe", failing_observe)
    view.poll(now=15.0)
    assert f"RuntimeError: {PAYLOAD}" in shown_text(view.header.value)
    view.poll(now=15.5)  # no status check is due and the log reads well: the failure is still shown
    assert PAYLOAD in shown_text(view.header.value)
    monkeypatch.delattr(fake_backend, "observe")  # the class's own again
    view.poll(now=20.0)  # the next check succeeds: the line goes
    assert "jt-error" not in view.header.value

    def failing_stop(record, run_dir, container=False):
        raise RuntimeError(PAYLOAD)

    monkeypatch.setattr(fake_backend, "stop", failing_stop)
    view.stop_button.click()
    wait_for(lambda: not view.stop_button.disabled, what="the failed stop to be reported")
    assert f"could not stop the job: {PAYLOAD}" in shown_text(view.header.value)

    # the reason a runtime gives for the end of a job
    gone = fake_job(store, backends, name="gone")
    other = JobWidget(gone, clock=Clock())
    fake_backend.vanish("gone", PAYLOAD)
    assert other.poll(now=5.0) is False
    assert "lost" in other.header.value and PAYLOAD in shown_text(other.header.value)


def test_names_places_and_reasons_are_escaped_by_the_model(store, backends):
    from jupyter_trainer.core.record import JobRecord, Status
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.view.charts import charts_html
    from jupyter_trainer.view.monitor import JobMonitor

    records = [
        JobRecord(name="d", backend="docker", status=Status.LOST, reason=PAYLOAD, runtime={"container_name": PAYLOAD}),
        JobRecord(
            name="s", backend="sagemaker", status=Status.FAILED, reason=PAYLOAD,  # SageMaker's FailureReason
            options={"instance_type": PAYLOAD, "instance_count": 2}, runtime={"training_job_name": PAYLOAD},
        ),  # fmt: skip
        JobRecord(
            name="h", backend="host", status=Status.STOPPED, reason=PAYLOAD, runtime={"supervisor": {"pid": PAYLOAD}}
        ),
    ]
    for record in records:
        monitor = JobMonitor(Job(record, store, backends))
        text = shown_text(header_html(monitor.snapshot(0.0)))
        # where it runs, and why it ended; a host pid that is not a number is not shown at all
        assert text.count(PAYLOAD) >= (1 if record.backend == "host" else 2), text
        assert PAYLOAD in snapshot_text(monitor.snapshot(0.0))  # plain text: shown as it is
        monitor.lines.append(PAYLOAD)
        assert PAYLOAD in shown_text(log_html(monitor.snapshot(0.0)))
    # a metric's name (from a record or a metrics cache a job could rewrite), also inside an attribute
    series = MetricSeries()
    series.add((PAYLOAD, PAYLOAD, 1.0, 1.0))
    series.add((PAYLOAD, PAYLOAD, 2.0, 2.0))
    chart = charts_html(series)
    assert PAYLOAD in shown_text(chart)
    assert [attrs["aria-label"] for tag, attrs in _Markup(chart).tags if tag == "svg"] == [PAYLOAD]


# -- any metric value, any failure: the widget and the poller carry on ---------------------

EXTREME_SERIES = {
    "flat huge": [1e20, 1e20, 1e20],
    "one point": [1e20],
    "huge both ways": [1e300, -1e300, 1e300],
    "the largest floats": [1.7976931348623157e308, -1.7976931348623157e308],
    "flat at the largest float": [1.7976931348623157e308] * 2,
    "tiny": [5e-324, 0.0, 1e-320],
    "flat tiny": [1e-300, 1e-300],
    "flat zero": [0.0, 0.0],
    "equal once rounded": [1.0, 1.0000000000000002],
    "not finite": [float("nan"), 1.0, float("inf"), 2.0, float("-inf")],
    "nothing finite": [float("nan"), float("inf")],
}


@pytest.mark.parametrize("values", EXTREME_SERIES.values(), ids=EXTREME_SERIES.keys())
def test_a_chart_of_any_series_has_finite_coordinates_inside_its_box(values):
    from jupyter_trainer.view.charts import chart_svg

    width, height = 320, 140
    svg = chart_svg("loss", "step", [("loss", list(enumerate(values)), "#1f77b4"), ("val_loss", [(0, 1.0)], "#ef4444")], width=width, height=height)
    coordinates = [
        float(number)
        for points in re.findall(r'points="([^"]*)"', svg)
        for pair in points.split()
        for number in pair.split(",")
    ] + [float(value) for value in re.findall(r'\b(?:x|y|cx|cy)="([^"]*)"', svg)]
    assert coordinates and all(math.isfinite(value) and -1 <= value <= width + 1 for value in coordinates), svg
    assert all(0 <= float(y) <= height for y in re.findall(r'\b(?:y|cy)="([^"]*)"', svg))
    finite = [value for value in values if math.isfinite(value)]
    drawn = re.findall(r'points="([^"]*)"', svg)
    assert [len(points.split()) for points in drawn] == ([len(finite), 1] if finite else [1])


def test_a_huge_or_flat_metric_neither_breaks_its_widget_nor_the_poller(store, fake_backend, backends):
    flat, other = fake_job(store, backends, name="flat"), fake_job(store, backends, name="other")
    views = JobWidget(flat, clock=Clock()), JobWidget(other, clock=Clock())
    poller = Poller(interval=0.01)
    poller.watch(*views)
    append(flat, "loss: 1e20\nloss: 1e20\n")  # a flat line at 1e20: once a division by zero
    append(other, "first\n")
    wait_for(lambda: "<svg" in views[0].plot.value and "first" in views[1].log.value, timeout=10, what="both widgets")
    assert "jt-error" not in views[0].header.value and "1.000e+20" in views[0].plot.value
    append(flat, "loss: 1e300\nloss: -1e300\nloss: 1e400\n")
    append(other, "second\n")
    wait_for(lambda: "second" in views[1].log.value and "1e300" in views[0].log.value, timeout=10, what="more lines")
    assert "jt-error" not in views[0].header.value and "-1.000e+300" in views[0].plot.value
    fake_backend.finish("flat", 0)
    fake_backend.finish("other", 0)
    wait_for(lambda: not poller.running, timeout=10, what="the poller to end")


def test_one_widgets_failure_stays_in_that_widget(store, fake_backend, backends, monkeypatch):
    broken, healthy, raising = (fake_job(store, backends, name=name) for name in ("broken", "healthy", "raising"))
    views = [JobWidget(job, clock=Clock()) for job in (broken, healthy, raising)]

    def failing_chart(snapshot):
        raise RuntimeError("<b>no chart</b>\nsecond line")

    bug = {"on": True}
    monkeypatch.setattr(views[0], "render_plot", failing_chart)  # a rendering bug, in this widget only
    monkeypatch.setattr(views[2], "poll", lambda now: 1 / 0 if bug["on"] else False)  # a bug anywhere in a poll
    poller = Poller(interval=0.01)
    poller.watch(*views)
    for job in (broken, healthy):
        append(job, "step 1\n")
    wait_for(lambda: all("step 1" in view.log.value for view in views[:2]), timeout=10, what="the lines")
    error = shown_text(views[0].header.value)
    assert "RuntimeError: <b>no chart</b> second line" in error  # one line, as text
    assert "ZeroDivisionError" in shown_text(views[2].header.value)  # reported by the poller
    append(healthy, "step 2\n")
    wait_for(lambda: "step 2" in views[1].log.value, timeout=10, what="the healthy widget to go on")
    assert poller.running and "jt-error" not in views[1].header.value
    fake_backend.finish("broken", 1)
    wait_for(lambda: "failed" in views[0].header.value, timeout=10, what="the final status despite the chart")
    # the poller lets a finished view go once its last poll has returned (which shows the status first)
    wait_for(lambda: views[0] not in poller.widgets, timeout=10, what="the poller to let the finished view go")
    assert views[0].stop_button.disabled
    bug["on"] = False
    fake_backend.finish("healthy", 0)
    wait_for(lambda: not poller.running, timeout=10, what="the poller to end")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death is the point
def test_watch_restarts_a_poller_thread_that_died(store, fake_backend, backends):
    class Fatal:
        """Ends the thread that polls it, once (SystemExit ends a thread whatever it catches)."""

        polls = 0

        def poll(self, now):
            Fatal.polls += 1
            if Fatal.polls == 1:
                raise SystemExit
            return False

    poller = Poller(interval=0.01)
    poller.watch(Fatal())
    wait_for(lambda: Fatal.polls and not poller.running, timeout=10, what="the thread to die")
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    poller.watch(view)
    append(job, "served again\n")
    wait_for(lambda: "served again" in view.log.value, timeout=10, what="a new poller thread")
    fake_backend.finish("w", 0)
    wait_for(lambda: not poller.running, timeout=10, what="the poller to end")


# -- a job removed while its widget is open -----------------------------------------


@pytest.mark.parametrize("removed", ["job directory", "run directory", "record"])
def test_a_removed_job_says_so_once_and_is_dropped(store, fake_backend, backends, recording_comm, removed):
    job = fake_job(store, backends)
    append(job, "step 1\n")
    view = JobWidget(job, clock=Clock())
    poller = Poller(interval=0.01)
    poller.watch(view)
    if removed == "record":
        (job.run_dir / "record.json").unlink()
    else:
        shutil.rmtree(store.job_dir("w") if removed == "job directory" else job.run_dir)
    view.last_status_check = float("-inf")  # the check is due at once
    wait_for(lambda: not poller.running, timeout=10, what="the poller to drop the widget")
    assert poller.widgets == []
    text = shown_text(view.header.value)
    assert view.header.value.count("jt-error") == 1 and "job w was removed" in text, text
    assert view.stop_button.disabled and view.stop_button.description == "removed"
    assert "step 1" in view.log.value  # what was read stays
    shown = len(updates_of(recording_comm, view.header))
    assert view.poll(now=100.0) is False and len(updates_of(recording_comm, view.header)) == shown


def test_a_metric_pattern_too_slow_for_the_log_says_so_in_the_view(store, fake_backend, backends):
    from jupyter_trainer.spec.job_spec import Metric
    from jupyter_trainer.view.monitor import JobMonitor

    job = fake_job(store, backends, metrics=[Metric("slow", r"loss\s*[:=]?\s*(\d+)")])
    append(job, ("epoch 1 loss" + " " * 20_000 + " nothing\n") * 5 + "loss: 3\n")
    monitor = JobMonitor(job)
    monitor.start()
    monitor.read_log()
    assert monitor.metrics.last("slow") == 3.0
    assert "--metric slow: 5 lines too long or too slow for its pattern, read in part" in plot_html(monitor.snapshot(0.0))


def test_the_header_says_how_far_how_long_to_go_and_whether_output_stopped(store, fake_backend, backends):
    job = fake_job(store, backends)
    clock = Clock(now=10_000.0)
    view = JobWidget(job, clock=clock)
    append(job, "Epoch 1/3\n 45/100 [=====>....] - ETA: 12s - loss: 0.41")
    view.poll(now=1.0)
    header = shown_text(view.header.value)
    assert "45% · ETA 12s" in header and "no output for" not in header
    clock.now += 299
    view.poll(now=2.0)
    assert "no output for" not in view.clocks.value  # quiet, but not for five minutes yet
    clock.now += 2
    header_before = view.header.value
    view.poll(now=3.0)
    # the clocks move in their own element: the rest of the header is not drawn again for them
    assert "no output for 5m01s" in shown_text(view.clocks.value) and "elapsed" in view.clocks.value
    assert view.header.value == header_before and "no output for" not in view.header.value and "elapsed" not in view.header.value
    append(job, "\n")
    view.poll(now=4.0)
    assert "no output for" not in view.clocks.value  # it printed again


def test_a_failure_shows_the_exception_it_ended_with(store, fake_backend, backends):
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    append(job, 'Traceback (most recent call last):\n  File "script.py", line 3, in <module>\nKeyError: \'images\'\n')
    fake_backend.finish("w", 1)
    view.poll(now=1.0)
    assert "exit code 1" in view.header.value and "KeyError: &#x27;images&#x27;" in view.header.value
    assert "KeyError: 'images'" in snapshot_text(view.monitor.snapshot(0.0))


def test_a_sagemaker_view_says_what_sagemaker_says(store, backends):
    from jupyter_trainer.core.record import JobRecord, Status
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.view.monitor import JobMonitor

    record = JobRecord(
        name="s", backend="sagemaker", status=Status.COMPLETED, exit_code=None, options={"instance_type": "ml.g5.xlarge"},
        runtime={"training_job_name": "s-1", "mode": "remote", "sdk": 2, "region": "eu-west-1", "secondary_status": "Uploading",
                 "billable_seconds": 754, "model_artifacts": "s3://bucket/s-1/output/model.tar.gz"},
    )  # fmt: skip
    snapshot = JobMonitor(Job(record, store, backends)).snapshot(0.0)
    assert snapshot.facts == ("SageMaker: Uploading", "billable 12m34s", "model s3://bucket/s-1/output/model.tar.gz")
    assert all(fact in shown_text(header_html(snapshot)) for fact in snapshot.facts)


def test_colours_come_from_the_theme_with_both_text_and_background_from_one_family(store, fake_backend, backends):
    from jupyter_trainer.view.job_html import STYLE

    view = JobWidget(fake_job(store, backends), clock=Clock())
    assert view.style.value.startswith(STYLE) and "jupyter-trainer-job" in view.box._dom_classes
    rules = dict(re.findall(r"(--jt-[a-z-]+): ([^;]+);", STYLE))
    for background, text in (("--jt-log-bg", "--jt-log-fg"), ("--jt-warn-bg", "--jt-warn-fg")):
        assert rules[background].startswith("var(--jp-") and rules[text].startswith("var(--jp-")
    assert "var(--jt-log-fg)" in STYLE and "#f6f8fa" not in log_html(view.monitor.snapshot(0.0))  # no fixed pane colour
    assert "style=" not in view.log.value  # every colour through the stylesheet


def test_the_notebook_keeps_a_copy_of_the_view_for_when_no_kernel_shows_it(store, fake_backend, backends, monkeypatch):
    import IPython.display

    shown, updates = [], []

    class Handle:
        def update(self, obj):
            updates.append(obj.data)

    def display(obj, display_id=None):
        shown.append(obj)
        return Handle() if display_id else None

    monkeypatch.setattr(IPython.display, "display", display)
    job = fake_job(store, backends)
    append(job, "step 1 loss: 0.5\n")
    clock = Clock()
    view = JobWidget(job, clock=clock)
    view.show()
    assert shown[0] is view and isinstance(shown[1], IPython.display.HTML)
    saved = shown[1].data
    assert f"jt-saved-{view.view_id}" in saved and f".jt-saved-{view.view_id} {{ display: none; }}" in view.style.value
    text = shown_text(saved.split("</style>")[-1].split("<script>")[0])
    assert "no kernel shows this job live" in text and "%train_attach w" in text and "step 1 loss: 0.5" in text
    append(job, "step 2 loss: 0.4\n")
    view.poll(now=1.0)
    assert updates == []  # not at every change: the notebook is written to now and then
    clock.now += 16
    view.poll(now=2.0)
    assert len(updates) == 1 and "step 2 loss: 0.4" in updates[-1]
    fake_backend.finish("w", 0)
    view.poll(now=3.0)  # the end is saved at once
    assert len(updates) == 2 and "completed" in updates[-1] and "when the job had ended" in updates[-1]
    # the browser is told once it has just ended, by the copy's script (job text as JSON, never markup)
    script = updates[-1].split("<script>")[1].split("</script>")[0]
    told = json.loads(script.rsplit("})(", 1)[1].rsplit(");", 1)[0])
    assert told["name"] == "w" and told["title"] == "w completed" and told["ended_at"] == view.monitor.record.ended_at
    append(job, "".join(f"line {i}\n" for i in range(500)))
    assert updates[-1].count("\n") < 100  # a bounded tail goes into the notebook, not the whole log


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "too many points"])
def test_a_metrics_cache_the_job_wrote_neither_hangs_nor_floods_the_view(store, fake_backend, backends, kind):
    import threading

    from jupyter_trainer.view.monitor import JobMonitor

    job = fake_job(store, backends)
    append(job, "step 1 loss: 0.5\n")
    cache = job.run_dir / "metrics.json"
    if kind == "fifo":
        os.mkfifo(cache)
    elif kind == "link to /dev/zero":
        cache.symlink_to("/dev/zero")
    else:
        first = JobMonitor(job)
        first.start()
        _read_through(first)
        first.reader.flush()
        from jupyter_trainer.metrics import cache as metrics_cache

        metrics_cache.save(job.run_dir, first.metric_options, first.cursor.line_start, job.log_source(), first.metrics, first.reader)
        data = json.loads(cache.read_text())
        data["series"]["windows"]["loss"] = [[1, [i, 0.5]] for i in range(2_000_000)]
        cache.write_text(json.dumps(data))
    monitor = JobMonitor(job)
    started = threading.Thread(target=monitor.start, daemon=True)
    started.start()
    started.join(timeout=20)
    assert not started.is_alive(), "opening the view hung on the cache"
    assert monitor.cursor.offset == 0 and monitor.metrics.points == {}  # not used: the log is read instead


def test_a_kill_after_a_handled_exception_shows_the_kill_not_the_old_exception(store, fake_backend, backends):
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    append(job, "Traceback (most recent call last):\n  File \"script.py\", line 3, in <module>\nKeyError: 'warmup'\nstep 1 loss: 1\n")
    fake_backend.finish("w", 137)
    view.poll(now=1.0)
    assert "exit code 137" in view.header.value and "warmup" not in view.header.value


# -- an idle poller: quiet views wait, and wake at once on a change ------------------------------


def test_a_quiet_view_waits_for_the_quiet_interval_and_a_line_wakes_it_at_once(store, fake_backend, backends):
    job = fake_job(store, backends)
    append(job, "first\n")
    view = JobWidget(job, clock=Clock())
    polls = []
    poll = view.poll
    view.poll = lambda now: (polls.append(now), poll(now))[1]
    poller = Poller(interval=0.01, quiet_interval=60)
    poller.watch(view)
    wait_for(lambda: "first" in view.log.value and view.quiet, timeout=10, what="the view to settle")
    settled = len(polls)
    time.sleep(0.5)
    assert len(polls) - settled <= 2  # not the 50 polls of a 0.01 s tick
    append(job, "second\n")
    wait_for(lambda: "second" in view.log.value, timeout=5, what="the line to wake the poller")
    poller.forget_all()


def test_a_run_file_that_may_be_a_status_makes_the_check_due_and_the_views_own_writes_do_not(store, fake_backend, backends):
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    view.poll(now=1.0)
    checked = view.last_status_check
    view.files_changed({"output.log", "metrics.json", ".metrics.json.12.ab.tmp"})
    assert view.last_status_check == checked
    view.files_changed({"output.log", "exit_code"})
    assert view.last_status_check == float("-inf")


def test_a_header_moved_by_the_clock_alone_is_the_header_drawn_anew(store, fake_backend, backends):
    job = fake_job(store, backends)
    clock = Clock(now=job.record.started_at + 5 if job.record.started_at else 1000.0)
    view = JobWidget(job, clock=clock)
    append(job, "step 1 loss: 0.5\n")
    view.poll(now=1.0)
    for second in range(1, 4):
        clock.now += 1
        view.poll(now=1.0 + second)
        moved = view.header.value
        view.push()  # drawn from a new snapshot
        assert view.header.value == moved


def test_a_log_that_grows_unreported_is_polled_as_if_unwatched(store, fake_backend, backends):
    """Where a container's engine writes the log from another kernel, no change is ever reported."""
    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    view.in_watch = True
    view.poll(now=1.0)
    assert view.watched
    read = view.monitor.cursor.offset
    append(job, "written where no watch sees it\n")
    view.poll(now=2.0)  # between two checks, a watched view's log is read only when a change is told
    assert view.watched and view.monitor.cursor.offset == read
    view.poll(now=1.0 + WATCH_CHECK_SECONDS)  # the check: grown, and no change was told
    assert not view.watched and view.monitor.cursor.offset > read
    append(job, "reported\n")
    view.poll(now=2.0 + WATCH_CHECK_SECONDS)  # unwatched: read at each poll
    assert "reported" in view.monitor.log_text()
    append(job, "told\n")
    view.files_changed({"output.log"})
    view.poll(now=3.0 + WATCH_CHECK_SECONDS)
    assert view.watched


def test_a_status_the_store_cannot_record_is_still_shown(store, fake_backend, backends, monkeypatch):
    """What a view draws from the job's record is kept until the record changes, and a record the
    store could not write is changed all the same: the view says what is true."""
    from jupyter_trainer.errors import StoreError

    job = fake_job(store, backends)
    view = JobWidget(job, clock=Clock())
    view.poll(now=1.0)
    assert "running" in view.header.value

    def full(*args, **kwargs):
        raise StoreError("the store is full")

    monkeypatch.setattr(type(job.store), "update", full)
    fake_backend.finish("w", 3)
    assert view.poll(now=10.0) is False
    assert "failed" in view.header.value and "exit code 3" in view.header.value
