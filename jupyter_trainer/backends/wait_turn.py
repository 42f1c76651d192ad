"""A job's waiter: waits for the job's turn in its machine's lines, then runs the job and holds its turn.

The supervisor starts it in the job's place when the job waits in a line (`--queue NAME`, `--gpus N`):

    python3 -I RUN_DIR/wait_turn.py RUN_DIR COMMAND...

It reads what the job asked for from RUN_DIR/line (written by the submitter), waits in the named
queue for a slot, then in the GPU line for its GPUs (always in that order, so two jobs never wait
for each other), and says how it waits in RUN_DIR/turn. Once its turn has come it says what it took
there and runs COMMAND as its child, with CUDA_VISIBLE_DEVICES naming its GPUs, holding the locks on
what it took (the job inherits none) until the job's process ends, and ends as it ended: the kernel
releases them then. A job that left a process behind it (in the background, a daemon) has ended
all the same, and one that closes the files it inherited cannot let them go early. A TERM (a stop)
ends it while it waits, and its place in the line with it.

Waiting costs nothing: it sleeps in inotify until a ticket ahead leaves or a token is let go (a
process that ends closes its files, which inotify tells), and looks again; only the first in the
GPU line asks nvidia-smi, again every RECHECK_SECONDS while a GPU it could take is busy outside
us. Where inotify cannot be had, it looks every POLL_SECONDS.

Standard library only, Python 3.7 or later: it runs on the job's python3, in its container. What it
runs is wording.py's, nvidia_smi.py's and lines.py's code, then this file's (base.waiter_source).
"""

import json
import os
import select
import signal
import struct
import sys
import time
import traceback

try:  # as a module of the package; in a run, the code of these modules comes before this file's
    from ..core.lines import (
        GPU_LINE,
        LineError,
        claimed,
        ensure_line,
        is_held,
        kept_token,
        line_dir,
        live_waiting_ahead,
        max_running,
        promote,
        remove_dead_tickets,
        reserved_until,
        still_in_line,
        take_ticket,
        try_lock,
        unlock,
    )
    from ..core.nvidia_smi import busy_gpus, look_at_gpus
except ImportError:
    pass

LINE_FILE, TURN_FILE = "line", "turn"  # base.LINE_FILE, base.TURN_FILE
RECHECK_SECONDS = 5.0
CLAIM_RECHECK_SECONDS = 1.0
POLL_SECONDS = 1.0
IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_DELETE = 0x8, 0x10, 0x40, 0x80, 0x200
IN_IGNORED = 0x8000  # the watched directory is gone (removed): it is watched again once made again
# a ticket ahead leaves: its waiter ends (closes it), it is renamed r-... or removed; or one comes
# (renamed in), ahead of it if in an older place: a job started again by its keeper keeps its place
TICKETS_EVENTS = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_DELETE | IN_MOVED_TO
IN_ATTRIB, IN_DELETE_SELF, IN_MOVE_SELF = 0x4, 0x400, 0x800
# the ticket just ahead leaves: its waiter ends (closes it), it is renamed (its turn came) or removed
# (unlinked while open: its link count changes)
TICKET_EVENTS = IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF
FAR_AHEAD = 3  # a waiter this many places back or more watches only the ticket just ahead of it
FAR_LOOKS = (5.0, 60.0, 0.1)  # ... and looks at the whole line every 0.1 s a place ahead, within 5-60 s
TOKENS_EVENTS = IN_CLOSE_WRITE | IN_CLOSE_NOWRITE  # a holder ends
LINE_EVENTS = IN_CLOSE_WRITE | IN_MOVED_TO  # max_running is set


class TurnError(Exception):
    """What keeps the job from ever getting its turn: its reason."""


