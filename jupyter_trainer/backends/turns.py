"""A job that waits its turn in its machine's lines (`--gpus N`, `--queue NAME`): what its run holds
for its waiter (backends/wait_turn.py, on core/lines.py), how the supervisor starts it, and what
its turn file says of it.

The supervisor starts the waiter in the job's place; the waiter writes the run's `turn` file (JSON)
while it waits and once it has what it waited for, then runs the job, holding what it took until
the job ends. That file is read here, bounded and checked field by field: the job can write it
too, once it runs.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..core import files as _fs
from ..core import lines
from ..core.files import create_private_file, write_private_file
from ..core.gpus import named_pool, offered_gpus
from ..core.lines import MAX_RUNNING_LIMIT, QUEUE_NAME
from ..core.nvidia_smi import MAX_GPU_INDEX
from ..core.record import JobRecord, Observation, Status
from ..core.store import LINE_FILE, TURN_FILE, WAITER_FILE
from ..errors import InvalidOption
from ..spec.job_spec import DetachedSpec

TURN_BYTES = 4096  # what a waiter writes is a few hundred bytes
WAITER_PYTHON = "python3"  # the waiter runs on the job's machine's python3 (3.7+)
WAITER_SOURCES = (("core", "wording.py"), ("core", "nvidia_smi.py"), ("core", "lines.py"), ("backends", "wait_turn.py"))


def gpu_count(gpus: str | None) -> int:
    """The GPUs `--gpus N` hands out and waits for: N; 0 for 'all', device ids, or none."""
    return int(gpus) if gpus and gpus.isdigit() else 0


def waits_in_line(spec) -> bool:
    """Whether the job waits its turn in its machine's lines before it starts."""
    return isinstance(spec, DetachedSpec) and (gpu_count(spec.gpus) > 0 or bool(spec.queue))


def check_lines(spec, root: str) -> None:
    """The lines a job would wait in are usable on this machine, made where missing: one line
    otherwise, before anything is recorded (a directory of theirs that is a link or a file, one
    that cannot be made or written, another user's that is not sticky)."""
    if not waits_in_line(spec):
        return
    try:
        for line in [lines.line_dir(root, spec.queue)] if spec.queue else []:
            lines.check_line(root, line)
            lines.ensure_line(root, line)
        if gpu_count(spec.gpus):
            lines.check_line(root, lines.line_dir(root))
            lines.ensure_line(root, lines.line_dir(root))
        if not os.access(
            os.path.join(lines.line_dir(root, spec.queue) if spec.queue else lines.line_dir(root), lines.TICKETS),
            os.W_OK,
        ):
            raise lines.LineError(f"{root} cannot be written here (read-only, or not this user's to write)")
    except OSError as problem:
        raise InvalidOption(
            f"this machine's lines cannot be used: {problem.strerror or problem}",
            f"set {lines.LINES_ENV} to another directory",
        ) from None
    except lines.LineError as problem:
        raise InvalidOption(
            f"this machine's lines cannot be used: {problem}",
            f"remove what is there, or set {lines.LINES_ENV} to another directory",
        ) from None


def check_gpus_offered(spec, machine: str = "this machine") -> None:
    """`--gpus N` asks for at most the GPUs the job's machine offers: one line otherwise, before
    anything is recorded."""
    wants = gpu_count(spec.gpus)
    if not wants:
        return
    offered = offered_gpus(spec.gpu_pool)
    if offered.gpus is None:
        raise InvalidOption(
            f"--gpus {wants}: nvidia-smi cannot tell which GPUs {machine} has ({offered.problem})",
            "fix the driver, or name the GPUs to hand out: "
            "JUPYTER_TRAINER_GPUS=0-3 or %config TrainerMagics.gpu_pool = '0-3'",
        )
    if len(offered.gpus) < wants:
        has = (
            f"{len(offered.gpus)} ({', '.join(map(str, offered.gpus))}, from {offered.source})"
            if offered.gpus
            else "none"
        )
        mig = f"; GPUs in MIG mode are not handed out whole: {', '.join(map(str, offered.mig))}" if offered.mig else ""
        raise InvalidOption(
            f"--gpus {wants} asks for more GPUs than {machine} offers: {has}{mig}",
            "ask for fewer, or name the GPUs it has: "
            "JUPYTER_TRAINER_GPUS=0-3 or %config TrainerMagics.gpu_pool = '0-3'",
        )


def declared_pool(spec) -> list[int] | None:
    """The GPUs the submitter's pool names (gpu_pool, else $JUPYTER_TRAINER_GPUS), None when it
    names none: the waiter then asks its machine's nvidia-smi."""
    named = named_pool(spec.gpu_pool)
    return list(named.gpus) if named is not None else None


