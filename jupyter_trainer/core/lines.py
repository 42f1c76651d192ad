"""A machine's lines: jobs that wait their turn for its GPUs, or for a slot of a named queue, first
in, first out, with nothing of ours running but the waiting jobs themselves.

Every claim is a lock (flock) on a file, held by a process of the job: the kernel releases it when
the last process holding it ends, however it ends, so a killed, crashed or rebooted holder never
keeps a GPU. Everything lies under the machine's lines directory:

    ROOT/                      $JUPYTER_TRAINER_LINES_DIR, else /var/tmp/jupyter-trainer-lines
      gpus/                    the machine's GPU line
        tickets/p-NS-ID        a place kept by the submitter for a job submitted at NS (ns since 1970),
                               until its waiter comes (at most RESERVED_SECONDS)
        tickets/w-NS-ID        a job waiting since NS: locked by its waiter
        tickets/r-NS-ID        a job whose turn came: locked by the job's processes
        tokens/INDEX           one per GPU: locked by the job that holds it
      queues/NAME/             a named queue (`jupyter-trainer queue NAME --max-running K`)
        tickets/..., tokens/SLOT   as above, one token per slot below max_running
        max_running            K (1 when absent)

A ticket holds JSON: who waits (job, run, user) and for what; once its turn has come, what it took.
The directories are made sticky and writable by all (1777): every user's jobs wait in the same
lines, and none can remove another's tickets, but for the user who made a directory (the owner of
a sticky directory may): on a server shared with users one does not trust, root makes them first.
Files are opened without following links, and only regular files count; what a ticket says is read
bounded and checked, as anything a job can write.

Standard library only, Python 3.7 or later: a job's waiter (backends/wait_turn.py) runs this code
on the job's own python3, in its container, after wording.py's and nvidia_smi.py's.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import time

LINES_ENV = "JUPYTER_TRAINER_LINES_DIR"
DEFAULT_ROOT = "/var/tmp/jupyter-trainer-lines"
GPU_LINE = "gpus"
QUEUES = "queues"
TICKETS = "tickets"
TOKENS = "tokens"
MAX_RUNNING_FILE = "max_running"
QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
TICKET_NAME = re.compile(r"([wrp])-(\d{20})-([0-9a-f]{16})")
RESERVED_SECONDS = 30.0  # how long a place kept at submission waits for its waiter (see reserve_place)
TICKET_BYTES = 4096  # what a ticket says is a few hundred bytes
MAX_RUNNING_LIMIT = 10000
SHARED_DIR_MODE = 0o1777


class LineError(Exception):
    """A line that cannot be used: its directory is not one, or not ours to use."""


def lines_root(environ=None) -> str:
    environ = os.environ if environ is None else environ
    return environ.get(LINES_ENV) or DEFAULT_ROOT


def line_dir(root: str, queue=None) -> str:
    """The GPU line's directory, or a named queue's."""
    if queue is None:
        return os.path.join(root, GPU_LINE)
    if not QUEUE_NAME.fullmatch(queue):
        raise LineError("invalid queue name %r: use 1 to 63 letters, digits, '_', '.' or '-'" % queue[:40])
    return os.path.join(root, QUEUES, queue)


def ensure_root(root: str) -> None:
    """The lines directory itself, made (1777) where missing, checked to be a real directory."""
    _ensure_shared_dir(root)


def ensure_line(root: str, line: str) -> None:
    """The line's directories, made (1777) where missing, each checked to be a real directory."""
    for path in _dirs_down_to(root, line):
        _ensure_shared_dir(path)
    for part in (TICKETS, TOKENS):
        _ensure_shared_dir(os.path.join(line, part))


def _dirs_down_to(root: str, line: str) -> list:
    paths = [root]
    relative = os.path.relpath(line, root)
    for part in relative.split(os.sep):
        paths.append(os.path.join(paths[-1], part))
    return paths