class Watcher:
    """Sleeps until a watched directory changes (inotify), or for POLL_SECONDS where it cannot."""

    def __init__(self):
        self.fd = None
        self.watched = {}  # the directories watched, by watch descriptor
        self.arrived = set()  # of what the last wait found changed, the files renamed in
        try:
            import ctypes

            self.libc = ctypes.CDLL(None, use_errno=True)
            fd = self.libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        except (ImportError, OSError, AttributeError):
            return
        self.fd = fd if fd >= 0 else None

    def watch(self, path, mask):
        """Watches the directory at `path` (again: it may be another by now, made again where it was
        removed; the same one keeps its watch)."""
        if self.fd is None:
            return
        descriptor = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if descriptor < 0:
            os.close(self.fd)
            self.fd = None
            return
        self.watched[descriptor] = path

    def watch_file(self, path, mask):
        """Watches the file at `path`; False when it cannot: gone, or there but not to be watched
        (no inotify watch left, a link to nothing, not ours to read). Without inotify: True, it is
        looked at every POLL_SECONDS."""
        if self.fd is None:
            return True
        descriptor = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if descriptor < 0:
            return False
        self.watched[descriptor] = path
        return True

    def unwatch(self, path):
        """No longer watches `path` (what it said meanwhile is dropped: see _names)."""
        if self.fd is None:
            return
        for descriptor in [d for d, watched in self.watched.items() if watched == path]:
            del self.watched[descriptor]
            self.libc.inotify_rm_watch(self.fd, descriptor)

    def wait(self, seconds=None):
        """What changed, as (directory, file name) pairs ([] after `seconds`; None where it cannot
        tell: without inotify, after POLL_SECONDS)."""
        if self.fd is None:
            time.sleep(POLL_SECONDS if seconds is None else min(seconds, POLL_SECONDS))
            return None
        deadline = None if seconds is None else time.monotonic() + seconds
        changed = []
        self.arrived = set()
        # what a watch taken off said is no change: it sleeps on (see _names)
        while not changed:
            left = None if deadline is None else _left(deadline)
            if not select.select([self.fd], [], [], left)[0]:
                break
            while True:  # what came meanwhile is one change: one look at the line
                try:
                    data = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    break
                if not data:
                    break
                changed += self._names(data)
        return changed

    def _names(self, data):
        found, at = [], 0
        while at + 16 <= len(data):
            descriptor, mask, _cookie, size = struct.unpack_from("iIII", data, at)
            name = data[at + 16 : at + 16 + size].split(b"\0", 1)[0].decode("utf-8", "replace")
            if descriptor >= 0 and descriptor not in self.watched:  # a watch taken off: what it said is old
                at += 16 + size
                continue
            found.append((self.watched.get(descriptor, ""), name))
            if mask & IN_MOVED_TO:
                self.arrived.add(found[-1])
            if mask & IN_IGNORED:
                self.watched.pop(descriptor, None)
            at += 16 + size
        return found


