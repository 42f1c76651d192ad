"""Logs shown as a terminal shows them: real tqdm nested bars, checked against pyte."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from terminal_oracle import terminal_view

from jupyter_trainer.backends.base import FileLogSource
from jupyter_trainer.logs.reading import TAIL_MIN_BYTES, read_all_lines, tail_lines
from jupyter_trainer.logs.terminal import SettledLines, terminal_lines

SCRIPTS = Path(__file__).resolve().parent / "real_loggers"
MESSAGE = re.compile(r"epoch (\d+) loss=")


def nested_bars(path: Path, epochs: int = 3, batches: int = 5) -> bytes:
    """What real tqdm writes into a job's log for an outer bar and an inner `leave=False` one."""
    with open(path, "wb") as log:
        subprocess.run([sys.executable, str(SCRIPTS / "tqdm_nested.py"), str(epochs), str(batches)],
                       stdout=log, stderr=subprocess.STDOUT, check=True, timeout=60, env={"PYTHONUNBUFFERED": "1"})  # fmt: skip
    return path.read_bytes()


@pytest.fixture(scope="module")
def nested_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("nested") / "output.log"
    return path, nested_bars(path)


@pytest.fixture(scope="module")
def long_nested_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("nested") / "output.log"
    return path, nested_bars(path, epochs=60, batches=4)


def check_shown(lines, epochs):
    """Every message in order, the outer bar once, in its last state; no inner bar at all."""
    assert [int(match.group(1)) for match in map(MESSAGE.match, lines) if match] == list(range(epochs))
    assert not any("batch" in line for line in lines), lines
    bars = [line for line in lines if line.startswith("epoch:")]
    assert len(bars) == 1 and f"{epochs}/{epochs}" in bars[0], lines


def test_real_nested_bars_show_as_on_a_terminal(nested_log):
    path, data = nested_log
    assert data.count(b"\n") > 20 and b"\x1b[A" in data  # the log holds every stroke
    expected = terminal_view(data)
    assert expected[:3] == [f"epoch {i} loss={1 / (i + 1):.4f}" for i in range(3)] and expected[-1] == "done"
    check_shown(expected, 3)
    assert terminal_lines(data.decode()) == expected
    source = FileLogSource(path)
    assert list(read_all_lines(source)) == expected
    for count in (1, 2, 5, 50):
        assert tail_lines(source, count) == expected[-count:]
    assert path.read_bytes() == data  # reading it changes nothing


def test_a_long_log_of_nested_bars_tails_as_the_whole_shows(long_nested_log):
    path, data = long_nested_log
    expected = terminal_view(data)
    assert len(expected) == 62
    source = FileLogSource(path)
    assert list(read_all_lines(source)) == expected
    for count in (1, 3, 10, 61, 62, 500):
        assert tail_lines(source, count) == expected[-count:], count
    # the lines as written, escapes and all, for who asks for them
    raw = tail_lines(source, 3, strip_ansi=False)
    assert len(raw) == 3 and raw[-1] == "done"


CONTROLS = ["\r", "\n", "\b", "\x1b[A", "\x1b[2A", "\x1b[B", "\x1b[3B", "\x1b[C", "\x1b[4D", "\x1b[E", "\x1b[F", "\x1b[2F",
            "\x1b[5G", "\x1b[G", "\x1b[K", "\x1b[0K", "\x1b[1K", "\x1b[2K", "\x1b[J", "\x1b[1J", "\x1b[2J", "\x1b[3;4H",
            "\x1b[H", "\x1b[32m", "\x1b[0m", "\x1b]0;title\x07", "\x1b[?25l", "\x1bD"]  # fmt: skip
# (not ESC E, next line: pyte moves it down without returning to the line's start, as terminals do)


@pytest.mark.parametrize("seed", range(40))
def test_random_strokes_show_as_pyte_shows_them(seed):
    pick = random.Random(seed)
    words = ["", "a", "bar", "█▌", "100%|", "é", "a longer line of text", " " * 7]
    parts = [pick.choice(CONTROLS) if pick.random() < 0.5 else pick.choice(words) for _ in range(pick.randrange(1, 300))]
    text = "".join(parts)
    assert terminal_lines(text, height=6) == terminal_view(text.encode(), rows=6), repr(text)


def test_a_followed_log_prints_settled_lines_not_redraws(long_nested_log):
    path, data = long_nested_log
    expected = terminal_view(data)
    pick = random.Random(1)
    settled, printed, position = SettledLines(), [], 0
    while position < len(data):  # as `logs -f` reads it: complete lines, as many as the job wrote
        end = data.find(b"\n", min(len(data) - 1, position + pick.randrange(1, 400))) + 1 or len(data)
        printed += settled.feed(data[position:end].decode())
        position = end
    printed += settled.end()
    messages = [line for line in printed if MESSAGE.match(line)]
    assert messages == [line for line in expected if MESSAGE.match(line)]  # each once, in order
    assert not any("batch" in line for line in printed)
    assert printed[-2:] == expected[-2:]  # the outer bar's last state, then "done"
    assert len(printed) < data.count(b"\n") / 2, printed