def check_line(root: str, line: str) -> None:
    """A LineError where a directory of the line (its root down to its tickets and tokens) is there
    but is not a real directory; nothing is made, and what is missing is fine (nothing waits yet)."""
    for path in [*_dirs_down_to(root, line), os.path.join(line, TICKETS), os.path.join(line, TOKENS)]:
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as error:
            raise LineError("cannot look at %s (%s)" % (path, error.strerror or error))
        if not stat.S_ISDIR(found.st_mode):
            raise LineError("%s is not a directory (a link, or a file)" % path)


def _ensure_shared_dir(path: str) -> None:
    try:
        os.mkdir(path, SHARED_DIR_MODE)
        os.chmod(path, SHARED_DIR_MODE)  # the umask took bits off
    except FileExistsError:
        pass
    except OSError as error:
        raise LineError("cannot make %s (%s)" % (path, error.strerror or error))
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode):
        raise LineError("%s is not a directory (a link, or a file)" % path)
    if found.st_uid != os.getuid() and found.st_uid != 0 and not found.st_mode & stat.S_ISVTX:
        # another user's directory that is not sticky: its owner could swap our tickets
        raise LineError("%s belongs to another user and is not sticky (mode %o)" % (path, found.st_mode & 0o7777))


# -- tickets -------------------------------------------------------------------------------------


class Ticket:
    """A ticket in a line: its file's name, whether its turn has come (or it is a place kept for a
    waiter to come), since when it waits."""

    __slots__ = ("path", "name", "running", "reserved", "since_ns")

    def __init__(self, path: str, name: str, running: bool, since_ns: int, reserved: bool = False):
        self.path, self.name, self.running, self.since_ns, self.reserved = path, name, running, since_ns, reserved

    @property
    def order(self) -> str:
        return self.name[2:]  # the same before and after its turn came

    def __repr__(self) -> str:
        return "Ticket(%r)" % self.name


def tickets(line: str) -> list:
    """The line's tickets, oldest first (neither their holders' life nor what they say is checked)."""
    try:
        names = os.listdir(os.path.join(line, TICKETS))
    except OSError:  # missing: nobody waits yet; not a directory: nobody can wait there
        return []
    found = []
    for name in names:
        match = TICKET_NAME.fullmatch(name)
        if match:
            found.append(
                Ticket(os.path.join(line, TICKETS, name), name, match[1] == "r", int(match[2]), match[1] == "p")
            )
    return sorted(found, key=lambda ticket: ticket.order)


def reserve_place(line: str, since_ns: int, key: str, says: dict) -> str:
    """Keep a job's place in line from its submission until its waiter comes (a waiter starts a
    moment after its job is submitted, and one submitted after it may start first): a ticket
    p-NS-KEY that counts as waiting for RESERVED_SECONDS, which the waiter takes (`take_ticket`)."""
    path = os.path.join(line, TICKETS, "p-%020d-%s" % (since_ns, key))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
        _rewrite(fd, says)
    finally:
        os.close(fd)
    return path


def take_ticket(line: str, says: dict, since_ns=None, key=None):
    """A new ticket in the line, locked by the caller: (its open file, its path). Its place is
    `since_ns` (when the job was submitted), else now; the place kept for it under `key`, if any, is
    taken over. It is locked before it has its name, so that nobody can take it for a dead one's."""
    tickets_dir = os.path.join(line, TICKETS)
    kept = isinstance(key, str) and re.fullmatch(r"[0-9a-f]{16}", key) is not None
    key = key if kept else os.urandom(8).hex()
    # made under a name nobody knows beforehand: a place kept shows its key to every user, and a
    # file planted at a name made with O_EXCL would stop the waiter
    new = os.path.join(tickets_dir, ".new-" + os.urandom(8).hex())
    fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _rewrite(fd, says)
        since = since_ns if isinstance(since_ns, int) and 0 < since_ns < 10**20 else time.time_ns()
        path = os.path.join(tickets_dir, "w-%020d-%s" % (since, key))
        try:
            os.rename(new, path)
        except PermissionError:  # another user's file planted at its name (sticky: ours cannot replace it)
            path = os.path.join(tickets_dir, "w-%020d-%s" % (since, os.urandom(8).hex()))  # the same place
            os.rename(new, path)
    except BaseException:
        os.close(fd)
        _unlink_quietly(new)
        raise
    if kept:  # its place is this ticket's now (after it is there: the place is never empty meanwhile)
        _unlink_quietly(os.path.join(tickets_dir, "p-%020d-%s" % (since, key)))
    return fd, path


