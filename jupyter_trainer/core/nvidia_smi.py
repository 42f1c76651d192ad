"""What a machine's nvidia-smi says of its GPUs and their compute processes, and which GPUs are busy
outside jupyter_trainer.

Busy outside us: a GPU nvidia-smi shows a compute process on whose pid is not one of the caller's
own jobs', or whose memory in use, less what its listed processes hold, is above
BUSY_MEMORY_MIB (1 GiB). The second catches what the first cannot see: inside a container,
nvidia-smi does not list other containers' processes, but their memory shows. An idle GPU holds
far less (0-48 MiB on the idle data-centre GPUs recorded in tests/data/nvidia_smi), and a
training job far more (10-15 GiB each in the busy recording there).

nvidia-smi is run with an argument list, never a shell, for at most SMI_SECONDS, and its whole
process group is killed if it does not finish; its answer is hostile input: at most SMI_BYTES are
read, a line that is not what was asked for is left out, and an answer that cannot be read (a
driver/library mismatch, a hang, a flood, garbage) makes the GPUs *unknown* (None, with
`problem` saying why in nvidia-smi's own words), never an exception.

Standard library only, Python 3.7 or later: a job's waiter (backends/wait_turn.py) runs this code
on the job's own python3, in its container, after wording.py's (see lines.waiter_source).

Written and tested against recorded nvidia-smi answers (tests/data/nvidia_smi/SOURCES) through a
stand-in nvidia-smi; no real GPU was tried here.
"""

from __future__ import annotations

import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass

try:  # as a module of the package; in a waiter, wording.py's code comes before this
    from .wording import readable
except ImportError:
    pass

MIB = 1 << 20
MAX_GPUS = 16  # a machine has 8 or 16; more lines than that are not a real nvidia-smi's
MAX_GPU_INDEX = 1024
MAX_GPU_MIB = 1 << 30  # a GPU with more than a PiB of memory is not one
SMI_SECONDS = 5.0  # each question to nvidia-smi; a wedged driver hangs it for minutes
SMI_BYTES = 64 << 10  # a real answer for 16 GPUs and their processes is a few KiB
BUSY_MEMORY_MIB = 1024  # memory in use no listed process accounts for, above which a GPU is busy
MAX_PROCESSES = 1024  # process lines read, at most
PROBLEM_CHARS = 200  # of nvidia-smi's own words kept to say why its GPUs are unknown

_GPU_FIELDS = "index,uuid,memory.used,memory.total"
GPU_QUERY = (f"--query-gpu={_GPU_FIELDS},mig.mode.current", "--format=csv,noheader,nounits")
OLD_GPU_QUERY = (f"--query-gpu={_GPU_FIELDS}", "--format=csv,noheader,nounits")  # drivers before MIG (R450)
APPS_QUERY = ("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")

