"""The job store: one directory per job, one sub-directory per run.

    $JUPYTER_TRAINER_HOME/jobs/<name>/<run>/record.json   the JobRecord
                                             script.py     the cell body, or the file as submitted
                                             launch.py     runs it as a file of the working directory
                                             launch_target which file that is, where the job runs
                                             output.log    stdout + stderr
                                             pid, exit_code  written by the supervisor

Several kernels and the CLI share it. A run is created under its name's claim
(a lock on the job's directory), so two processes can never create the same name
and run, and it appears with its record: its directory is made under a hidden
`.creating-RUN-TOKEN` name, locked by its maker, its record written, and then
renamed into place. A submission killed half-way leaves that hidden directory,
unlocked, and never a run without a record; the next submission, `rm` or `prune`
of the name removes it (`abandoned`). Records are replaced atomically (write,
fsync, rename) so readers never see half a record, and read-modify-write goes
through an advisory lock on the run directory. Directories are 0700 and files 0600.

Removing a run is two steps: one rename takes it out of every listing at once
(its directory becomes a hidden `.removing-RUN-TOKEN` beside the runs), then its
files are deleted. A run whose files could not all be deleted stays hidden, and
is found again (`leftovers`) by the next `rm` or `prune`, which finish it.

Only a real directory under those hidden names (or a run's number) is the store's: a job writes
beside its run, and a link or a file it puts there is left alone, never followed nor removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from .. import surface
from ..errors import CorruptRecord, StoreError, UnknownJob
from . import files as _fs
from .files import create_private_file, flocked, make_private_dir, write_private_file
from .record import NAME_PATTERN, JobRecord, validate_name

# The files of every run, named here. The supervisor (backends/supervise.sh) writes LOG_FILE,
# PID_FILE and EXIT_CODE_FILE under these names; tests/test_store.py checks that it does. A backend
# names the files it keeps beside them in its own package (its declaration's `run_files`), and the
# registry hands them to `run_files`, which says whose each is.
RECORD_FILE = "record.json"  # the JobRecord
LOCK_FILE = "record.lock"  # held while the record is read, changed and saved
SCRIPT_FILE = "script.py"  # the cell body, or a copy of the script run in place as it was submitted
LAUNCH_FILE = "launch.py"  # what the interpreter runs: the script, as a file of the job's working directory
# which file that is, where the job runs (its path, and its real directory when only the submitter can
# tell), for the launcher: every word the interpreter passes it is the script's
LAUNCH_TARGET_FILE = "launch_target"
SUPERVISOR_FILE = "supervise.sh"  # the supervisor, copied into the run
LOG_FILE = "output.log"  # the job's stdout and stderr
PID_FILE = "pid"  # "SUPERVISOR_PID JOB_PID", written by the supervisor
EXIT_CODE_FILE = "exit_code"  # "CODE stopped|exited", written by the supervisor
METRICS_FILE = "metrics.json"  # the metric series read so far (a cache)
NOTIFY_FILE = "notify.py"  # with --notify: what the supervisor runs to say the job has ended
NOTIFIED_FILE = "notified"  # with --notify: what came of it, written by notify.py
CLOCK_FILE = "clock"  # "SECONDS BYTES" lines: the log's size now and then, written by the supervisor
# with --gpus N or --queue NAME: what the job waits for in its machine's lines (JSON, by the
# submitter), the waiter that waits for it, and how it waits, or what it took (JSON, by the waiter)
LINE_FILE = "line"
WAITER_FILE = "wait_turn.py"
TURN_FILE = "turn"
# the uncommitted diff of the repository the job's working directory lies in (jobs/provenance.py)
GIT_DIFF_FILE = "git.diff"

MAX_RECORD_BYTES = 1 << 20  # records are a few KB: a larger one was not written by us
KEY_FILE = "fingerprint.key"  # in the store's home: the key of the fingerprints' HMAC
SWEEPS_DIR = "sweeps"
CONTAINERS_DIR = "containers"  # in the store's home: the directory each container we create mounts
REMOVING_PREFIX = ".removing-"  # in a job's directory: a run taken out of the listings, its files not all deleted yet
LEFTOVER = re.compile(re.escape(REMOVING_PREFIX) + r"([0-9]{1,9})-[0-9a-f]{8}")  # REMOVING_PREFIX RUN-TOKEN
CREATING_PREFIX = ".creating-"  # in a job's directory: a run being created, not yet with its record
CREATING = re.compile(re.escape(CREATING_PREFIX) + r"([0-9]{1,9})-[0-9a-f]{8}")  # CREATING_PREFIX RUN-TOKEN
# A run directory without a record, holding nothing but what writing one leaves, older than this,
# was left by a submission of an earlier version (which made the directory before writing its
# record) that was killed in between; a younger one may be such a submission at work now.
ABANDONED_AFTER = 10.0  # seconds
RECORD_WRITING = re.compile(r"record\.lock|\.record\.json\.[0-9]+\.[0-9a-f]{8}\.tmp")  # LOCK_FILE, write_private_file's


STORE_FILES = (
    RECORD_FILE, LOCK_FILE, SCRIPT_FILE, LAUNCH_FILE, LAUNCH_TARGET_FILE, SUPERVISOR_FILE, LOG_FILE, PID_FILE,
    EXIT_CODE_FILE, METRICS_FILE, NOTIFY_FILE, NOTIFIED_FILE, CLOCK_FILE, LINE_FILE, WAITER_FILE, TURN_FILE,
    GIT_DIFF_FILE,
)  # fmt: skip
STORE = "the store"  # whose the files above are, in `run_files`


def run_files(declared: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Every file a run directory may hold, by name, and whose it is: the store's own, and those
    each backend declares (`declared`: backend name -> its run files). A backend's file named as
    the store's, or as another backend's, or one that is not a plain name, is a programming error:
    two owners of one file would write over each other's."""
    owners = dict.fromkeys(STORE_FILES, STORE)
    for backend, names in declared.items():
        for name in names:
            if not name or name in (".", "..") or "/" in name or name.startswith((REMOVING_PREFIX, CREATING_PREFIX)):
                raise ValueError(f"the {backend} backend declares a run file {name!r}, which is not a plain name")
            if owners.setdefault(name, backend) != backend:
                raise ValueError(f"the {backend} backend declares the run file {name!r}, which is {owners[name]}'s")
    return owners