def prepare_turn(run_dir: Path, record: JobRecord, spec, root: str, same_clock: bool = True) -> None:
    """What the waiter reads and runs, and the file it writes into (created here, so that it keeps
    the store's owner and mode when a container's root writes it). A job's place in line is when it
    was submitted, where its machine's clock is this one's (`same_clock`), else when its waiter
    starts: first in, first out, whichever waiter starts first."""
    since_ns = time.time_ns() if same_clock else None
    asked = {
        "root": root, "queue": spec.queue, "gpus": gpu_count(spec.gpus), "pool": declared_pool(spec),
        "job": record.name, "run": record.run, "since_ns": since_ns, "max_running": spec.max_running,
        "ticket": keep_place(root, spec.queue, since_ns, record) if same_clock else None,
    }  # fmt: skip
    write_private_file(run_dir / LINE_FILE, json.dumps(asked).encode(), durable=False)
    write_private_file(run_dir / WAITER_FILE, waiter_source(), durable=False)
    create_private_file(run_dir / TURN_FILE)


def keep_place(root: str, queue: str | None, since_ns: int, record: JobRecord) -> str | None:
    """The job's place in its first line, kept from now until its waiter comes (lines.reserve_place),
    where this machine's lines are the job's; its key (None where it cannot be kept: the waiter then
    takes its place when it comes)."""
    key = os.urandom(8).hex()
    line = lines.line_dir(root, queue)
    try:
        lines.ensure_line(root, line)
        lines.reserve_place(
            line, since_ns, key, {"job": record.name, "run": record.run, "user": os.getuid(), "kept": True}
        )
    except (lines.LineError, OSError):
        return None
    return key


def waiting_command(inner_run_dir: str, command: list[str]) -> list[str]:
    """What the supervisor starts in the job's place: the waiter, which runs `command` in its turn."""
    # -S: no site-packages (the waiter needs the standard library alone): 10 MB of private memory
    # for each waiting job instead of 12 (Python 3.11), of which a sweep of hundreds has as many
    return [WAITER_PYTHON, "-I", "-S", f"{inner_run_dir}/{WAITER_FILE}", inner_run_dir, *command]


@functools.lru_cache(maxsize=1)
def waiter_source() -> bytes:
    """The waiter as the job's python3 runs it: the modules it needs, then its own code, alone (one
    `from __future__` line first, those of the parts left out)."""
    parts = [b"from __future__ import annotations\n"]
    for package, name in WAITER_SOURCES:
        text = resources.files(f"jupyter_trainer.{package}").joinpath(name).read_bytes()
        parts.append(b"\n".join(line for line in text.split(b"\n") if not line.startswith(b"from __future__ import")))
    return b"\n\n".join(parts)


# -- what the turn file says -----------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """A waiting job's turn: `waiting` with `reason` (its words) and how many wait `ahead`; or,
    once it came, the GPUs or the queue's slot it took, and when."""

    waiting: bool
    reason: str = ""
    ahead: int | None = None
    line: str = ""  # "gpus" or "queue"
    gpus: tuple[int, ...] = ()
    queue: str | None = None
    started_at: float | None = None

    def to_json(self) -> dict:
        if self.waiting:
            return {
                "line": self.line,
                "position": None if self.ahead is None else self.ahead + 1,
                "reason": self.reason,
            }
        return {"gpus": list(self.gpus), "queue": self.queue}


def read_turn(run_dir: Path, said: dict[str, bytes] | None = None) -> Turn | None:
    """The job's turn, or None for a job that waits in no line. `said`: the run's line and turn
    files as read elsewhere (in a container, by name; b"" where missing), else read in `run_dir`."""
    if said is None:
        said = {name: _read_run_file(run_dir / name) for name in (LINE_FILE, TURN_FILE)}
    line = said.get(LINE_FILE)
    if not line:  # missing (never empty: the submitter writes it whole before the job starts)
        return None
    asked = _json_object(line)
    written = said.get(TURN_FILE)
    if written is None:  # there, but not a file that can be read (the job made it a link, a FIFO): says nothing
        return None
    turn = _json_object(written)
    if turn.get("state") == "running":
        return Turn(
            False,
            gpus=_indices(turn.get("gpus")),
            queue=_name(turn.get("queue")),
            started_at=_time(turn.get("started_at")),
        )
    if turn.get("state") == "waiting" or not written.strip():  # said by the waiter, or not yet
        return _waiting(turn, asked)
    return None  # anything else was not written by a waiter (the job can write the file too): it says nothing


def _read_run_file(path: Path) -> bytes | None:
    """A run file's bytes (bounded); b"" when it is missing, None when it cannot be read."""
    try:
        return _fs.read_small(path, TURN_BYTES)
    except FileNotFoundError:
        return b""
    except OSError:
        return None


def _json_object(data: bytes) -> dict:
    try:
        found = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def may_wait(record: JobRecord) -> bool:
    """Whether the job may wait in its machine's lines, as its stored options say."""
    options = record.options if isinstance(record, JobRecord) and isinstance(record.options, dict) else {}
    gpus, queue = options.get("gpus"), options.get("queue")
    return (isinstance(gpus, str) and gpu_count(gpus) > 0) or (isinstance(queue, str) and bool(queue))