def still_in_line(fd: int, path: str) -> bool:
    """Whether the ticket open at `fd` is still the file at `path` (not removed, nor replaced)."""
    return _same_file(fd, path)


def promote(fd: int, path: str, says: dict) -> str:
    """The ticket of a job whose turn has come: what it took written in, renamed r-... (which wakes
    those behind it). Returns its new path."""
    _rewrite(fd, says)
    directory, name = os.path.split(path)
    running = os.path.join(directory, "r" + name[1:])
    try:
        os.rename(path, running)
    except PermissionError:  # another user's file planted at its name (every user can read it off the line)
        running = os.path.join(directory, "r-%s-%s" % (name.split("-")[1], os.urandom(8).hex()))
        os.rename(path, running)
    return running


def _rewrite(fd: int, says: dict) -> None:
    data = json.dumps(says, sort_keys=True).encode("utf-8")[:TICKET_BYTES]
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def is_held(path: str) -> bool:
    """Whether a live process holds the file's lock (a ticket's holder, a token's). The file is
    opened read-only: another user's can be tested too; one that is not a regular file is not."""
    fd = _open_existing(path)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        return False
    finally:
        os.close(fd)  # also lets go of the lock taken by the test
    return False


def read_ticket(path: str) -> dict:
    """What a ticket says ({} when it cannot be read or is not a JSON object)."""
    fd = _open_existing(path)
    if fd is None:
        return {}
    try:
        data = os.pread(fd, TICKET_BYTES, 0)
    except OSError:
        return {}
    finally:
        os.close(fd)
    try:
        said = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return said if isinstance(said, dict) else {}


def live_waiting_ahead(line: str, mine: str, now_ns=None) -> list:
    """The tickets ahead of the one at path `mine` that still wait, and whose waiters live (or whose
    place is kept for a waiter to come). A dead one of this user's is removed on the way."""
    order = os.path.basename(mine)[2:]
    now_ns = time.time_ns() if now_ns is None else now_ns
    ahead = []
    found = tickets(line)
    # a place kept that its waiter is taking over is there a moment beside the ticket that takes it
    taken_over = {ticket.order for ticket in found if not ticket.reserved}
    for ticket in found:
        if ticket.order >= order or ticket.running:
            continue
        if ticket.reserved:
            if ticket.order in taken_over:
                continue
            if still_kept(ticket, now_ns):
                ahead.append(ticket)
            else:
                remove_if_dead(ticket.path)  # its waiter never came (its launch failed)
            continue
        if is_held(ticket.path):
            ahead.append(ticket)
        else:
            remove_if_dead(ticket.path)
    return ahead


def claimed(line: str, key: str) -> set:
    """What the jobs whose turn came and that still run say they took (their tickets' `key`: "gpus",
    a list of indices, or "slot", one): a second claim besides the tokens' locks, which a job can
    undo by removing or replacing its token's file while it runs on what the token gave it."""
    found = set()
    for ticket in tickets(line):
        if ticket.running and is_held(ticket.path):
            took = read_ticket(ticket.path).get(key)
            for index in took if isinstance(took, list) else [took]:
                if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < MAX_RUNNING_LIMIT:
                    found.add(index)
    return found


def remove_if_dead(path: str) -> None:
    """A ticket of this user's whose holder has gone is removed (a sticky directory lets nobody
    remove another's; theirs are passed over until their owner's next waiter removes them)."""
    fd = _open_existing(path)
    if fd is None:
        return
    try:
        if os.fstat(fd).st_uid != os.getuid():
            return
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _same_file(fd, path):  # still the file at that name, now locked by us: its holder is gone
            _unlink_quietly(path)
    except OSError:
        return
    finally:
        os.close(fd)


