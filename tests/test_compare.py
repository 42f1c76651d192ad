"""Runs side by side: the rules (pure), the runs followed on fake and host jobs, the view, the surfaces."""

import json
import math
import os
import re
import subprocess
import sys

import pytest
from conftest import wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.record import Observation
from jupyter_trainer.core.store import CLOCK_FILE
from jupyter_trainer.errors import TrainerError
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.metrics import comparison as rules
from jupyter_trainer.spec.job_spec import DetachedSpec
from jupyter_trainer.view.compare_runs import ComparedRun, compare, load_runs


def fake_job(store, backends, name, started_at=None):
    job = submit_detached(DetachedSpec(script="x", backend="fake", workdir=os.getcwd()), name=name, store=store, backends=backends).job
    if started_at is not None:
        def at(record):
            record.started_at = started_at

        job.record = store.update(job.name, job.run, at)
    return job.refresh()  # running, as the fake backend sees it


def append(job, text):
    with open(job.run_dir / "output.log", "a") as handle:
        handle.write(text)


def finish(fake_backend, *jobs):
    for job in jobs:
        fake_backend.observations[job.name] = Observation(alive=False, exit_code=0)
        job.refresh()


def text_of(html):
    return re.sub(r"<[^>]+>", " ", html)


# -- the rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, way",
    [
        ("loss", "lowest"), ("val_loss", "lowest"), ("kl_loss", "lowest"), ("train/loss", "lowest"), ("eval_ppl", "lowest"),
        ("perplexity", "lowest"), ("val_mae", "lowest"), ("rmse", "lowest"), ("wer", "lowest"), ("test_error", "lowest"),
        ("acc", "highest"), ("val_accuracy", "highest"), ("top1_acc", "highest"), ("eval_f1", "highest"), ("auc", "highest"),
        ("mean_reward", "highest"), ("bleu", "highest"), ("score", "highest"),
        ("lr", None), ("learning_rate", None), ("grad_norm", None),
    ],
)  # fmt: skip
def test_which_value_is_best_follows_the_name(name, way):
    assert rules.direction(name) == way


def test_the_default_metric_is_the_first_loss_like_name_the_jobs_share():
    assert rules.default_metric([["acc", "val_loss", "loss"], ["loss", "val_loss", "acc"]]) == "loss"
    assert rules.default_metric([["acc", "val_loss"], ["val_loss", "acc", "loss"]]) == "val_loss"
    # no loss shared: the main metric of all their names
    assert rules.default_metric([["acc", "loss"], ["acc", "val_loss"]]) == "loss"
    assert rules.default_metric([["acc"], ["acc", "lr"]]) == "acc"
    # a job with no metric at all does not stop the others' from being shared
    assert rules.default_metric([["lr", "loss"], [], ["loss"]]) == "loss"
    assert rules.default_metric([[], []]) is None


def test_the_axis_is_the_metrics_own_only_when_every_job_shares_it():
    assert rules.shared_axis(["step", "step", None]) == "step"
    assert rules.shared_axis(["step", "epoch"]) == "time"
    assert rules.shared_axis(["step", "step"], by_time=True) == "time"
    assert rules.shared_axis([None, None]) == "time"
    assert "by epoch, step" in rules.axis_note({"a": "step", "b": "epoch"}, "time", False)