def test_a_log_of_one_endless_bar_costs_what_a_tail_costs(tmp_path):
    """A bar redrawn with \\r for hours, never ending its line: the tail reads a bounded end of it."""
    log = tmp_path / "output.log"
    with open(log, "wb") as handle:
        for block in range(8):
            handle.write(b"".join(b"\r%6d/999999 [%s]" % (i, b"#" * (i % 40)) for i in range(block * 40000, (block + 1) * 40000)))

    class Counting(FileLogSource):
        read_bytes = 0

        def read(self, offset, limit):
            data = super().read(offset, limit)
            Counting.read_bytes += len(data)
            return data

    assert log.stat().st_size > 8 * TAIL_MIN_BYTES
    lines = tail_lines(Counting(log), 20)
    assert lines == ["319999/999999 [#######################################]"]
    assert Counting.read_bytes <= 2 * TAIL_MIN_BYTES + 4096


# -- the views: the widget's log pane and its saved copy, the command line, the magic ----------------


def test_the_widget_log_pane_and_saved_copy_show_the_terminal_view(long_nested_log, store, fake_backend, backends):
    from test_widget import fake_job, shown_text

    from jupyter_trainer.view.job_html import log_html, saved_view_html
    from jupyter_trainer.view.monitor import JobMonitor

    _, data = long_nested_log
    expected = terminal_view(data)
    job = fake_job(store, backends)
    half = data.index(b"epoch 30 ")
    (job.run_dir / "output.log").write_bytes(data[:half])  # the view opens halfway through
    monitor = JobMonitor(job, log_lines=20, read_seconds=60)
    monitor.start()
    shown = monitor.log_text().split("\n")
    # the bars as they stood: the outer one once, the inner one (done, not yet erased) below it
    assert [line for line in shown if "epoch:" in line] == shown[-2:-1] and shown[-1].startswith("batch: 100%")
    pick, position = random.Random(2), half
    while position < len(data):  # the rest arrives in pieces that end anywhere, read by polls
        end = min(len(data), position + pick.randrange(1, 300))
        with open(job.run_dir / "output.log", "ab") as log:
            log.write(data[position:end])
        position = end
        monitor.read_log()
        shown = monitor.log_text().split("\n")
        assert not any("batch" in line for line in shown[:-1]), shown  # at most the bar being drawn, last
    assert monitor.log_text().split("\n") == expected[-20:]
    snapshot = monitor.snapshot(0.0)
    assert shown_text(log_html(snapshot)).strip().split("\n") == expected[-20:]
    saved = shown_text(saved_view_html(snapshot, "v1", 0.0).split("</style>")[-1].split("<script>")[0])
    assert saved.count("epoch: 100%") == 1 and "batch" not in saved and "epoch 59 loss" in saved


def host_job(name, script_args, workdir):
    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.jobs.submit import submit_detached

    script = (SCRIPTS / "tqdm_nested.py").read_text()
    prologue = f"import sys\nsys.argv[1:] = {script_args!r}\n"
    spec = build_spec(prologue + script, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    return submit_detached(spec, name=name).job


def test_the_command_line_and_the_magic_show_the_terminal_view(home, workdir, capsys):
    from test_cli import cli

    job = host_job("nested", ["4", "30"], workdir)
    followed = cli("logs", "nested", "-f")  # started while the job runs
    job.wait(timeout=60)
    source = job.log_source()
    data = source.read(0, source.size())
    expected = terminal_view(data)
    assert len(expected) == 6 and data.count(b"\n") > 100
    assert cli("logs", "nested").stdout.splitlines() == expected
    assert cli("logs", "nested", "-n", "2").stdout.splitlines() == expected[-2:]
    assert job.logs(tail=3).splitlines() == expected[-3:]
    printed = followed.stdout.splitlines()
    assert followed.returncode == 0 and not any("batch" in line for line in printed), printed
    assert [line for line in printed if MESSAGE.match(line)] == expected[:4] and printed[-2:] == expected[-2:]
    assert len(printed) <= 20, printed  # no redraw storm: 120 inner bar strokes, a few outer ones

    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_trainer")
    capsys.readouterr()
    ip.run_line_magic("train_logs", "nested")
    assert capsys.readouterr().out.splitlines() == expected
    ip.run_line_magic("train_logs", "nested -n 1")
    assert capsys.readouterr().out.splitlines() == expected[-1:]
    assert source.read(0, source.size()) == data  # the log stays as the job wrote it