class TurnFile:
    """RUN_DIR/turn, made by the submitter and written in place here (see the supervisor's files)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.said = None

    def say(self, state):
        data = json.dumps(state, sort_keys=True).encode("utf-8")
        if data == self.said:
            return
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)
        self.said = data


class GpuLine:
    """The machine's GPU line: its first job takes the GPUs it asked for once that many are neither
    held by another job nor busy outside us."""

    def __init__(self, root, wants, pool):
        self.dir = line_dir(root, None)
        self.wants = wants
        self.pool = pool  # the GPUs offered, as the submitter's pool named them; None: nvidia-smi's
        # index -> its token, opened once and kept open while the job waits: closing one it could
        # not lock would wake this very waiter (its watch sees every close), which would look again
        # at once, and again, for as long as it waits
        self.tokens = {}
        self.mine = set()  # the indices whose tokens it locked: held for this job while it is first in line

    def describe(self):
        return {"line": GPU_LINE, "wants": self.wants}

    def try_take(self):
        """(the GPUs taken, {}), or (None, what keeps them, seconds until looking again or None)."""
        look = look_at_gpus()
        offered = self.pool
        if offered is None:
            if look.gpus is None:
                return None, {"unknown": look.problem or "nvidia-smi cannot tell"}, RECHECK_SECONDS
            offered = [gpu.index for gpu in look.gpus if not gpu.mig]
        if len(offered) < self.wants:
            raise TurnError(
                "asks for %d GPUs, and this machine offers %d (%s)" % (self.wants, len(offered), _listed(offered))
            )
        busy = busy_gpus(look) if look.present else frozenset()
        if busy is None:
            return None, {"unknown": look.problem or "nvidia-smi cannot tell"}, RECHECK_SECONDS
        # a token that cannot be one (a link, a directory, a FIFO planted at its name by any user,
        # which the sticky directory keeps there) keeps that GPU out, not the others: the job
        # fails only when what is left of the GPUs offered is fewer than it asks for
        unusable = []
        for index in offered:
            if index not in self.mine:
                try:
                    self.tokens[index] = kept_token(self.dir, index, self.tokens.get(index))
                except (LineError, OSError) as problem:
                    self.tokens.pop(index, None)  # (closed by kept_token, if it was open)
                    unusable.append(problem)
                    continue
                if try_lock(self.tokens[index]):
                    self.mine.add(index)
        if len(offered) - len(unusable) < self.wants:
            raise unusable[0]
        taken_by_others = claimed(self.dir, "gpus")  # held still, whatever became of their tokens' files
        usable = sorted(index for index in self.mine if index not in busy and index not in taken_by_others)
        if len(usable) >= self.wants:
            taken = usable[: self.wants]
            for index in list(self.tokens):
                if index not in taken:
                    os.close(self.tokens.pop(index))
            self.mine = set(taken)
            return taken, {}, None
        outside = sorted(index for index in self.mine if index in busy and index not in taken_by_others)
        held = len([index for index in offered if index not in self.mine or index in taken_by_others])
        # a token it holds that a running job's ticket still claims: that job is ending (its ticket is
        # let go a moment after its token) or removed its token's file; no event may come of either
        claimed_only = any(index in taken_by_others for index in self.mine)
        again = RECHECK_SECONDS if outside else CLAIM_RECHECK_SECONDS if claimed_only else None
        return None, {"held_by_others": held, "busy_outside": outside}, again

    def kept(self):
        return [self.tokens[index] for index in sorted(self.mine)]

    def let_go(self):
        """Lets go of the GPUs it locked while it was first in line, now that a place older than its
        own is ahead of it (a job started again by its keeper, a place kept): it would else hold
        them from the new first, which may wait for the very ones it holds. Closed, not unlocked:
        the close is what wakes the first in line."""
        for index in sorted(self.mine):
            os.close(self.tokens.pop(index))
        self.mine.clear()

    def took(self, taken):
        return {"gpus": taken}


class QueueLine:
    """A named queue: its first job takes a free slot below its max_running."""

    def __init__(self, root, name, bound=None):
        self.dir = line_dir(root, name)
        self.name = name
        self.bound = bound  # a sweep's --max-running, else the queue's own setting
        self.tokens = {}  # slot -> its token, kept open while the job waits (see GpuLine.tokens)
        self.slot = None

    def describe(self):
        return {"line": "queue", "queue": self.name}

    def try_take(self):
        allowed = self.bound if isinstance(self.bound, int) and self.bound > 0 else max_running(self.dir)
        taken_by_others = claimed(self.dir, "slot")  # held still, whatever became of their tokens' files
        claimed_only = False
        unusable = []  # (as GpuLine's: a slot whose token cannot be one keeps that slot out only)
        for slot in range(allowed):
            try:
                self.tokens[slot] = kept_token(self.dir, slot, self.tokens.get(slot))
            except (LineError, OSError) as problem:
                self.tokens.pop(slot, None)
                unusable.append(problem)
                continue
            if try_lock(self.tokens[slot]):
                if slot in taken_by_others:  # free, yet a running job's ticket claims it (see GpuLine)
                    unlock(self.tokens[slot])  # let go, not closed: a close would wake this very waiter
                    claimed_only = True
                    continue
                self.slot = self.tokens.pop(slot)
                for other in self.tokens.values():
                    os.close(other)
                self.tokens.clear()
                return slot, {}, None
        if len(unusable) >= allowed:
            raise unusable[0]
        return None, {"max_running": allowed}, CLAIM_RECHECK_SECONDS if claimed_only else None

    def kept(self):
        return [self.slot]

    def let_go(self):
        """(A queue's waiter holds no slot while it waits: it takes one, or unlocks it at once.)"""

    def took(self, slot):
        return {"queue": self.name, "slot": slot}


def wait_in(line, root, turn, says, watcher, since_ns=None, key=None):
    """Waits for the job's turn in `line`, in its place since `since_ns` (when the job was
    submitted: a job started again by its container's keeper keeps its place); returns what it took
    and the open files that hold it."""
    ensure_line(root, line.dir)
    remove_dead_tickets(line.dir)
    watcher.watch(os.path.join(line.dir, "tickets"), TICKETS_EVENTS)  # before looking: nothing slips by
    ticket, path = take_ticket(line.dir, says, since_ns, key)
    since = time.time()
    while True:
        ensure_line(root, line.dir)  # made again where removed (the lines wiped under it)
        watcher.watch(os.path.join(line.dir, "tickets"), TICKETS_EVENTS)  # (taken off again far back in line)
        if not still_in_line(ticket, path):  # its ticket removed too: back in its place
            place, key = os.path.basename(path).split("-")[1:]
            os.close(ticket)
            ticket, path = take_ticket(line.dir, says, int(place), key)
        waiting = live_waiting_ahead(line.dir, path)
        ahead = len(waiting)
        again = reserved_until(waiting)  # a place kept ahead of this one stops counting then
        if ahead == 0:
            watcher.watch(os.path.join(line.dir, "tokens"), TOKENS_EVENTS)
            watcher.watch(line.dir, LINE_EVENTS)
            taken, keeping, again = line.try_take()  # (nothing is kept ahead of the first in line)
            if taken is not None:
                promote(ticket, path, dict(says, **line.took(taken)))
                # its next line's waiter is this one: what comes of this line is no longer its affair
                for watched in (os.path.join(line.dir, "tickets"), os.path.join(line.dir, "tokens"), line.dir):
                    watcher.unwatch(watched)
                return taken, [ticket, *line.kept()]
        else:
            keeping = {}
            line.let_go()
        turn.say(dict(line.describe(), state="waiting", ahead=ahead, since=since, **keeping))
        if ahead >= FAR_AHEAD:
            _wait_far_back(watcher, line, waiting, again)
            continue
        left = set()  # the places of the tickets waiting ahead of this one seen leaving since its look
        # when to look again whatever comes meanwhile (a place kept ahead stops counting, a GPU busy
        # outside is asked about again): a change it sleeps on does not put that off
        deadline = None if again is None else time.monotonic() + again
        while True:  # a ticket coming or going behind this one changes nothing for it: it sleeps on
            changed = watcher.wait(None if deadline is None else _left(deadline))
            if changed is None or not changed:
                break
            ahead_of_it = [(where, name) for where, name in changed if not _behind(where, name, line.dir, path)]
            came = [
                name for _where, name in watcher.arrived.intersection(ahead_of_it) if name != os.path.basename(path)
            ]
            if any(name[:1] in "wp" for name in came):
                break  # a place older than its own came ahead of it: it is no longer first, or further back
            # (a ticket renamed r-... as its turn came: that it left its w-... place is what counts)
            ahead_of_it = [change for change in ahead_of_it if change not in watcher.arrived]
            if not ahead_of_it:
                continue
            # Not first in line, its turn comes once every ticket that waited ahead of it has left
            # (a running job's end frees what only the first in line takes): it looks again then,
            # not at every change ahead. A look reads every ticket of the line: in a sweep of
            # hundreds, each waiter looking at each change made the machine's load the square of it.
            kinds = [_change_ahead(where, name, line.dir) for where, name in ahead_of_it] if ahead else ["other"]
            if "other" in kinds:
                break
            left.update(name[2:] for (_where, name), kind in zip(ahead_of_it, kinds) if kind == "left")
            if len(left) >= ahead:
                break
            turn.say(
                dict(line.describe(), state="waiting", ahead=ahead - len(left), since=since)
            )  # its place, as it moves up


def _wait_far_back(watcher, line, waiting, again):
    """Sleep, far back in line, until the ticket just ahead leaves, a place kept ahead stops counting
    (`again` seconds), or, once a while has passed since its look (`FAR_LOOKS`), the line changes:
    then it looks again, to say its place. Its turn cannot come before the ticket just ahead has
    left, so that is all it watches meanwhile: in a sweep of hundreds, every waiter woke at every
    change, and a line that does not move wakes no one."""
    low, high, per_place = FAR_LOOKS
    quiet = min(high, max(low, per_place * len(waiting)))
    until = None if again is None else time.monotonic() + again
    just_ahead = waiting[-1]
    if watcher.fd is None:
        _poll_far_back(just_ahead, quiet, until)
        return
    tickets_dir = os.path.join(line.dir, "tickets")
    if not watcher.watch_file(just_ahead.path, TICKET_EVENTS):
        if not os.path.lexists(just_ahead.path):
            return  # it left before its watch: look again now
        # there, yet not to be watched (no inotify watch left, a place kept that is a link): it
        # sleeps on the line's changes, watched since its look, as a waiter nearer the front does
        # (taken for gone, it looked again at once, and again, thousands of times a second)
        watcher.wait(quiet if until is None else min(quiet, _left(until)))
        return
    watcher.unwatch(tickets_dir)  # (once the ticket just ahead is watched)
    try:
        if not _still_there(just_ahead):  # it may have left between the look and the watch
            return
        settled = time.monotonic() + quiet
        if watcher.wait(_left(settled if until is None else min(settled, until))):
            return  # the ticket just ahead left
        if until is not None and time.monotonic() >= until:
            return
        watcher.watch(tickets_dir, TICKETS_EVENTS)  # from now on, the line's next change is a look
        watcher.wait(None if until is None else _left(until))
    finally:
        watcher.unwatch(just_ahead.path)


def _poll_far_back(just_ahead, quiet, until):
    """Without inotify (a user has 128 instances: a sweep of hundreds waits beyond them), far back in
    line: whether the ticket just ahead is still there, every POLL_SECONDS (one file, where a look
    reads every ticket of the line: hundreds of waiters looking every second filled the machine),
    until it is time to look again."""
    settled = time.monotonic() + quiet
    while time.monotonic() < (settled if until is None else min(settled, until)):
        time.sleep(POLL_SECONDS)
        if not _still_there(just_ahead):
            return


def _still_there(ticket):
    """Whether a ticket ahead still waits: its file there, and held by its waiter (a place kept
    counts until it is taken over, renamed, or its time runs out)."""
    return os.path.exists(ticket.path) and (ticket.reserved or is_held(ticket.path))


def _left(deadline):
    return max(0.0, deadline - time.monotonic())


def _behind(directory, name, line, mine):
    """Whether a change to file `name` of `directory` is about a ticket behind the one at `mine` (or a
    ticket being made, not yet in line)."""
    if directory != os.path.join(line, "tickets"):
        return False
    if name.startswith("."):
        return True
    # a running job's ticket closed or removed: it ended, and what it claimed is free (wherever its place was)
    return len(name) > 2 and name[2:] > os.path.basename(mine)[2:] and name[0] in "wp"


def _change_ahead(directory, name, line):
    """What a change to file `name` of `directory`, ahead of a waiter that is not first in line,
    is to it: "left" (a waiting ticket w-... closed, renamed or removed), "running" (a running
    job's ticket r-...: what it frees goes to the first in line), "kept" (a place kept p-..., taken
    over by its waiter, who waits on in it, or removed past its time, when the waiter looks
    anyway), or "other" (look again)."""
    if directory != os.path.join(line, "tickets") or len(name) <= 2 or name[1] != "-":
        return "other"
    return {"w": "left", "r": "running", "p": "kept"}.get(name[0], "other")


def main(argv):
    if len(argv) < 3:
        raise TurnError("usage: wait_turn.py RUN_DIR COMMAND...")
    run_dir, command = argv[1], argv[2:]
    with open(os.path.join(run_dir, LINE_FILE), "rb") as handle:
        asked = json.loads(handle.read(1 << 16).decode("utf-8"))
    root = asked["root"]
    says = {"job": asked.get("job"), "run": asked.get("run"), "user": os.getuid(), "pid": os.getpid()}
    turn = TurnFile(os.path.join(run_dir, TURN_FILE))
    watcher = Watcher()
    kept, took = [], {"state": "running"}
    if asked.get("queue"):
        line = QueueLine(root, asked["queue"], asked.get("max_running"))
        slot, files = wait_in(
            line, root, turn, dict(says, wants="slot"), watcher, asked.get("since_ns"), asked.get("ticket")
        )
        kept += files
        took.update(line.took(slot))
    env = dict(os.environ)
    if asked.get("gpus"):
        line = GpuLine(root, int(asked["gpus"]), asked.get("pool"))
        place = None if asked.get("queue") else asked.get("ticket")  # its place was kept in its first line only
        gpus, files = wait_in(line, root, turn, dict(says, wants=line.wants), watcher, asked.get("since_ns"), place)
        kept += files
        took.update(line.took(gpus))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in gpus)
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA's numbers as nvidia-smi's
    took["started_at"] = time.time()
    turn.say(took)
    if watcher.fd is not None:  # (a user's inotify instances are few: a running job keeps none)
        os.close(watcher.fd)
    sys.exit(run_holding(command, env))