def test_the_table_and_json_say_each_jobs_last_best_and_points():
    loss = rules.stats_of([2.0, 0.5, float("nan"), 0.75])
    acc = rules.stats_of([0.1, 0.9, 0.8])
    rows = [
        rules.row("a", "completed", "loss", loss),
        rules.row("b", "running", "loss", None, ["acc", "lr"]),
    ]
    assert (rows[0].last, rows[0].best, rows[0].points) == (0.75, 0.5, 4)
    assert rules.row("c", "completed", "acc", acc).best == 0.9  # highest for an accuracy
    assert rules.row("d", "completed", "lr", acc).best is None  # the name does not say
    assert rows[1].note == "b: no value of loss in its log (it has acc, lr)"
    text = rules.table_text(rows, "x: step")
    lines = text.splitlines()
    assert lines[0].split() == ["name", "status", "metric", "last", "best", "(lowest)", "points"]  # the notebook's titles
    assert lines[1].split() == ["a", "completed", "loss", "0.75", "0.5", "4"]
    assert lines[2].split() == ["b", "running", "loss", "-", "-", "0"]
    assert lines[3:] == ["b: no value of loss in its log (it has acc, lr)", "x: step"]
    nan_last = rules.row("e", "failed", "loss", rules.stats_of([1.0, float("nan")]))
    assert json.loads(rules.rows_json([rows[1], nan_last])) == [
        {"name": "b", "status": "running", "metric": "loss", "last": None, "best": None, "points": 0},
        {"name": "e", "status": "failed", "metric": "loss", "last": None, "best": 1.0, "points": 2},
    ]


# -- runs followed -----------------------------------------------------------------------


def test_jobs_sharing_a_step_axis_are_drawn_by_step_and_a_running_ones_latest_counts(store, fake_backend, backends):
    a, b = fake_job(store, backends, "a"), fake_job(store, backends, "b")
    append(a, "".join(f"step {s} loss: {1 / (s + 1):.3f} acc: {s / 10}\n" for s in range(5)))
    append(b, "".join(f"step {s} loss: {2 / (s + 1):.3f}\n" for s in range(3)))
    runs = [ComparedRun(a), ComparedRun(b)]
    for run in runs:
        run.read(now=0.0, seconds=math.inf)
    shown = compare(runs)
    assert (shown.metric, shown.axis, shown.note) == ("loss", "step", "x: step")
    a_row, b_row = shown.rows
    # b still runs: its latest value (not yet settled by a next one) is in its row and its curve
    assert (a_row.points, a_row.last, a_row.best) == (5, 0.2, 0.2)
    assert (b_row.status, b_row.points, b_row.last) == ("running", 3, 0.667)
    assert shown.curves[1] == ("b", [(0.0, 2.0), (1.0, 1.0), (2.0, 0.667)])
    append(b, "step 3 loss: 0.1\n")  # live: the next read has it
    assert runs[1].read(now=1.0)
    assert compare(runs).rows[1].last == 0.1 and compare(runs).rows[1].best == 0.1
    finish(fake_backend, a, b)
    for run in runs:
        run.read(now=2.0)
    assert all(run.finished for run in runs)
    assert [row.points for row in compare(runs).rows] == [5, 4]
    assert compare(runs, metric="acc").rows[1].note == "b: no value of acc in its log (it has loss)"


def test_jobs_with_different_axes_are_drawn_by_the_seconds_since_each_ones_start(store, fake_backend, backends):
    a, b = fake_job(store, backends, "a", started_at=1000.0), fake_job(store, backends, "b", started_at=5000.0)
    lines_a = [f"step {s} loss: {1 / (s + 1):.3f}\n" for s in range(4)]
    lines_b = [f"Epoch {e}/3\n" + f"val_loss: {3 - e}.5 loss: {1 / e:.3f}\n" for e in (1, 2, 3)]
    append(a, "".join(lines_a))
    append(b, "".join(lines_b))
    # the supervisor's clock: a printed a line every 10 s, b an epoch every 60 s
    ends, clock = 0, []
    for index, line in enumerate(lines_a):
        ends += len(line)
        clock.append(f"{1000 + 10 * (index + 1)} {ends}\n")
    (a.run_dir / CLOCK_FILE).write_text("".join(clock))
    ends, clock = 0, []
    for index, line in enumerate(lines_b):
        ends += len(line)
        clock.append(f"{5000 + 60 * (index + 1)} {ends}\n")
    (b.run_dir / CLOCK_FILE).write_text("".join(clock))
    finish(fake_backend, a, b)
    runs = [ComparedRun(a).read_all(now=9999.0), ComparedRun(b).read_all(now=9999.0)]
    shown = compare(runs)
    assert shown.axis == "time" and "by epoch, step" in shown.note
    xs_a = [x for x, _ in shown.curves[0][1]]
    xs_b = [x for x, _ in shown.curves[1][1]]
    # each value at its own line's time: between the clock's samples around its line
    assert all(10 * index < x <= 10 * (index + 1) for index, x in enumerate(xs_a)), xs_a
    assert all(60 * index < x <= 60 * (index + 1) for index, x in enumerate(xs_b)), xs_b
    # asked for: by time although they share an axis; the default says the step
    assert compare(runs[:1]).axis == "step"
    assert compare(runs[:1], by_time=True).note == "x: seconds since each job's start (--x time)"
    # val_loss, settled only at the next epoch's line, keeps the time it was printed at
    val_xs = [x for x, _ in compare(runs[1:], "val_loss", by_time=True).curves[0][1]]
    assert all(60 * index < x <= 60 * (index + 1) for index, x in enumerate(val_xs)), val_xs


