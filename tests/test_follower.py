"""The one follower of a growing log (logs/follower.py), on a log held in memory: what each caller
relies on, said by its parameters (when the run is confirmed, the budget of a call, runs of NULs)."""

import pytest

from jupyter_trainer.errors import JobReplaced
from jupyter_trainer.logs.follower import ONE_READ, Budget, Confirm, LogFollower, NulRuns
from jupyter_trainer.logs.source import LogSourceBase


class MemoryLog(LogSourceBase):
    """A log of bytes held here, with the calls asked of it counted."""

    def __init__(self, data: bytes = b""):
        self.data = bytearray(data)
        self.sizes_asked = 0
        self.reads = 0
        self.settled = 0

    def size(self):
        self.sizes_asked += 1
        return len(self.data)

    def read(self, offset, limit):
        self.reads += 1
        return bytes(self.data[offset : offset + limit])

    def settle(self):
        self.settled += 1


def still_there():
    pass


def follow(follower, log, budget=Budget()):
    """Every read's whole lines, the truncation lines among them, and the call's Reading."""
    taken = []

    def take(read):
        if read.truncation:
            taken.append(read.truncation)
        taken.extend(bytes(read.data).decode().splitlines())

    return taken, follower.read(log, take, budget)


def test_a_truncation_is_said_once_and_followed_from_the_new_start():
    log = MemoryLog(b"old line 1\nold line 2\n")
    follower = LogFollower(still_there, Confirm.BEFORE_READING)
    assert follow(follower, log)[0] == ["old line 1", "old line 2"]
    log.data[:] = b"new\n"
    lines, reading = follow(follower, log)
    assert [line for line in lines if "truncated" in line] == [lines[0]]  # said once, before what follows
    assert lines[1:] == ["new"] and reading.moved and reading.caught_up
    log.data += b"next\n"
    lines, _ = follow(follower, log)
    assert lines == ["next"]  # not said again


def test_a_budget_bounds_the_bytes_and_the_reads_of_one_call():
    log = MemoryLog(b"".join(b"line %04d\n" % number for number in range(1000)))  # 10 bytes a line
    follower = LogFollower(still_there, Confirm.BEFORE_READING, chunk_size=100)
    lines, reading = follow(follower, log, Budget(max_bytes=250))
    # chunks of 100, then the 50 left of the budget: no read goes past it
    assert follower.cursor.offset == 250 and len(lines) == 25 and not reading.caught_up
    lines, reading = follow(follower, log, ONE_READ)
    assert follower.cursor.offset == 350 and lines[0] == "line 0025" and not reading.caught_up
    lines, reading = follow(follower, log)
    assert follower.cursor.offset == len(log.data) and reading.caught_up and lines[-1] == "line 0999"


def test_a_short_read_ends_a_call_only_when_the_budget_says_so():
    log = MemoryLog(b"a\nb\n")
    stopping = LogFollower(still_there, Confirm.BEFORE_READING)
    reading_on = LogFollower(still_there, Confirm.BEFORE_READING)
    reads = {}
    for name, follower, budget in (("stops", stopping, Budget(stop_when_short=True)), ("reads on", reading_on, Budget())):
        before = (log.reads, log.sizes_asked)
        _, reading = follow(follower, log, budget)
        reads[name] = (log.reads - before[0], log.sizes_asked - before[1], reading.caught_up)
    assert reads["stops"] == (1, 0, True)  # the short read says the log ended: nothing more asked
    assert reads["reads on"][0] == 2 and reads["reads on"][2]  # a second read finds nothing


def test_a_replaced_log_is_read_again_from_its_start():
    """Another run's log at the same path, as long as the old one or longer: its first bytes differ."""
    log = MemoryLog(b"run 1 epoch 1\nrun 1 epoch 2\n")
    follower = LogFollower(still_there, Confirm.BEFORE_READING)
    follow(follower, log)
    log.data[:] = b"run 2 epoch 1\nrun 2 epoch 2\nrun 2 epoch 3\n"
    lines, _ = follow(follower, log)
    assert "truncated" in lines[0] and lines[1:] == ["run 2 epoch 1", "run 2 epoch 2", "run 2 epoch 3"]
    assert follower.cursor.offset == len(log.data)