NO_DEVICES = "No devices were found"  # nvidia-smi's answer on a machine with none
UNKNOWN_FIELD = "is not a valid field to query"  # `Field "mig.mode.current" is not a valid field to query.`
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Fa-f-]{8,60}")
_POOL_PART = re.compile(r"(\d{1,4})(?:\s*-\s*(\d{1,4}))?")


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi lists it (memory None where it says [N/A])."""

    index: int
    uuid: str
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    mig: bool = False  # in MIG mode


@dataclass(frozen=True)
class GpuProcess:
    """A compute process nvidia-smi lists: the GPU's uuid, its pid (None if unreadable, so never
    one of ours), the memory it holds (None where nvidia-smi says [N/A])."""

    gpu_uuid: str
    pid: int | None
    memory_bytes: int | None


@dataclass(frozen=True)
class SmiLook:
    """One look at a machine's nvidia-smi. `gpus`/`processes` None: its answer could not be read,
    `problem` says why. `present` False: the machine has no nvidia-smi (then both are empty)."""

    gpus: tuple[Gpu, ...] | None
    processes: tuple[GpuProcess, ...] | None
    present: bool = True
    problem: str | None = None


def busy_gpus(
    look: SmiLook | None = None, own_pids: Iterable[int] = (), busy_memory_mib: int = BUSY_MEMORY_MIB
) -> frozenset[int] | None:
    """The indices of the GPUs busy outside us (see the module's words), None if nvidia-smi could
    not tell. A machine without nvidia-smi shows nothing busy. Pids are as nvidia-smi gives them
    (the host's)."""
    look = look_at_gpus() if look is None else look
    if look.gpus is None or look.processes is None:
        return None
    own = set(own_pids)
    busy = set()
    for gpu in look.gpus:
        listed = [process for process in look.processes if process.gpu_uuid == gpu.uuid]
        if any(process.pid is None or process.pid not in own for process in listed):
            busy.add(gpu.index)
        elif gpu.memory_used_bytes is not None and all(process.memory_bytes is not None for process in listed):
            unaccounted = gpu.memory_used_bytes - sum(process.memory_bytes for process in listed)
            if unaccounted > busy_memory_mib * MIB:
                busy.add(gpu.index)
    return frozenset(busy)


def parse_gpus(text: str) -> tuple[Gpu, ...]:
    """nvidia-smi's answer to GPU_QUERY (or OLD_GPU_QUERY): a line that is not five (or four)
    fields with a plausible index and uuid is left out, an index or uuid seen before is not
    counted again, at most MAX_GPUS are kept."""
    gpus: dict[int, Gpu] = {}
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) not in (4, 5):
            continue
        index = plausible_number(fields[0])
        uuid = fields[1]
        if index is None or index != int(index) or not 0 <= index < MAX_GPU_INDEX or int(index) in gpus:
            continue
        if not _UUID.fullmatch(uuid) or any(gpu.uuid == uuid for gpu in gpus.values()):
            continue
        mig = len(fields) == 5 and fields[4] == "Enabled"
        gpus[int(index)] = Gpu(
            int(index), uuid, mebibytes(plausible_number(fields[2])), mebibytes(plausible_number(fields[3])), mig
        )
        if len(gpus) == MAX_GPUS:
            break
    return tuple(sorted(gpus.values(), key=lambda gpu: gpu.index))


def parse_processes(text: str) -> tuple[GpuProcess, ...]:
    """nvidia-smi's answer to APPS_QUERY: a line whose first field is not a GPU's uuid is left
    out; a pid or memory that cannot be read is None (such a process is never one of ours)."""
    found = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 3 or not _UUID.fullmatch(fields[0]):
            continue
        pid = plausible_number(fields[1])
        pid = int(pid) if pid is not None and pid == int(pid) and 0 < pid < 1 << 32 else None
        found.append(GpuProcess(fields[0], pid, mebibytes(plausible_number(fields[2]))))
        if len(found) == MAX_PROCESSES:
            break
    return tuple(found)


def read_look(gpu_answer: tuple[int | None, str], apps_answer: tuple[int | None, str]) -> SmiLook:
    """A look from nvidia-smi's answers (exit code, or None if it was stopped; its text) to
    GPU_QUERY and APPS_QUERY. The GPUs are known only from a clean answer that lists some, or from
    "No devices were found"; the processes, from a clean answer (empty: none)."""
    code, text = gpu_answer
    if text.strip() == NO_DEVICES:
        return SmiLook((), ())
    gpus = parse_gpus(text) if code == 0 else ()
    if not gpus:
        return SmiLook(None, None, problem=_problem(code, text))
    code, text = apps_answer
    if code != 0:
        return SmiLook(gpus, None, problem=_problem(code, text))
    return SmiLook(gpus, parse_processes(text))


def look_at_gpus(program: str | None = None, seconds: float = SMI_SECONDS) -> SmiLook:
    """Asks this machine's nvidia-smi (found on PATH unless given) about its GPUs and their
    compute processes."""
    program = program or shutil.which("nvidia-smi")
    if program is None:
        return SmiLook((), (), present=False)
    gpu_answer = run_bounded([program, *GPU_QUERY], seconds)
    if gpu_answer[0] is not None and UNKNOWN_FIELD in gpu_answer[1]:
        gpu_answer = run_bounded([program, *OLD_GPU_QUERY], seconds)
    if read_look(gpu_answer, (0, "")).gpus is None:  # no GPUs known: their processes need no asking
        return read_look(gpu_answer, (0, ""))
    return read_look(gpu_answer, run_bounded([program, *APPS_QUERY], seconds))


def run_bounded(argv: list[str], seconds: float, limit: int = SMI_BYTES) -> tuple[int | None, str]:
    """Runs `argv` (no shell) with its output and errors together: (its exit code, its text).
    The code is None, and the text says why, when it did not finish within `seconds`, said more
    than `limit` bytes, or could not be started; then its whole process group is killed."""
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    except OSError as exc:
        return None, f"{argv[0]} could not be run ({exc.strerror or exc})"
    deadline = time.monotonic() + seconds
    chunks: list[bytes] = []
    size, why = 0, None
    with process.stdout, selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                why = f"nvidia-smi did not answer within {seconds:g} s"
                break
            chunk = os.read(process.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                why = f"nvidia-smi's answer was longer than {limit >> 10} KiB, which no real one is"
                break
    if why is None:
        try:
            return process.wait(max(0.1, deadline - time.monotonic())), b"".join(chunks).decode("utf-8", "replace")
        except subprocess.TimeoutExpired:  # closed its output but goes on
            why = f"nvidia-smi did not finish within {seconds:g} s"
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:  # it ended meanwhile
        pass
    process.wait()
    return None, why


def _problem(code: int | None, text: str) -> str:
    """Why nvidia-smi's GPUs are unknown, in its own words (bounded and made safe to show)."""
    words = " ".join(readable(text).split())[:PROBLEM_CHARS]
    if code is None:
        return words
    if not words:
        return f"nvidia-smi listed no GPUs (exit code {code})"
    return f"nvidia-smi: {words}" if code != 0 else f"nvidia-smi's answer could not be read: {words}"


def plausible_number(value: str) -> float | None:
    """A field of nvidia-smi's CSV as a finite number ("[N/A]", NaN and words are None)."""
    try:
        parsed = float(value.strip())
    except ValueError:
        return None
    return parsed if math.isfinite(parsed) else None


def mebibytes(value: float | None) -> int | None:
    """MiB as nvidia-smi gives them, in bytes (None if absent, negative or absurd)."""
    if value is None or not 0 <= value <= MAX_GPU_MIB:
        return None
    return int(value * MIB)