def test_a_log_with_no_clock_is_placed_between_the_start_and_the_end(store, fake_backend, backends):
    job = fake_job(store, backends, "noclock", started_at=100.0)
    append(job, "loss: 4\n" * 4)  # 8 bytes a line
    finish(fake_backend, job)
    job.record = store.update(job.name, job.run, lambda record: setattr(record, "ended_at", 140.0))
    run = ComparedRun(job).read_all()
    xs = [x for x, _ in run.curve("loss", by_time=True)]
    assert xs == sorted(xs) and 0 < xs[0] <= 10 and 30 < xs[-1] <= 40  # by the byte: each 8 of the 32 are 10 s


def test_an_unknown_job_is_one_clear_error(store, backends):
    with pytest.raises(TrainerError) as caught:
        load_runs(["nope"], store=store, backends=backends)
    assert str(caught.value) == "no job named 'nope': see %train_jobs" or "no job named 'nope'" in str(caught.value)


# -- the view ------------------------------------------------------------------------------


@pytest.fixture
def view_of(quiet_comm):
    from jupyter_trainer.view.compare_view import CompareWidget

    return CompareWidget


def test_the_view_draws_one_curve_per_job_with_its_colour_legend_and_row(store, fake_backend, backends, view_of):
    from jupyter_trainer.view.charts import RUN_PALETTE

    a, b, c = (fake_job(store, backends, name) for name in ("lr-0.1", "lr-0.01", "empty"))
    append(a, "".join(f"step {s} loss: {1 / (s + 1):.3f}\n" for s in range(20)))
    append(b, "".join(f"step {s} loss: {2 / (s + 1):.3f}\n" for s in range(10)))
    append(c, "hello\n")
    view = view_of([ComparedRun(a), ComparedRun(b), ComparedRun(c)], clock=lambda: 0.0)
    html = view.body.value
    # a raw line per job at each scale, linear and log (the smoothed ones beside them: test_charts.py)
    assert html.count('<polyline class="jt-line jt-raw') == 4 and html.count("<svg") == 1
    for colour in RUN_PALETTE[:2]:
        assert f"stroke:{colour}" in html and f"color:{colour}" in html  # the line and its legend swatch
    assert f"background:{RUN_PALETTE[2]}" in html  # the empty job's key in the table
    text = text_of(html)
    assert "loss of 3 jobs" in text and "x: step" in text
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    assert len(rows) == 4 and "best (lowest)" in rows[0]
    assert text_of(rows[1]).split() == ["lr-0.1", "running", "loss", "0.05", "0.05", "20"]
    assert "empty: no value of loss in its log" in text
    # live: more of b's log reaches the view at the next poll, and nothing is new at the one after
    append(b, "step 10 loss: 0.01\n")
    assert view.poll(now=10.0) is True
    assert "0.01" in text_of(re.findall(r"<tr>(.*?)</tr>", view.body.value)[2])
    finish(fake_backend, a, b, c)
    assert view.poll(now=20.0) is False  # every job ended and read: the poller forgets it
    assert text_of(view.body.value).count("completed") == 3