def _waiting(said: dict, asked: dict) -> Turn:
    line = "queue" if said.get("line") == "queue" else "gpus" if said.get("line") == "gpus" else ""
    ahead = _count(said.get("ahead"))
    if not line:  # the waiter has not said yet
        wants = _count(asked.get("gpus"))
        queue = _name(asked.get("queue"))
        what = f"a slot in queue {queue}" if queue else f"{_gpus(wants)}" if wants else "its turn"
        return Turn(True, f"waiting for {what}")
    if line == "queue":
        what = f"waiting for a slot in queue {_name(said.get('queue')) or '?'}"
    else:
        what = f"waiting for {_gpus(_count(said.get('wants')) or _count(asked.get('gpus')) or 1)}"
    if ahead:
        return Turn(True, f"{what}; {ahead} job{'s' if ahead != 1 else ''} ahead", ahead, line)
    return Turn(True, f"{what}; next in line{_what_keeps(said)}", ahead, line)


def _what_keeps(said: dict) -> str:
    """What keeps the first in line waiting, in words ("" when it has not said)."""
    if isinstance(said.get("unknown"), str):
        return f", but nvidia-smi cannot tell which GPUs are free ({said['unknown'][:200]})"
    parts = []
    held = _count(said.get("held_by_others"))
    if held:
        parts.append(f"{held} held by other jobs")
    outside = _indices(said.get("busy_outside"))
    if outside:
        parts.append(
            f"GPU{'s' if len(outside) > 1 else ''} {', '.join(map(str, outside))} busy outside jupyter_trainer"
        )
    running = _count(said.get("max_running"))
    if running:
        parts.append(f"{running} of {running} running")
    return f" ({'; '.join(parts)})" if parts else ""


def _gpus(count: int) -> str:
    return f"{count} GPU{'s' if count != 1 else ''}"


def _count(value) -> int | None:
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RUNNING_LIMIT * 100
        else None
    )


def _indices(value) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 64:
        return ()
    return tuple(
        sorted(
            {
                item
                for item in value
                if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < MAX_GPU_INDEX
            }
        )
    )


def _name(value) -> str | None:
    return value if isinstance(value, str) and QUEUE_NAME.fullmatch(value) else None


def _time(value) -> float | None:
    return (
        float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e11 else None
    )


def with_turn(seen: Observation, run_dir: Path, said: dict[str, bytes] | None = None) -> Observation:
    """An observation of a job's supervisor with what its turn file says: a job whose waiter still
    waits has not started (it is pending, for the reason the waiter gives, also when it ended
    there: stopped in line); one whose turn came started when it came."""
    turn = read_turn(run_dir, said)
    if turn is None or seen.alive is None:
        return seen
    details = {**(seen.details or {}), **turn_details(turn)}
    if turn.waiting:
        if seen.exit_code is not None and seen.stopped:  # stopped in line: no exit code of the job's, which never ran
            return Observation(
                alive=False, started=False, why_gone="stopped while it waited for its turn", details=details
            )
        reason = turn.reason if seen.alive else seen.reason
        return dataclasses.replace(seen, started=False, started_at=None, reason=reason, details=details)
    return dataclasses.replace(seen, started_at=turn.started_at or seen.started_at, details=details)


# -- what the record keeps of it (its runtime's "turn"), for every view ------------------------------


TURN_KEY = "turn"


def turn_details(turn: Turn) -> dict:
    """What an observation reports of the job's turn, kept in its record's runtime."""
    return {TURN_KEY: turn.to_json()}


def recorded_turn(record: JobRecord) -> dict:
    """The job's turn as its record keeps it, checked ({} for a job that waits in no line)."""
    kept = record.runtime.get(TURN_KEY) if isinstance(record.runtime, dict) else None
    if not isinstance(kept, dict):
        return {}
    position = _count(kept.get("position"))
    if "position" in kept:
        return {"position": position, "line": kept.get("line") if kept.get("line") in ("gpus", "queue") else ""}
    return {
        "gpus": list(_indices(kept.get("gpus"))),
        **({"queue": _name(kept.get("queue"))} if _name(kept.get("queue")) else {}),
    }


def turn_fields(record: JobRecord) -> dict:
    """What `status --json` says of the job's turn: `gpus` (the indices it holds) once its turn
    came, and while it waits, its `position` in its line (1: next)."""
    kept = recorded_turn(record)
    if not kept:
        return {}
    if "position" in kept:
        return {"gpus": [], "position": kept["position"]} if not record.status.is_final else {"gpus": []}
    return {"gpus": kept["gpus"], **({"queue": kept["queue"]} if "queue" in kept else {})}


def turn_words(record: JobRecord) -> str:
    """A line on the job's turn for the views: what it waits for while pending (its reason), the
    GPUs it holds while it runs; "" otherwise."""
    kept = recorded_turn(record)
    if not kept or record.status.is_final:
        return ""
    if "position" in kept:
        return record.reason if record.status is Status.PENDING else ""
    return f"GPU{'s' if len(kept['gpus']) > 1 else ''} {', '.join(map(str, kept['gpus']))}" if kept["gpus"] else ""
