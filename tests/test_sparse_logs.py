"""Sparse logs (`truncate -s 10G`, a job that seeks far ahead before it writes) and runs of NULs:
what following one costs is bounded, counted in bytes read from the log and bytes given to the
metric reader, poll by poll, on real sparse files."""

import os

import pytest

from jupyter_trainer.backends.base import FileLogSource
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.logs.reading import tail_lines
from jupyter_trainer.logs.source import LogSourceBase
from jupyter_trainer.metrics import cache as metrics_cache
from jupyter_trainer.metrics.reader import MetricReader
from jupyter_trainer.spec.job_spec import DetachedSpec
from jupyter_trainer.view.compare_runs import ComparedRun
from jupyter_trainer.view.job_widget import JobWidget
from jupyter_trainer.view.monitor import JobMonitor
from jupyter_trainer.view.poller import Poller

GiB = 1 << 30
TAIL_READ = 64 << 10  # what a view may read to show a log's last lines


@pytest.fixture(autouse=True)
def quiet_widgets(quiet_comm):
    """Views are made without a frontend: their traits are read."""


class Counted:
    """A job's log source that counts the bytes read from it (and the largest read since `take`)."""

    def __init__(self, source):
        self.source = source
        self.read_bytes = 0

    def take(self) -> int:
        read, self.read_bytes = self.read_bytes, 0
        return read


class CountedFile(FileLogSource, Counted):
    """The log's file on this machine, whose holes the file system tells apart."""

    def __init__(self, path):
        FileLogSource.__init__(self, path)
        self.read_bytes = 0

    def read(self, offset, limit):
        data = super().read(offset, limit)
        self.read_bytes += len(data)
        assert self.read_bytes < 256 << 20, "read hundreds of megabytes of a sparse log"
        return data


class CountedRemote(LogSourceBase, Counted):
    """The same log as a runtime gives it (read through the engine): no file on this machine, so
    its holes read as the NULs they are."""

    def __init__(self, path):
        self.file = FileLogSource(path)
        self.read_bytes = 0

    def size(self):
        return self.file.size()

    def read(self, offset, limit):
        data = self.file.read(offset, limit)
        self.read_bytes += len(data)
        assert self.read_bytes < 256 << 20, "read hundreds of megabytes of a sparse log"
        return data


def sparse_job(store, backends, name="sparse"):
    spec = DetachedSpec(script="x", backend="fake", workdir=os.getcwd())
    return submit_detached(spec, name=name, store=store, backends=backends).job