def test_views_share_the_one_poller_thread(store, fake_backend, backends, view_of, monkeypatch):
    import threading

    from jupyter_trainer.view import poller as poller_module

    monkeypatch.setattr(poller_module, "_poller", None)
    a, b = fake_job(store, backends, "p1"), fake_job(store, backends, "p2")
    before = threading.active_count()
    first, second = view_of([ComparedRun(a), ComparedRun(b)]), view_of([ComparedRun(b), ComparedRun(a)])
    assert threading.active_count() == before  # a view starts no thread of its own
    poller = poller_module.poller()
    poller.watch(first)
    poller.watch(second)
    assert poller.widgets == [first, second] and poller.running
    assert threading.active_count() == before + 1
    append(a, "loss: 0.5\n")
    wait_for(lambda: "0.5" in second.body.value, what="the poller to update the second view")
    finish(fake_backend, a, b)
    wait_for(lambda: not poller.running, what="the poller to end once both views are done")
    assert poller.widgets == []


def test_a_failing_job_is_said_in_the_view_and_the_others_go_on(store, fake_backend, backends, view_of):
    a, b = fake_job(store, backends, "ok"), fake_job(store, backends, "broken")
    append(a, "loss: 1\n")
    runs = [ComparedRun(a), ComparedRun(b)]
    view = view_of(runs, clock=lambda: 0.0)

    def fails(now=None, seconds=None):
        raise OSError("disk gone")

    runs[1].read = fails
    append(a, "loss: 0.5\n")
    view.poll(now=10.0)
    assert "broken: cannot read its log: OSError: disk gone" in text_of(view.body.value)
    assert "0.5" in text_of(view.body.value)


def test_a_wrapped_legend_makes_room_for_every_job():
    from jupyter_trainer.view.charts import chart_svg

    curves = [(f"a-rather-long-job-name-{index}", [(0, 1.0), (1, 0.5)], "#3b82f6") for index in range(6)]
    svg = chart_svg("loss", "step", curves, 640, 260, wrap_legend=True)
    legends = re.findall(r'<text class="jt-legend" x="58" y="(\d+)">', svg)
    assert len(legends) >= 3 and legends == sorted(legends, key=int)
    height = int(re.search(r'height="(\d+)"', svg).group(1))
    frame_top = float(re.search(r'class="jt-frame" x="58" y="([\d.]+)"', svg).group(1))
    assert height > 260 and frame_top > int(legends[-1])  # the plot starts below the legend's last line
    assert all(f"a-rather-long-job-name-{index}" in svg for index in range(6))


# -- the surfaces --------------------------------------------------------------------------


def host_job(name, script, workdir):
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    return submit_detached(spec, name=name).job


def cli(*args):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *args], capture_output=True, text=True, timeout=60)


def test_the_command_line_compares_as_text_and_json(home, workdir):
    host_job("fast", "for s in range(5):\n    print(f'step {s} loss: {1 / (s + 1):.3f} acc: {s / 5}')\n", workdir).wait(timeout=30)
    host_job("slow", "for s in range(3):\n    print(f'step {s} loss: {2 / (s + 1):.3f}')\n", workdir).wait(timeout=30)
    text = cli("compare", "fast", "slow")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[1].split() == ["fast", "completed", "loss", "0.2", "0.2", "5"]
    assert lines[2].split() == ["slow", "completed", "loss", "0.667", "0.667", "3"] and lines[3] == "x: step"
    as_json = cli("compare", "fast", "slow", "--metric", "acc", "--json")
    assert json.loads(as_json.stdout) == [
        {"name": "fast", "status": "completed", "metric": "acc", "last": 0.8, "best": 0.8, "points": 5},
        {"name": "slow", "status": "completed", "metric": "acc", "last": None, "best": None, "points": 0},
    ]
    assert as_json.stderr == "jupyter-trainer: slow: no value of acc in its log (it has loss)\n"
    unknown = cli("compare", "fast", "nope")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr == "jupyter-trainer: no job named 'nope': see jupyter-trainer list\n"
    assert cli("compare").returncode == 1


