"""Sparse logs (`truncate -s 10G`, a job that seeks far ahead before it writes) and runs of NULs:
what following one costs is bounded, counted in bytes read from the log and bytes given to the
metric reader, poll by poll, on real sparse files."""

import os

import pytest

from jupyter_trainer import metrics_cache
from jupyter_trainer.backends.base import FileLogSource
from jupyter_trainer.compare_runs import ComparedRun
from jupyter_trainer.logs import tail_lines
from jupyter_trainer.metrics import MetricReader
from jupyter_trainer.monitor import JobMonitor
from jupyter_trainer.spec import DetachedSpec
from jupyter_trainer.submit import submit_detached
from jupyter_trainer.widget import JobWidget, Poller

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


class CountedRemote(Counted):
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


def test_a_line_of_megabytes_does_not_end_the_log(store, fake_backend, backends):
    """`logs` and `logs -f` go on past a line longer than a read (a run of NULs read, a bar that
    never ends its line): the lines after it are shown."""
    job = sparse_job(store, backends)
    write(job, "before\n" + "\0" * (3 << 20) + "x" * (3 << 20) + "\nafter\n")
    fake_backend.finish("sparse", 0)
    assert job.logs().split("\n")[-2:] == ["after", ""]
    followed = list(job.follow(interval=0.01))
    assert followed[0] == "before" and followed[-1] == "after"


def test_a_short_tail_shows_its_lines_and_no_blank_rows_however_often_it_is_asked():
    """A tail that finds a few lines after a hole starts at the screen's bottom (what came before
    is not known): the rows above stay unshown once its lines scrolled up."""
    from jupyter_trainer.terminal import Screen

    screen = Screen(at_bottom=True)
    screen.feed("a\nb\n")
    assert screen.take_scrolled() == []
    assert screen.lines() == ["a", "b"] and screen.lines() == ["a", "b"]
