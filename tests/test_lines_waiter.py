"""A job's waiter sleeps while it waits: a look at its line does not wake it again (a token's file
closed is what tells the first in line that a holder ended), and it takes its turn once the
holder's lock is let go. The cost in time and CPU is measured in benchmarks/line_handoff.py."""

import contextlib
import fcntl
import json
import os
import select
import subprocess
import sys
import time

import pytest
from conftest import wait_for

from jupyter_trainer.backends import wait_turn
from jupyter_trainer.backends.turns import waiter_source
from jupyter_trainer.core import lines
from jupyter_trainer.core.lines import TOKENS, ensure_line, line_dir, open_token, set_max_running
from jupyter_trainer.core.nvidia_smi import SmiLook

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


@pytest.fixture
def no_nvidia_smi(monkeypatch):
    monkeypatch.setattr(wait_turn, "look_at_gpus", lambda: SmiLook((), (), present=False))


def held_token(line, token):
    """The token locked by another open file, as another job's process holds it."""
    fd = open_token(line, token)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def woken(watcher, seconds=0.2):
    return bool(select.select([watcher.fd], [], [], seconds)[0])


def watching_tokens(line):
    watcher = wait_turn.Watcher()
    assert watcher.fd is not None, "inotify cannot be had here"
    watcher.watch(os.path.join(line, TOKENS), wait_turn.TOKENS_EVENTS)
    return watcher


@pytest.mark.parametrize("kind", ["gpus", "queue"])
def test_a_look_at_a_held_line_does_not_wake_the_waiter_that_looked(tmp_path, no_nvidia_smi, kind):
    root = str(tmp_path / "lines")
    line = wait_turn.GpuLine(root, 1, [0, 1]) if kind == "gpus" else wait_turn.QueueLine(root, "q")
    ensure_line(root, line.dir)
    if kind == "queue":
        set_max_running(line.dir, 2)
    holders = [held_token(line.dir, 0), held_token(line.dir, 1)]
    watcher = watching_tokens(line.dir)
    for _ in range(3):  # as the waiter's loop: look, sleep, look
        assert line.try_take()[0] is None
        assert not woken(watcher), "the waiter's own look at the tokens woke it: it would never sleep"
    os.close(holders.pop(1))  # a holder ends
    assert woken(watcher)
    watcher.wait(0)
    taken = line.try_take()[0]
    assert taken == ([1] if kind == "gpus" else 1)
    assert len(line.kept()) == 1
    for token in (0, 1):  # the other holder still holds its own; the waiter holds what it took
        other = open_token(line.dir, token)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)
    os.close(holders[0])