@pytest.fixture
def ip(home, workdir, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(workdir)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_trainer")
    return shell


def test_the_magic_prints_the_table_in_a_terminal_and_says_an_unknown_job_in_one_line(ip, workdir, capsys):
    host_job("m-a", "for s in range(4):\n    print(f'epoch {s} val_acc: {s / 4}')\n", workdir).wait(timeout=30)
    host_job("m-b", "for s in range(2):\n    print(f'epoch {s} val_acc: {s / 2 + 0.1}')\n", workdir).wait(timeout=30)
    result = ip.run_cell("%train_compare m-a m-b --x time")
    out = capsys.readouterr().out
    assert result.success
    lines = out.splitlines()
    assert lines[1].split() == ["m-a", "completed", "val_acc", "0.75", "0.75", "4"]
    assert lines[2].split() == ["m-b", "completed", "val_acc", "0.6", "0.6", "2"]
    assert lines[-1] == "x: seconds since each job's start (--x time)"
    result = ip.run_cell("%train_compare m-a gone")
    captured = capsys.readouterr()
    assert not result.success and "Traceback" not in captured.out + captured.err
    assert (captured.out + captured.err).strip().splitlines() == ["UsageError: no job named 'gone': see %train_jobs"]
    ip.run_cell("%train_compare?")
    help_text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "usage: %train_compare " in help_text and "--metric M" in help_text and "\n  %train_compare lr-0.1" in help_text


# -- the text table reads only what it prints ------------------------------------------------


def varied_log(seed: int, lines: int = 2000) -> str:
    """A log of the shapes a comparison meets, in random turns: runs of same-shaped lines (read a
    run at a time), lines read one by one (two markers, Hugging Face's dicts, Keras' epochs, tqdm's
    redraws), a setting printed before training (numbered, then moved to the step), values that
    are not finite, 0.0 beside -0.0, and a metric that changes its axis. No redraw in its first
    64 KB, which are read a run at a time where they can be (a read with a redraw in it is not)."""
    import random

    rnd = random.Random(seed)
    out = ["lr: 0.1\n", "loss: 9.5\n", "loss: 9.0\n"] if seed % 2 else []
    step = 0
    while len(out) < lines:
        shapes = ["run", "epochs", "hf", "odd"] + ["bar"] * (sum(map(len, out)) > 70_000)
        shape, count = rnd.choice(shapes), rnd.randint(1, 120)
        for _ in range(count):
            step += 1
            loss = rnd.choice([f"{rnd.random():.4f}", f"{rnd.random():.4f}", "nan", "inf", "-inf", "0.0", "-0.0"])
            if shape == "run":
                out.append(f"step {step:06d} loss: {rnd.random():.6f} lr: {0.001 * rnd.random():.5f} acc: {rnd.random():.3f} padding\n")
            elif shape == "epochs":
                out.append(f"epoch {step // 50} step {step} loss: {loss} acc: {rnd.choice(['0.0', '-0.0', '0.5'])}\n")
            elif shape == "hf":
                out.append(f"{{'loss': {loss}, 'grad_norm': {rnd.random():.3f}, 'learning_rate': 5e-05, 'epoch': {step / 1000:.3f}}}\n")
            elif shape == "bar":
                out.append(f"\r{step % 100}/100 [00:01<00:02, loss={loss}, val_loss={rnd.random():.3f}]")
            else:
                out.append(rnd.choice(["warning: something\n", f"val_loss: {loss}\n", f"Epoch {step // 50 + 1}/9\n"]))
        out.append("\n")
    return "".join(out)


def test_the_text_table_is_what_the_full_comparison_shows(store, fake_backend, backends):
    """The table read without curves (the command line's, --no-widget's) gives the rows and the note
    the full comparison does, on logs of every shape, finished or running, whatever the metric."""
    jobs = [fake_job(store, backends, f"v{seed}", started_at=1000.0) for seed in range(4)]
    for seed, job in enumerate(jobs):
        append(job, varied_log(seed))
    finish(fake_backend, *jobs[:3])  # one still runs: its latest values are not settled yet
    points = 0
    for metric in (None, "acc", "val_loss", "nothing"):
        full_runs = [ComparedRun(job, metric).read_all(now=5000.0) for job in jobs]
        table_runs = [ComparedRun(job, metric, curves=False).read_all(now=5000.0) for job in jobs]
        for asked in {metric, "loss", "lr", "grad_norm"} if metric is None else {metric}:
            for by_time in (False, True):
                full, table = compare(full_runs, asked, by_time), compare(table_runs, asked, by_time)
                # by repr: nan is not equal to itself, and -0.0 is equal to 0.0
                assert repr(table.rows) == repr(full.rows), (asked, by_time)
                assert (table.metric, table.axis, table.note) == (full.metric, full.axis, full.note)
                points += sum(row.points for row in table.rows)
    assert points > 10_000


def test_the_command_lines_table_builds_no_curve(store, fake_backend, backends, monkeypatch, capsys):
    """`compare` of 500 jobs of 3000 lines each took a minute, most of it spent drawing curves (a
    bounded series by step and another by time, for each run) that a text table never shows: it
    keeps each run's count, last, lowest and highest value of the metric, and the same table comes
    out (and the same JSON)."""
    from jupyter_trainer.metrics.comparison import rows_json, table_text
    from jupyter_trainer.metrics.series import MetricSeries
    from jupyter_trainer.surfaces import cli as command_line

    jobs = [fake_job(store, backends, f"c{seed}", started_at=1000.0) for seed in range(4)]
    for seed, job in enumerate(jobs):
        append(job, varied_log(seed + 10))
    finish(fake_backend, *jobs[:3])
    expected = compare([ComparedRun(job).read_all() for job in jobs])
    assert sum(row.points for row in expected.rows) > 300
    added = []
    real_add = MetricSeries.add
    monkeypatch.setattr(MetricSeries, "add", lambda self, point: added.append(point) or real_add(self, point))
    names = [job.name for job in jobs]
    assert command_line.run(["compare", *names], store, backends) in (0, None)
    assert capsys.readouterr().out == table_text(expected.rows, expected.note) + "\n"
    assert command_line.run(["compare", *names, "--json"], store, backends) in (0, None)
    assert capsys.readouterr().out == rows_json(expected.rows) + "\n"
    assert added == []


def test_a_batch_counts_as_its_values_one_by_one():
    values = [0.5, -0.0, 0.0, float("nan"), 2.0, float("inf"), -0.0, 0.25, float("-inf"), 0.0]
    for cut in range(len(values) + 1):
        one_by_one, batched = rules.stats_of(values), rules.stats_of(values[:cut])
        batched.extend(values[cut:])
        assert repr(vars(batched)) == repr(vars(one_by_one))
    zeros = rules.Stats()
    zeros.extend([-0.0, 0.0])
    assert repr((zeros.lowest, zeros.highest)) == "(-0.0, -0.0)"


# -- the jobs table ------------------------------------------------------------------------


def test_ticked_rows_of_the_jobs_table_are_compared_below_it(store, fake_backend, backends, quiet_comm):
    from jupyter_trainer.view.compare_view import CompareWidget
    from jupyter_trainer.view.jobs_table import JobsTable

    jobs = [fake_job(store, backends, name) for name in ("t1", "t2", "t3")]
    for index, job in enumerate(jobs):
        append(job, f"loss: {index + 1}\n")
    table = JobsTable(store, backends=backends)
    button = table.compare_button
    assert button.disabled
    table.rows[("t1", 1)].pick.value = True
    assert button.disabled  # one job: nothing to compare it with
    table.rows[("t3", 1)].pick.value = True
    assert not button.disabled and button.description == "Compare 2"
    button.click()
    view = table.compared
    assert isinstance(view, CompareWidget) and [run.label for run in view.runs] == ["t1", "t3"]
    assert view.body.value.count('<g class="jt-run-') == 4  # two jobs' lines, at two scales
    table.rows[("t1", 1)].pick.value = False
    assert button.disabled and button.description == "Compare"