def write(job, text: str, ahead: int = 0) -> None:
    """Append `text`, `ahead` bytes past the log's end (a seek before the write: a hole)."""
    with open(job.run_dir / "output.log", "r+b" if (job.run_dir / "output.log").exists() else "wb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(ahead, os.SEEK_CUR)
        handle.write(text.encode())


def lines_of(start: int, stop: int) -> str:
    return "".join(f"step {step} loss: {1 / step:.4f}\n" for step in range(start, stop))


def counted(job, kind):
    source = kind(job.run_dir / "output.log")
    job.log_source = lambda: source
    return source


class Ticks:
    """The poller's clock: a second further at each tick (every push is due)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1.0
        return self.now


def fed_bytes(monitor) -> list[int]:
    """The bytes the view's metric reader is given, counted as they go (its CPU, by proxy)."""
    fed = [0]
    feed = monitor.reader.feed

    def counting(data, *args):
        fed[0] += len(data)
        return feed(data, *args)

    monitor.reader.feed = counting
    return fed


def test_a_view_of_a_10_gb_sparse_log_reads_what_was_written_and_shows_its_tail(store, fake_backend, backends):
    job = sparse_job(store, backends)
    write(job, lines_of(1, 5))
    os.truncate(job.run_dir / "output.log", 10 * GiB)  # truncate -s 10G
    write(job, lines_of(5, 40))
    source = counted(job, CountedFile)
    view = JobWidget(job, log_lines=20)
    fed = fed_bytes(view.monitor)
    assert "step 39 loss" in view.log.value and source.take() <= TAIL_READ  # the tail at once
    poller = Poller(clock=Ticks())
    poller.widgets.append(view)
    for tick in range(8):  # the job seeks another GiB ahead and writes a line now and then
        if tick % 2:
            write(job, lines_of(40 + tick, 41 + tick), ahead=GiB)
        fed[0] = 0
        poller.tick()
        read = source.take()
        assert read <= TAIL_READ and fed[0] <= TAIL_READ, f"poll {tick}: {read} bytes read, {fed[0]} given to the reader"
        assert view.monitor.caught_up
        if tick % 2:
            assert f"step {40 + tick} loss" in view.log.value  # the line at the tail, shown
    assert view.monitor.metrics.counts == {"loss": 4 + 35 + 4}  # every line written: none left out
    assert view.monitor.notes() == []


def test_a_log_read_through_a_runtime_leaves_a_run_of_nuls_unread_and_says_so(store, fake_backend, backends):
    """Where the holes cannot be told apart, a view reads at most a poll's budget of NULs: it goes
    on from the log's end, its last lines shown, and its metrics say what they leave out; a view
    opened later from the saved series says it too."""
    from jupyter_trainer.view.monitor import NUL_LOOK

    job = sparse_job(store, backends)
    write(job, lines_of(1, 5))
    os.truncate(job.run_dir / "output.log", 10 * GiB)
    write(job, lines_of(5, 40))
    source = counted(job, CountedRemote)
    view = JobWidget(job, log_lines=20)
    fed = fed_bytes(view.monitor)
    assert "step 39 loss" in view.log.value and source.take() <= TAIL_READ
    poller = Poller(clock=Ticks())
    poller.widgets.append(view)
    grown = []
    for tick in range(8):
        if tick % 2:
            write(job, lines_of(40 + tick, 41 + tick), ahead=GiB)
            grown.append(40 + tick)
        fed[0] = 0
        poller.tick()
        read = source.take()
        budget = (view.monitor.cursor.chunk_size if tick == 0 else NUL_LOOK) + TAIL_READ
        assert read <= budget and fed[0] <= budget, f"poll {tick}: {read} bytes read, {fed[0]} given to the reader"
        assert view.monitor.caught_up
        if tick % 2:
            assert f"step {40 + tick} loss" in view.log.value
    shown = view.log.value
    assert "step 39 loss" in shown and all(f"step {step} loss" in shown for step in grown)
    assert view.monitor.metrics.counts == {"loss": 4}  # the lines before the NULs: the rest unread
    assert 14 * GiB - (2 << 20) < view.monitor.unread < 14 * GiB
    assert view.monitor.notes() == ["metrics leave out 14.0 GiB of the log, not read: a run of NUL bytes"]
    assert "metrics leave out 14.0 GiB" in view.plot.value
    fake_backend.finish("sparse", 0)
    view.poll(now=1e9)  # the job ended: the series are saved
    again = JobMonitor(job)
    again.start()
    assert again.metrics.counts == {"loss": 4} and again.notes() == view.monitor.notes()


def test_a_run_of_nuls_is_read_at_the_cost_of_what_surrounds_it():
    """NULs read (a hole where it cannot be told apart) are seen through at once, and end the line
    they are on, as a hole passed over does: the same values either way."""
    lines = lines_of(1, 4).encode()

    def read(*pieces):
        points = []
        reader = MetricReader(points.append, [])
        for piece in pieces:
            if isinstance(piece, int):
                reader.skip_hole(reader.position + len(reader._buffer) + piece)
            else:
                reader.feed(piece)
        reader.flush()
        return [(name, x, value) for name, _, x, value in points]

    expected = read(lines + b"step 9 loss: 0.5\nstep 10 loss: 0.25\n")
    assert read(lines + b"step 9 loss: 0.5" + b"\0" * (1 << 20) + b"\nstep 10 loss: 0.25\n") == expected
    assert read(lines + b"step 9 loss: 0.5", 1 << 20, b"\nstep 10 loss: 0.25\n") == expected
    assert read(lines + b"step 9 loss: 0.5", b"\0" * 300, b"\0" * 5000 + b"step 10 loss: 0.25\n") == expected


def test_whole_log_readers_pass_over_the_holes(store, fake_backend, backends):
    """`job.metrics()` (and `jupyter-trainer metrics`), a comparison and `logs` read what was
    written, not the holes."""
    job = sparse_job(store, backends)
    write(job, lines_of(1, 5))
    write(job, lines_of(5, 8), ahead=4 * GiB)
    write(job, lines_of(8, 10), ahead=4 * GiB)
    source = counted(job, CountedFile)
    assert [value for _, value in job.metrics()["loss"]] == [round(1 / step, 4) for step in range(1, 10)]
    assert source.take() < 1 << 20
    run = ComparedRun(job, "loss").read_all()
    assert run.stats_of("loss").count == 9 and source.take() < 1 << 20
    assert job.logs().split("\n")[-3:] == ["step 8 loss: 0.1250", "step 9 loss: 0.1111", ""]
    assert tail_lines(source, 2) == ["step 8 loss: 0.1250", "step 9 loss: 0.1111"] and source.take() < 1 << 20


def test_a_line_of_megabytes_does_not_end_the_log(store, fake_backend, backends):
    """`logs` and `logs -f` go on past a line longer than a read (a run of NULs read, a bar that
    never ends its line): the lines after it are shown."""
    job = sparse_job(store, backends)
    write(job, "before\n" + "\0" * (3 << 20) + "x" * (3 << 20) + "\nafter\n")
    fake_backend.finish("sparse", 0)
    assert job.logs().split("\n")[-2:] == ["after", ""]
    followed = list(job.follow(interval=0.01))
    assert followed[0] == "before" and followed[-1] == "after"


def test_the_saved_series_carry_what_was_left_unread(store, fake_backend, backends):
    job = sparse_job(store, backends)
    write(job, lines_of(1, 5))
    monitor = JobMonitor(job)
    monitor.start()
    monitor.read_log()
    source = job.log_source()
    size = source.size()
    for unread, loaded in ((40, (size, 40)), (size + 1, None)):  # (more than it read: not one this wrote)
        metrics_cache.save(job.run_dir, [], size, source, monitor.metrics, monitor.reader, unread=unread)
        assert metrics_cache.load(job.run_dir, [], source, size, monitor.metrics, monitor.reader) == loaded


def test_a_short_tail_shows_its_lines_and_no_blank_rows_however_often_it_is_asked():
    """A tail that finds a few lines after a hole starts at the screen's bottom (what came before
    is not known): the rows above stay unshown once its lines scrolled up."""
    from jupyter_trainer.logs.terminal import Screen

    screen = Screen(at_bottom=True)
    screen.feed("a\nb\n")
    assert screen.take_scrolled() == []
    assert screen.lines() == ["a", "b"] and screen.lines() == ["a", "b"]