def test_a_replaced_run_raises_before_reading_or_is_said_once_caught_up(tmp_path):
    def replaced():
        raise JobReplaced("job 'x' (run 1) was removed and a new job of that name took its place")

    log_file = tmp_path / "job.log"
    log_file.write_bytes(b"line\n")

    class FileLog(MemoryLog):
        def local_file(self):
            return log_file

    before = LogFollower(replaced, Confirm.BEFORE_READING)
    with pytest.raises(JobReplaced):
        before.open(FileLog(b"line\n"), final=False)
    assert before.cursor.offset == 0
    before.open(MemoryLog(b"line\n"), final=False)  # a log read through a runtime: no path to be another's

    caught_up = LogFollower(replaced, Confirm.ONCE_CAUGHT_UP)
    caught_up.open(MemoryLog(), final=False)
    lines, reading = follow(caught_up, MemoryLog(b"line\n"))
    assert lines == ["line"] and reading.gone
    unfinished = LogFollower(replaced, Confirm.ONCE_CAUGHT_UP, chunk_size=5)
    reading = unfinished.read(MemoryLog(b"line\n" * 10), lambda read: None, ONE_READ)
    assert not reading.caught_up and not reading.gone  # not caught up yet: not looked at


def test_an_unended_line_is_kept_until_it_is_whole():
    log = MemoryLog(b"first\nsecond half")
    follower = LogFollower(still_there, Confirm.BEFORE_READING)
    lines, _ = follow(follower, log)
    assert lines == ["first"] and follower.cursor.pending == "second half"
    log.data += b" and the rest"
    lines, reading = follow(follower, log)
    assert lines == [] and reading.moved and follower.cursor.pending == "second half and the rest"
    log.data += b"\nthird\n"
    lines, _ = follow(follower, log)
    assert lines == ["second half and the rest", "third"] and follower.cursor.pending == ""


def test_the_shown_history_is_read_up_to_its_end_and_said_to_be_history():
    log = MemoryLog(b"shown 1\nshown 2\nnew 1\n")
    follower = LogFollower(still_there, Confirm.BEFORE_READING, history_end=16)
    kinds = []
    follower.read(log, lambda read: kinds.append((read.in_history, bytes(read.data))), Budget())
    assert kinds == [(True, b"shown 1\nshown 2\n"), (False, b"new 1\n")]


def test_a_long_run_of_nuls_is_left_unread_only_where_asked():
    log = MemoryLog(b"before\n" + b"\0" * 5000 + b"after\n")
    leaving = LogFollower(still_there, Confirm.BEFORE_READING, chunk_size=1024, nul_runs=NulRuns(left_after=2048, look=256))
    _, reading = follow(leaving, log)
    assert reading.nuls_left is not None and reading.nuls_left.end == len(log.data)
    assert leaving.cursor.offset == len(log.data) and leaving.history_end == len(log.data) and leaving.in_nuls
    reading_through = LogFollower(still_there, Confirm.BEFORE_READING, chunk_size=1024)
    lines, reading = follow(reading_through, log)
    assert reading.nuls_left is None and lines[-1].endswith("after")


def test_a_follower_that_reads_again_anyway_asks_no_size_and_the_source_is_settled_once():
    log = MemoryLog(b"a\n")
    follower = LogFollower(still_there, Confirm.BEFORE_READING)
    reading = follower.read(log, lambda read: None, ONE_READ, look_at_size=False)
    assert log.sizes_asked == 0 and reading.caught_up is None and reading.moved
    for _ in range(3):
        follower.open(log, final=True)
    follower.settle(log)
    assert log.settled == 1