def test_a_token_replaced_under_the_waiter_is_the_one_it_locks(tmp_path, no_nvidia_smi):
    root = str(tmp_path / "lines")
    line = wait_turn.GpuLine(root, 1, [0])
    ensure_line(root, line.dir)
    holder = held_token(line.dir, 0)
    assert line.try_take()[0] is None
    os.unlink(os.path.join(line.dir, TOKENS, "0"))  # the old file, still locked, is no token any more
    assert line.try_take()[0] == [0]
    fresh = open_token(line.dir, 0)
    with pytest.raises(BlockingIOError):
        fcntl.flock(fresh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fresh)
    os.close(holder)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_waiting_job_sleeps_until_the_holder_ends_then_runs(tmp_path):
    """The waiter as the supervisor runs it, on python3, behind a job that holds the one GPU."""
    root = tmp_path / "lines"
    line = line_dir(str(root))
    ensure_line(str(root), line)
    holder = held_token(line, 0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    asked = {"root": str(root), "queue": None, "gpus": 1, "pool": [0], "job": "j", "run": 1}
    (run_dir / "line").write_text(json.dumps(asked))
    (run_dir / "turn").write_bytes(b"")
    (run_dir / "wait_turn.py").write_bytes(waiter_source())
    ran = tmp_path / "ran"
    job = "import os, sys; open(sys.argv[1], 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
    command = [sys.executable, "-I", "-S", "-c", job, str(ran)]
    (tmp_path / "bin").mkdir()
    env = {**os.environ, "PATH": str(tmp_path / "bin")}  # no nvidia-smi
    argv = [sys.executable, "-I", str(run_dir / "wait_turn.py"), str(run_dir), *command]
    waiter = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while b"waiting" not in (run_dir / "turn").read_bytes():
            assert waiter.poll() is None, waiter.stderr.read()
            assert time.monotonic() < deadline, "the waiter never said it waits"
            time.sleep(0.05)
        before = cpu_seconds(waiter.pid)
        time.sleep(2)
        spent = cpu_seconds(waiter.pid) - before
        # a waiter that looks again at once spends about a core's worth (2 s); one that sleeps, none
        assert spent < 0.5, f"the waiter spent {spent:.2f} s of CPU in 2 s of waiting"
        assert not ran.exists()
        os.close(holder)
        assert waiter.wait(30) == 0, waiter.stderr.read()
        assert ran.read_text() == "0"
        assert json.loads((run_dir / "turn").read_bytes())["gpus"] == [0]
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        waiter.stderr.close()


class SaidTurn:
    """The waiter's turn file, as what it said, in order (said again: once, as TurnFile)."""

    def __init__(self):
        self.said = []

    def say(self, state):
        if not self.said or self.said[-1] != state:
            self.said.append(state)


def waiting_in_a_thread(root, line, since_ns, watcher=None):
    """wait_in on a thread of its own (its turn: what it says; `done`: what it took), with `watcher`
    (a new one by default)."""
    import threading

    turn, done = SaidTurn(), []
    says = {"job": "me", "run": 1, "user": os.getuid(), "pid": os.getpid(), "wants": "slot"}
    watcher = watcher or wait_turn.Watcher()
    thread = threading.Thread(target=lambda: done.append(wait_turn.wait_in(line, root, turn, says, watcher, since_ns)), daemon=True)
    thread.start()
    return turn, done, thread


def test_a_running_job_ahead_that_ends_does_not_move_a_waiter_up(tmp_path):
    """Two jobs wait ahead of this one, a third runs (its ticket r-...): its end frees a slot for the
    first in line, and this waiter, still third, says so (not second)."""
    root = str(tmp_path / "lines")
    line = wait_turn.QueueLine(root, "q")
    ensure_line(root, line.dir)
    set_max_running(line.dir, 1)
    slot = held_token(line.dir, 0)
    ticket, path = lines.take_ticket(line.dir, {"job": "running"}, since_ns=1)
    lines.promote(ticket, path, {"job": "running", "slot": 0})
    ahead = [lines.take_ticket(line.dir, {"job": name}, since_ns=since)[0] for name, since in (("a", 2), ("b", 3))]
    turn, done, thread = waiting_in_a_thread(root, line, 10)
    try:
        wait_for(lambda: turn.said and turn.said[-1].get("ahead") == 2, timeout=10, what="the waiter to say two wait ahead")
        os.close(ticket)  # the running job ends (the first in line takes its slot: not this one's affair)
        os.close(slot)
        time.sleep(0.5)
        assert [state["ahead"] for state in turn.said] == [2]
    finally:
        for fd in ahead:
            os.close(fd)
        thread.join(10)
    assert done and done[0][0] == 0


def test_a_place_kept_ahead_whose_waiter_never_came_stops_counting_in_its_time_while_others_come_behind(tmp_path):
    """A place kept ahead counts for RESERVED_SECONDS: the waiter behind it looks again then, though
    jobs keep coming and going behind it meanwhile (each woke it, and it slept its whole wait again)."""
    root = str(tmp_path / "lines")
    line = wait_turn.QueueLine(root, "q")
    ensure_line(root, line.dir)
    expires_in = 1.0
    since = time.time_ns() - int((lines.RESERVED_SECONDS - expires_in) * 1e9)
    lines.reserve_place(line.dir, since, "0123456789abcdef", {"job": "never-came", "kept": True})
    started = time.monotonic()
    turn, done, thread = waiting_in_a_thread(root, line, since + 10**9)
    while not done and time.monotonic() - started < 5:  # a sweep's jobs come and go behind it
        fd, _path = lines.take_ticket(line.dir, {"job": "behind"})
        os.close(fd)
        time.sleep(0.2)
    took = time.monotonic() - started
    thread.join(10)
    assert done and took < expires_in + 1.5, f"the waiter took its turn {took:.1f} s after it started waiting, its place kept ahead for {expires_in} s"


def inotify_watches(watcher):
    """The inode numbers the watcher's inotify instance watches, as the kernel lists them."""
    with open(f"/proc/self/fdinfo/{watcher.fd}") as handle:
        return sorted(int(line.split("ino:")[1].split()[0], 16) for line in handle if line.startswith("inotify wd:"))


def takes_the_slot_once_free(slot, done, thread):
    os.close(slot)
    thread.join(10)
    assert done and done[0][0] == 0


def close_all(tickets, thread):
    """The tickets ahead let go (a waiter that failed its test ends too)."""
    for fd, _path in tickets:
        with contextlib.suppress(OSError):
            os.close(fd)
    thread.join(10)


def test_a_waiter_far_back_watches_only_the_ticket_just_ahead_of_it_and_takes_its_turn_once_that_left(tmp_path, monkeypatch):
    """Three wait ahead: a change anywhere else in the line (the first in line ending) wakes it not,
    its shown place stays until it looks; the one just ahead leaving wakes it, and it takes its turn
    once the slot is free. (In a sweep of hundreds every waiter woke at every change.)"""
    monkeypatch.setattr(wait_turn, "FAR_LOOKS", (60.0, 60.0, 0.1))  # no look at the line meanwhile
    root = str(tmp_path / "lines")
    line = wait_turn.QueueLine(root, "q")
    ensure_line(root, line.dir)
    set_max_running(line.dir, 1)
    slot = held_token(line.dir, 0)  # a job runs
    ahead = [lines.take_ticket(line.dir, {"job": name}, since_ns=since) for name, since in (("a", 2), ("b", 3), ("c", 4))]
    watcher = wait_turn.Watcher()
    assert watcher.fd is not None, "inotify cannot be had here"
    turn, done, thread = waiting_in_a_thread(root, line, 10, watcher)
    just_ahead = os.stat(ahead[2][1]).st_ino
    try:
        wait_for(lambda: turn.said and turn.said[-1].get("ahead") == 3, timeout=10, what="the waiter to say three wait ahead")
        wait_for(lambda: inotify_watches(watcher) == [just_ahead], timeout=10, what="the waiter to watch the ticket just ahead alone")
        os.close(ahead[0][0])  # the first in line ends: nothing of this waiter's affair yet
        os.close(ahead[1][0])
        time.sleep(0.5)
        assert [state["ahead"] for state in turn.said] == [3] and not done
        os.close(ahead[2][0])  # the one just ahead: now it is first, and waits for the slot
        wait_for(lambda: turn.said[-1].get("ahead") == 0, timeout=10, what="the waiter to say it is first")
        assert not done
        takes_the_slot_once_free(slot, done, thread)
    finally:
        close_all(ahead, thread)


def test_a_line_of_waiters_far_back_each_takes_its_turn_in_order(tmp_path, monkeypatch):
    """Ten waiters behind a running job, one slot: each watches the one just ahead once three or more
    wait ahead of it; as each job ends, the next takes the slot, in their order, none left behind."""
    monkeypatch.setattr(wait_turn, "FAR_LOOKS", (60.0, 60.0, 0.1))  # their turns come from what they watch alone
    root = str(tmp_path / "lines")
    line = wait_turn.QueueLine(root, "q")
    ensure_line(root, line.dir)
    set_max_running(line.dir, 1)
    slot = held_token(line.dir, 0)
    waiters = []
    for index in range(10):
        turn, done, thread = waiting_in_a_thread(root, line, 10 + index)
        waiters.append((turn, done, thread))
        wait_for(lambda: turn.said, timeout=10, what=f"waiter {index} to say it waits")
    order = []
    os.close(slot)
    for index, (turn, done, thread) in enumerate(waiters):
        wait_for(lambda: done, timeout=15, what=f"waiter {index} to take its turn")
        order.append(index)
        assert not any(other_done for _turn, other_done, _thread in waiters[index + 1 :]), "one took its turn out of order"
        for fd in done[0][1]:  # its job ends: what it took is let go
            os.close(fd)
    assert order == list(range(10))


class NoWatchLeftForTickets:
    """The waiter's libc, but no inotify watch is left for a ticket's file (the user's
    max_user_watches reached): inotify_add_watch fails with ENOSPC, as the kernel's does."""

    def __init__(self, libc, tickets_dir):
        self.libc, self.tickets_dir = libc, os.fsencode(tickets_dir)

    def inotify_add_watch(self, fd, path, mask):
        if os.path.dirname(path) == self.tickets_dir:
            import ctypes
            import errno

            ctypes.set_errno(errno.ENOSPC)
            return -1
        return self.libc.inotify_add_watch(fd, path, mask)

    def __getattr__(self, name):
        return getattr(self.libc, name)


@pytest.mark.parametrize("unwatchable", ["no_watch_left", "a_link_to_nothing"])
def test_a_waiter_far_back_that_cannot_watch_the_ticket_just_ahead_does_not_look_again_and_again(tmp_path, monkeypatch, unwatchable):
    """The ticket just ahead is there but cannot be watched (no inotify watch is left; a place kept
    p-... that is a link to nothing, as anyone can make one in the shared tickets directory): the
    waiter sleeps on the line's changes as one nearer the front does, and takes its turn once those
    ahead left (it took the failed watch for the ticket gone, and looked at the line again at once,
    thousands of times a second)."""
    monkeypatch.setattr(wait_turn, "FAR_LOOKS", (60.0, 60.0, 0.1))
    root = str(tmp_path / "lines")
    line = wait_turn.QueueLine(root, "q")
    ensure_line(root, line.dir)
    set_max_running(line.dir, 1)
    slot = held_token(line.dir, 0)  # a job runs
    now = time.time_ns()
    ahead = [lines.take_ticket(line.dir, {"job": name}, since_ns=now - 29 * 10**9 + index) for index, name in enumerate("abc")]
    tickets_dir = os.path.join(line.dir, lines.TICKETS)
    watcher = wait_turn.Watcher()
    assert watcher.fd is not None, "inotify cannot be had here"
    if unwatchable == "no_watch_left":
        watcher.libc = NoWatchLeftForTickets(watcher.libc, tickets_dir)
    else:  # kept just ahead for a few seconds more: the waiter looks again when it stops counting
        os.symlink(str(tmp_path / "nothing"), os.path.join(tickets_dir, "p-%020d-%s" % (now - int((lines.RESERVED_SECONDS - 3) * 1e9), "0" * 16)))
    looks = []
    look = wait_turn.live_waiting_ahead
    monkeypatch.setattr(wait_turn, "live_waiting_ahead", lambda *args: looks.append(1) or look(*args))
    turn, done = SaidTurn(), []
    says = {"job": "me", "run": 1, "user": os.getuid(), "pid": os.getpid(), "wants": "slot"}
    import threading

    thread = threading.Thread(target=lambda: done.append(wait_turn.wait_in(line, root, turn, says, watcher, now)), daemon=True)
    thread.start()
    try:
        wait_for(lambda: turn.said and turn.said[-1].get("ahead", 0) >= 3, timeout=10, what="the waiter to say three or more wait ahead")
        counted = len(looks)
        time.sleep(1.0)
        assert len(looks) - counted <= 2, f"the waiter looked at the line {len(looks) - counted} times in 1 s while nothing changed"
        for fd, _path in ahead:
            os.close(fd)
        os.close(slot)
        thread.join(10)
        assert done and done[0][0] == 0
    finally:
        for fd, _path in ahead:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.close(slot)
        thread.join(10)


def test_a_job_far_back_in_the_gpu_line_is_not_woken_by_the_queue_it_took_its_slot_in(tmp_path, monkeypatch, no_nvidia_smi):
    """A job waits in a queue, then in the GPU line (one waiter, one watcher, in that order): once
    it has its slot the queue's tickets coming and going are none of its affair. Far back in the GPU
    line each woke it still (the queue's watches were kept), and it looked at the whole GPU line."""
    monkeypatch.setattr(wait_turn, "FAR_LOOKS", (60.0, 60.0, 0.1))
    root = str(tmp_path / "lines")
    queue = wait_turn.QueueLine(root, "q")
    gpus = wait_turn.GpuLine(root, 1, [0])
    ensure_line(root, queue.dir)
    ensure_line(root, gpus.dir)
    gpu = held_token(gpus.dir, 0)  # a job runs on the one GPU
    ahead = [lines.take_ticket(gpus.dir, {"job": name}, since_ns=since) for name, since in (("a", 2), ("b", 3), ("c", 4))]
    looks = []
    look = wait_turn.live_waiting_ahead
    monkeypatch.setattr(wait_turn, "live_waiting_ahead", lambda line, *args: looks.append(line) or look(line, *args))
    watcher = wait_turn.Watcher()
    assert watcher.fd is not None, "inotify cannot be had here"
    turn, done = SaidTurn(), []
    says = {"job": "me", "run": 1, "user": os.getuid(), "pid": os.getpid()}

    def waits_in_both():
        slot, held = wait_turn.wait_in(queue, root, turn, dict(says, wants="slot"), watcher, 10)
        done.append((slot, held, wait_turn.wait_in(gpus, root, turn, dict(says, wants=1), watcher, 10)))

    import threading

    thread = threading.Thread(target=waits_in_both, daemon=True)
    thread.start()
    try:
        wait_for(lambda: turn.said and turn.said[-1].get("line") == "gpus" and turn.said[-1].get("ahead") == 3, timeout=10, what="the job to wait third in the GPU line")
        time.sleep(0.3)
        counted = len([line for line in looks if line == gpus.dir])
        for _ in range(10):  # a sweep's jobs come and go in the queue
            fd, _path = lines.take_ticket(queue.dir, {"job": "other"})
            os.close(fd)
            time.sleep(0.05)
        time.sleep(0.3)
        again = len([line for line in looks if line == gpus.dir]) - counted
        assert again == 0, f"10 changes in the queue made the job look at the GPU line {again} times"
        for fd, _path in ahead:
            os.close(fd)
        os.close(gpu)
        thread.join(10)
        assert done and done[0][0] == 0 and done[0][2][0] == [0]
    finally:
        for fd, _path in ahead:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.close(gpu)
        thread.join(10)


def test_without_inotify_a_waiter_far_back_looks_at_the_ticket_just_ahead_not_at_the_line(tmp_path, monkeypatch):
    """A user has 128 inotify instances: in a sweep of hundreds, most waiters have none and look every
    POLL_SECONDS. Far back, that look is at the ticket just ahead alone (it read every ticket of the
    line, hundreds of waiters every second); the line is looked at again once that one has left."""
    monkeypatch.setattr(wait_turn, "FAR_LOOKS", (60.0, 60.0, 0.1))
    looks = []
    real_look = wait_turn.live_waiting_ahead
    monkeypatch.setattr(wait_turn, "live_waiting_ahead", lambda *args: looks.append(1) or real_look(*args))
    root = str(tmp_path / "lines")
    line = wait_turn.QueueLine(root, "q")
    ensure_line(root, line.dir)
    set_max_running(line.dir, 1)
    slot = held_token(line.dir, 0)
    ahead = [lines.take_ticket(line.dir, {"job": name}, since_ns=since) for name, since in (("a", 2), ("b", 3), ("c", 4))]
    watcher = wait_turn.Watcher()
    os.close(watcher.fd)
    watcher.fd = None  # as when inotify_init1 fails (EMFILE: the user's instances are all taken)
    turn, done, thread = waiting_in_a_thread(root, line, 10, watcher)
    try:
        wait_for(lambda: turn.said and turn.said[-1].get("ahead") == 3, timeout=10, what="the waiter to say three wait ahead")
        time.sleep(3.5)
        assert len(looks) == 1, f"{len(looks)} looks at the whole line in 3.5 s while nothing moved"
        for fd, _path in ahead:
            os.close(fd)
        wait_for(lambda: turn.said[-1].get("ahead") == 0, timeout=10, what="the waiter to see the ones ahead gone")
        takes_the_slot_once_free(slot, done, thread)
    finally:
        close_all(ahead, thread)


def gpu_waiter(root, wants, pool, since_ns):
    """A waiter for `wants` GPUs of `pool` on a thread of its own, in its place `since_ns`."""
    return waiting_in_a_thread(root, wait_turn.GpuLine(root, wants, pool), since_ns)


def test_a_first_in_line_that_an_older_place_came_ahead_of_lets_go_of_the_gpus_it_locked(tmp_path, no_nvidia_smi):
    """Two GPUs, one held: the first in line, asking for two, locks the free one and waits for the
    other. A job started again in its older place comes ahead of it, asking for two as well. The
    one no longer first lets go of what it locked: it held GPU 0 from the new first, which waited
    for GPU 0 while the other waited for it to leave, for ever."""
    root = str(tmp_path / "lines")
    line = line_dir(root)
    ensure_line(root, line)
    holder = held_token(line, 1)
    later_turn, later_done, later_thread = gpu_waiter(root, 2, [0, 1], 10)
    older_done = []
    try:
        wait_for(lambda: later_turn.said and later_turn.said[-1].get("held_by_others") == 1, timeout=10, what="the first in line to wait for the held GPU")
        _turn, older_done, older_thread = gpu_waiter(root, 2, [0, 1], 5)
        wait_for(lambda: later_turn.said[-1].get("ahead") == 1, timeout=10, what="the later one to see the older place ahead of it")
        os.close(holder)
        older_thread.join(10)
        assert older_done, "the older place never got its two GPUs: the later one kept GPU 0 locked"
        assert older_done[0][0] == [0, 1]
        assert not later_done
        for fd in older_done[0][1]:
            os.close(fd)
        later_thread.join(10)
        assert later_done and later_done[0][0] == [0, 1]
    finally:
        with contextlib.suppress(OSError):
            os.close(holder)
        for done in (older_done, later_done):
            for fd in done[0][1] if done else []:
                with contextlib.suppress(OSError):
                    os.close(fd)


def test_an_older_place_that_came_ahead_of_the_first_takes_the_free_gpu_at_once(tmp_path, no_nvidia_smi):
    """Three GPUs, two held: the first in line asks for two and locks the free one. A job started
    again in an older place, asking for one, comes ahead: it is first now, and the free GPU is its
    own at once, not once a holder ends (nothing woke the one it came ahead of, which held it)."""
    root = str(tmp_path / "lines")
    line = line_dir(root)
    ensure_line(root, line)
    holders = [held_token(line, 1), held_token(line, 2)]
    later_turn, later_done, _later_thread = gpu_waiter(root, 2, [0, 1, 2], 10)
    older_done = []
    try:
        wait_for(lambda: later_turn.said and later_turn.said[-1].get("held_by_others") == 2, timeout=10, what="the first in line to wait for the held GPUs")
        _turn, older_done, older_thread = gpu_waiter(root, 1, [0, 1, 2], 5)
        older_thread.join(5)
        assert older_done and older_done[0][0] == [0], "the older place waited behind GPUs held, with GPU 0 free"
        assert not later_done
    finally:
        for fd in holders:
            os.close(fd)
        for done in (older_done, later_done):
            for fd in done[0][1] if done else []:
                with contextlib.suppress(OSError):
                    os.close(fd)


def test_a_place_kept_that_its_waiter_is_taking_over_counts_once(tmp_path):
    """A waiter takes over its place kept in two steps (its ticket renamed in, then the place
    removed): one behind that looks between them sees one job ahead, not two."""
    root = str(tmp_path / "lines")
    line = line_dir(root, "q")
    ensure_line(root, line)
    since, key = time.time_ns(), "0123456789abcdef"
    lines.reserve_place(line, since, key, {"job": "early", "kept": True})
    fd, path = lines.take_ticket(line, {"job": "early"}, since_ns=since, key=key)
    os.rename(path, path + ".aside")  # the place kept put back as it was a moment before
    lines.reserve_place(line, since, key, {"job": "early", "kept": True})
    os.rename(path + ".aside", path)
    mine = os.path.join(line, lines.TICKETS, "w-%020d-%s" % (since + 10**9, "f" * 16))
    try:
        assert [ticket.name[:1] for ticket in lines.live_waiting_ahead(line, mine)] == ["w"]
    finally:
        os.close(fd)


def test_a_link_planted_as_a_place_kept_ahead_does_not_hold_the_line(tmp_path):
    """Only a regular file is a place kept: a link named as one, just planted ahead of a waiter (to
    a place of the line, or to nothing), keeps it waiting not at all, where it held it 30 s."""
    root = str(tmp_path / "lines")
    line = wait_turn.QueueLine(root, "q")
    ensure_line(root, line.dir)
    set_max_running(line.dir, 1)
    since = time.time_ns()
    tickets_dir = os.path.join(line.dir, lines.TICKETS)
    os.symlink(os.path.join(tickets_dir, "max_running"), os.path.join(tickets_dir, "p-%020d-%s" % (since, "a" * 16)))
    os.symlink("/nonexistent", os.path.join(tickets_dir, "p-%020d-%s" % (since + 1, "b" * 16)))
    started = time.monotonic()
    turn, done, thread = waiting_in_a_thread(root, line, since + 10**9)
    thread.join(10)
    took = time.monotonic() - started
    assert done and done[0][0] == 0 and took < 3, f"the waiter took its turn after {took:.1f} s, behind two links"
    for fd in done[0][1]:
        os.close(fd)