def remove_dead_tickets(line: str) -> None:
    now_ns = time.time_ns()
    for ticket in tickets(line):
        if not still_kept(ticket, now_ns):
            remove_if_dead(ticket.path)


def still_kept(ticket: Ticket, now_ns: int) -> bool:
    """Whether a place kept at submission still counts: for RESERVED_SECONDS after it was kept, by
    this machine's clock; one that clock puts further ahead (set back since) counts no longer."""
    return ticket.reserved and abs(now_ns - ticket.since_ns) < RESERVED_SECONDS * 1e9 and _regular(ticket.path)


def _regular(path: str) -> bool:
    """Whether `path` is a regular file (a link planted there, to anything, is not a place kept)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def reserved_until(ahead: list):
    """Seconds until the first place kept ahead stops counting (None: none is kept ahead)."""
    kept = [ticket.since_ns for ticket in ahead if ticket.reserved]
    return max(0.05, (min(kept) + RESERVED_SECONDS * 1e9 - time.time_ns()) / 1e9) if kept else None


# -- tokens: one per GPU, one per slot of a queue --------------------------------------------------


def open_token(line: str, token: int) -> int:
    """The token's file, opened (and made, where missing) for locking; read-only when it is
    another user's."""
    path = os.path.join(line, TOKENS, str(token))
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        except PermissionError:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:  # what it links to is nobody's token: never followed
            raise LineError("%s is a symbolic link, not a regular file" % path)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LineError("%s is not a regular file" % path)
    return fd


def kept_token(line: str, token: int, fd=None) -> int:
    """The token's file as kept open by a waiter: `fd`, unless the file at its name is another by
    now (replaced, or removed and made again): then that one, opened."""
    if fd is not None:
        if _same_file(fd, os.path.join(line, TOKENS, str(token))):
            return fd
        os.close(fd)
    return open_token(line, token)


def try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)


def token_held(line: str, token: int) -> bool:
    return is_held(os.path.join(line, TOKENS, str(token)))


def max_running(line: str) -> int:
    """How many of a named queue's jobs may run at once (1 unless set)."""
    fd = _open_existing(os.path.join(line, MAX_RUNNING_FILE))
    if fd is None:
        return 1
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return 1
    finally:
        os.close(fd)
    return int(text) if text.isdigit() and 1 <= int(text) <= MAX_RUNNING_LIMIT else 1


def set_max_running(line: str, count: int) -> None:
    """Sets how many of a named queue's jobs may run at once: written in place (the file is any
    user's to write: a queue is the machine's), which wakes the queue's first waiter."""
    if not 1 <= count <= MAX_RUNNING_LIMIT:
        raise LineError("--max-running must be between 1 and %d, not %d" % (MAX_RUNNING_LIMIT, count))
    path = os.path.join(line, MAX_RUNNING_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LineError("%s is not a regular file" % path)
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o666)
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"%d\n" % count, 0)
    finally:
        os.close(fd)


def _open_existing(path: str):
    """A regular file opened read-only without following a link (None if it is missing, or is not one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _same_file(fd: int, path: str) -> bool:
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -- what a line holds now, for `jupyter-trainer queue` ----------------------------------------------


def line_now(line: str) -> tuple:
    """(the jobs whose turn came and that still run, the jobs that wait), each as its ticket says
    (with `since`: seconds since 1970), oldest first. Tickets whose holders have gone are left out."""
    running, waiting = [], []
    now_ns = time.time_ns()
    for ticket in tickets(line):
        kept = still_kept(ticket, now_ns)
        if not kept and not is_held(ticket.path):
            continue
        said = read_ticket(ticket.path)
        said["since"] = ticket.since_ns / 1e9
        (running if ticket.running else waiting).append(said)
    return running, waiting


def queue_names(root: str) -> list:
    try:
        names = os.listdir(os.path.join(root, QUEUES))
    except OSError:
        return []
    return sorted(name for name in names if QUEUE_NAME.fullmatch(name))