def run_holding(command, env):
    """Runs the job as this process's child, holding what it took (the locks' files, kept here and
    never inherited) until the job's own process ends; then ends as it ended. Neither what the job
    leaves behind (a child in the background, a daemon) nor a job that closes the files it
    inherited decides when its GPUs are let go: its end does."""
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            _die_with(parent)  # a waiter killed alone takes the job with it: never a job without its locks
            # ignored by Python: the job's own program starts with them as a shell's would
            for name in ("SIGPIPE", "SIGXFSZ"):
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            os.execvpe(command[0], command, env)
        except BaseException as error:
            said = error.strerror if isinstance(error, OSError) and error.strerror else error
            say_failure(TurnError("cannot run %s (%s)" % (command[0], said)))
        os._exit(127)
    # a stop signals the job's whole group, the job with it: this process outlives the job, whose
    # exit it waits for, however long it takes to stop (its group is KILLed after the grace period);
    # so does what the job sends its own group (a framework telling its workers), which would else
    # end this process, and the job with it
    for number in _ASYNC_SIGNALS + list(range(getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1) + 1)):
        try:
            signal.signal(number, signal.SIG_IGN)
        except (OSError, ValueError):
            pass
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):  # ended as the job did, for its supervisor to say so (137: KILLed)
        number = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the job's core, if any, not this one's
        except (ImportError, OSError, ValueError):
            pass
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):  # KILL: never caught anyway
            pass
        os.kill(os.getpid(), number)
        return 128 + number
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


_ASYNC_SIGNALS = [
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE", "SIGVTALRM",
                 "SIGPROF", "SIGXCPU", "SIGXFSZ", "SIGPWR", "SIGIO", "SIGSTKFLT")
    if hasattr(signal, name)
]  # fmt: skip


def _die_with(parent):
    """The calling (child) process is KILLed when its parent ends (Linux's PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (ImportError, OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the prctl
        os._exit(137)


def _listed(indices):
    return ", ".join(str(index) for index in indices) or "none"


def say_failure(problem):
    """The job's reason, said as Python says an uncaught error, in one frame: a failed job's reason
    is the last line after a traceback in its log (see notify.exception_line)."""
    said = (
        problem
        if isinstance(problem, (TurnError, LineError))
        else TurnError(problem).with_traceback(problem.__traceback__)
    )
    if said.__traceback__ is None:  # never raised: Python would print no traceback's first line
        sys.stderr.write("Traceback (most recent call last):\n")
    traceback.print_exception(type(said), said, said.__traceback__, limit=-1, chain=False)
    sys.stderr.flush()


if __name__ == "__main__":
    try:
        main(sys.argv)
    except (TurnError, LineError, OSError, ValueError, KeyError) as problem:
        say_failure(problem)
        sys.exit(1)