def default_home() -> Path:
    """$JUPYTER_TRAINER_HOME, made absolute (a kernel and a terminal in other directories share
    one store), else ~/.jupyter_trainer."""
    configured = os.environ.get("JUPYTER_TRAINER_HOME")
    return Path(os.path.abspath(os.path.expanduser(configured))) if configured else Path.home() / ".jupyter_trainer"


class JobStore:
    def __init__(self, home: Path | str | None = None):
        self.home = Path(home) if home is not None else default_home()
        self.jobs_dir = self.home / "jobs"

    # -- layout ---------------------------------------------------------

    @classmethod
    def of_run(cls, run_dir: Path) -> "JobStore":
        """The store a run directory belongs to (HOME/jobs/NAME/RUN)."""
        return cls(run_dir.parent.parent.parent)

    @property
    def containers_dir(self) -> Path:
        return self.home / CONTAINERS_DIR

    @property
    def sweeps_dir(self) -> Path:
        """The sweeps' records (jobs/sweeps.py), each `NAME.json`, and beside it `NAME.d`, what its
        backend keeps for it (a Slurm job array's links to its runs), removed with it."""
        return self.home / SWEEPS_DIR

    def sweep_record(self, name: str) -> Path:
        return self.sweeps_dir / f"{validate_name(name, 'sweep name')}.json"

    def sweep_files(self, name: str) -> Path:
        return self.sweeps_dir / f"{validate_name(name, 'sweep name')}.d"

    def container_dir(self, container_name: str) -> Path:
        """The directory of this store that a container we created mounts (its runs' files)."""
        return self.containers_dir / validate_name(container_name, "container name")

    def job_dir(self, name: str) -> Path:
        return self.jobs_dir / validate_name(name)

    def run_dir(self, name: str, run: int) -> Path:
        return self.job_dir(name) / str(int(run))

    def runs(self, name: str) -> list[int]:
        """Every run directory of the job, with or without its record yet."""
        try:
            entries = os.listdir(self.job_dir(name))
        except (FileNotFoundError, NotADirectoryError):  # a stray file where a job's directory would be
            return []
        return sorted(int(entry) for entry in entries if entry.isdigit() and entry.isascii() and len(entry) <= 9)

    def latest_run(self, name: str) -> int | None:
        """The newest run that has a record (an earlier version's submission may have made a run
        directory without one: being created this instant, or abandoned half-created)."""
        for run in reversed(self.runs(name)):
            if self.has_record(name, run):
                return run
        return None

    def has_record(self, name: str, run: int) -> bool:
        """Whether the run has its record (not one being created this instant, or abandoned)."""
        return (self.run_dir(name, run) / RECORD_FILE).exists()

    def names(self) -> list[str]:
        try:
            entries = os.listdir(self.jobs_dir)
        except FileNotFoundError:
            return []
        return sorted(entry for entry in entries if NAME_PATTERN.fullmatch(entry))

    # -- records --------------------------------------------------------

    def create(self, record: JobRecord) -> Path:
        """Create run `record.run` of `record.name` with its record; FileExistsError if taken. Called
        under the name's claim. The run appears whole: made under a hidden name, locked while its
        record is written, then renamed into place (a process killed meanwhile leaves the hidden
        directory, unlocked: see `abandoned`)."""
        path = self.run_dir(record.name, record.run)
        with self.writing():
            make_private_dir(self.jobs_dir)
            make_private_dir(path.parent)
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "the run exists", str(path))
            making = path.parent / f"{CREATING_PREFIX}{int(record.run)}-{secrets.token_hex(4)}"
            os.mkdir(making, 0o700)
        try:
            with _dir_locked(making):
                self._write(making, record)
                with self.writing():
                    os.rename(making, path)  # the name's claim is held: no other process made `path` meanwhile
        except BaseException:
            shutil.rmtree(making, ignore_errors=True)
            raise
        return path

    def abandoned(self, name: str, now: float | None = None) -> list[tuple[int, Path]]:
        """What submissions killed half-way left in the job's directory: (run, directory) each, to be
        removed under the name's claim. A hidden run being created that no process holds (its maker
        held the claim and its lock until it renamed it into place), and a run directory with no
        record nor anything but what writing one leaves, older than ABANDONED_AFTER (an earlier
        version's; a younger one may be at work)."""
        job_dir = self.job_dir(name)
        try:
            entries = os.listdir(job_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        now = time.time() if now is None else now
        found = []
        for entry in entries:
            making = CREATING.fullmatch(entry)
            if not (making or entry.isdigit() and entry.isascii() and len(entry) <= 9) or not _is_real_dir(
                job_dir / entry
            ):
                continue  # a link or a file under such a name was put there by a job, not left by us: left alone
            if making and not _is_dir_locked(job_dir / entry):
                found.append((int(making.group(1)), job_dir / entry))
            elif not making and not self.has_record(name, int(entry)):
                try:
                    age = now - os.lstat(job_dir / entry).st_mtime
                    left = os.listdir(job_dir / entry)
                except OSError:  # removed meanwhile
                    continue
                if age > ABANDONED_AFTER and all(RECORD_WRITING.fullmatch(file) for file in left):
                    found.append((int(entry), job_dir / entry))
        return sorted(found)

    def discard(self, name: str, run: int) -> None:
        """Remove a run that never started, and its job directory if it was the first. On the way
        out of a failed launch, whose error is what the user needs to hear: what cannot be removed
        is left for the next `rm` or `prune` (hidden, if it could at least be renamed)."""
        with self.claiming(name):
            try:
                hidden = self.retire(name, run)
            except (OSError, StoreError, UnknownJob):
                return
            shutil.rmtree(hidden, ignore_errors=True)

    # -- removing runs ----------------------------------------------------

    def retire(self, name: str, run: int) -> Path:
        """Take a run out of every listing at once: rename its directory to a hidden name beside
        it, and return that. Done under the record's lock, so no update is half done (one that comes
        later finds no run). Raises OSError or StoreError when it cannot: then nothing changed.
        The caller holds the name's claim, so no other removal runs meanwhile."""
        hidden = self.job_dir(name) / f"{REMOVING_PREFIX}{int(run)}-{secrets.token_hex(4)}"
        with self.locked(name, run):
            os.rename(self.run_dir(name, run), hidden)
        return hidden

    def leftovers(self, name: str) -> list[tuple[int, Path]]:
        """The job's runs that were taken out of the listings but whose files are not all deleted
        yet: (run, hidden directory) each."""
        try:
            entries = os.listdir(self.job_dir(name))
        except (FileNotFoundError, NotADirectoryError):
            return []
        job_dir = self.job_dir(name)
        # a link or a file under such a name was put there by a job, not left by us: left alone
        found = [
            (int(match.group(1)), job_dir / entry)
            for entry in entries
            if (match := LEFTOVER.fullmatch(entry)) and _is_real_dir(job_dir / entry)
        ]
        return sorted(found)

    @contextlib.contextmanager
    def claiming(self, name: str) -> Iterator[None]:
        """Hold the job's name for the block: every process that looks at a name's runs and then
        creates the next one does it under this lock, so two kernels submitting one name at the
        same moment see each other (one launches, the other attaches or is refused). The lock is
        the job directory itself, so claiming leaves no file behind; a job directory left empty
        is removed on the way out."""
        job_dir = self.job_dir(name)
        while True:
            with self.writing():
                make_private_dir(job_dir)
                fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    current = os.stat(job_dir).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    current = False
                if not current:
                    continue  # removed (and perhaps made again) while we waited: claim the new one
                try:
                    yield
                finally:
                    with contextlib.suppress(OSError):
                        job_dir.rmdir()  # only if no run is there
                return
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Turn a failed write (full disk, read-only store) into one clear line."""
        try:
            yield
        except FileExistsError:
            raise
        except OSError as exc:
            raise StoreError(
                f"cannot write the job store at {self.home} ({exc.strerror or exc})",
                "free some disk space, or set JUPYTER_TRAINER_HOME to a writable directory",
            ) from exc

    def load(self, name: str, run: int | None = None) -> JobRecord:
        if run is None:
            run = self.latest_run(name)
            if run is None:
                raise UnknownJob(f"no job named {name!r}", f"see {surface.command('list')}")
        path = self.run_dir(name, run) / RECORD_FILE
        try:
            data = _fs.read_small(path, MAX_RECORD_BYTES + 1)
            if len(data) > MAX_RECORD_BYTES:
                raise ValueError("too large")
            record = JobRecord.from_dict(json.loads(data))
        except FileNotFoundError:
            raise UnknownJob(f"no job named {name!r}", f"see {surface.command('list')}") from None
        except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:  # a directory, a link, bad JSON...
            raise CorruptRecord(
                f"the record of job {name!r} (run {run}) is unreadable ({exc.__class__.__name__})",
                f"inspect or remove {path}",
            ) from None
        if (record.name, record.run) != (name, run):
            raise CorruptRecord(
                f"the record in {path} is of another job ({record.name!r}, run {record.run})", f"remove {path}"
            )
        return record

    def save(self, record: JobRecord) -> None:
        self._write(self.run_dir(record.name, record.run), record)

    def update(self, name: str, run: int, change: Callable[[JobRecord], None]) -> JobRecord:
        """Load, change and save a record while holding its lock."""
        with self.locked(name, run):
            record = self.load(name, run)
            change(record)
            self.save(record)
            return record

    @contextlib.contextmanager
    def locked(self, name: str, run: int) -> Iterator[None]:
        """The record's lock, held for the block; UnknownJob when the run has been removed."""
        path = self.run_dir(name, run) / LOCK_FILE
        with contextlib.ExitStack() as held:
            try:
                with self.writing():
                    path.touch(mode=0o600, exist_ok=True)
                    held.enter_context(flocked(path))
            except StoreError as exc:
                if isinstance(exc.__cause__, FileNotFoundError) and not path.parent.is_dir():
                    # removed by another process: not a full disk, whatever the write said
                    raise UnknownJob(f"job {name!r} has no run {run} any more", "it was removed") from None
                raise
            yield

    @contextlib.contextmanager
    def containers_lock(self, shared: bool) -> Iterator[None]:
        """Held shared while a submission finds, creates or starts its container, and exclusively
        while stopped containers are pruned: no container is removed between a submission finding it
        and starting it. The lock is the store's home directory itself, so it leaves no file behind
        (a refused submission leaves the store as it was)."""
        with self.writing():
            make_private_dir(self.home)
            fd = os.open(self.home, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def remove_abandoned(self, name: str) -> None:
        """Remove what killed submissions left of the job, as far as it can be (under the name's claim)."""
        for _, path in self.abandoned(name):
            shutil.rmtree(path, ignore_errors=True)

    def records(self, all_runs: bool = False) -> Iterator[JobRecord | CorruptRecord]:
        """The latest run of every job (or every run); an unreadable record is yielded as its error."""
        for name in self.names():
            latest = self.latest_run(name)
            for run in self.runs(name) if all_runs else [latest] if latest is not None else []:
                try:
                    yield self.load(name, run)
                except UnknownJob:  # no record: an earlier version's run being created, or abandoned
                    continue
                except CorruptRecord as error:
                    yield error

    def _write(self, run_dir: Path, record: JobRecord) -> None:
        payload = json.dumps(record.to_dict(), indent=1, sort_keys=True).encode()
        with self.writing():
            write_private_file(run_dir / RECORD_FILE, payload)

    # -- the key that makes fingerprints of secrets safe to store ---------

    def fingerprint_key(self) -> bytes:
        with self.writing():
            return self._fingerprint_key()

    def store_id(self) -> str:
        """This store's name where several stores meet (a container, a remote host): derived from its
        random key, so two machines or users whose stores have the same path never share one."""
        return hmac.new(self.fingerprint_key(), b"jupyter_trainer store id", hashlib.sha256).hexdigest()[:12]

    def _fingerprint_key(self) -> bytes:
        make_private_dir(self.home)
        path = self.home / KEY_FILE
        if not path.exists():
            # link() publishes a complete file or fails: no reader sees half a key
            tmp = self.home / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
            create_private_file(tmp, secrets.token_bytes(32))
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        return path.read_bytes()


@contextlib.contextmanager
def _dir_locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the directory itself, held for the block (the lock leaves no file)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _is_real_dir(path: Path) -> bool:
    """Whether `path` is a directory itself, never a link to one: what the store makes in a job's
    directory. A job writes beside its run, and may put anything there under any name."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_dir_locked(path: Path) -> bool:
    """Whether a process holds the directory's lock now (a directory gone meanwhile is not)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
