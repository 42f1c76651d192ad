"""`jupyter-trainer queue`: this machine's GPUs (free, held by which job, busy outside us) and every
line with its jobs, those whose turn came and those that wait, in order; as text or JSON.

What a ticket says was written by whichever user's job took it: names are shown only when they
are job names, and every word is made readable.
"""

from __future__ import annotations

import os
import time

from ..core import lines
from ..core.gpus import offered_gpus
from ..core.nvidia_smi import busy_gpus, look_at_gpus
from ..core.record import NAME_PATTERN
from ..core.wording import readable
from ..errors import TrainerError


def machine_lines(root: str, pool: str | None = None, only: str | None = None) -> dict:
    """What `queue --json` prints: `gpus` (one object per GPU offered: `index`, `held_by`, `busy_outside`),
    and `lines` (the GPU line, then each named queue, or the one `only` names)."""
    for line in [lines.line_dir(root)] + [
        lines.line_dir(root, name) for name in ([only] if only else lines.queue_names(root))
    ]:
        try:
            lines.check_line(root, line)
        except lines.LineError as problem:  # what the jobs' waiters refuse to use is not shown either
            raise TrainerError(
                f"cannot read this machine's lines: {problem}",
                f"remove what is there, or set ${lines.LINES_ENV} to another directory",
            ) from None
    found: dict = {"lines_dir": root, "lines": []}
    if only is None:
        found["gpus"] = _gpus(root, pool)
        running, waiting = lines.line_now(lines.line_dir(root))
        found["lines"].append({"line": "gpus", "running": _jobs(running), "waiting": _jobs(waiting)})
    for name in [only] if only else lines.queue_names(root):
        line = lines.line_dir(root, name)
        running, waiting = lines.line_now(line)
        found["lines"].append(
            {
                "line": "queue",
                "queue": name,
                "max_running": lines.max_running(line),
                "running": _jobs(running),
                "waiting": _jobs(waiting),
            }
        )
    return found


def _gpus(root: str, pool: str | None) -> dict:
    look = look_at_gpus()
    offered = offered_gpus(pool, look=look)
    busy = (busy_gpus(look) if look.present else frozenset()) or frozenset()
    line = lines.line_dir(root)
    running, waiting = lines.line_now(line)
    holders = {index: job for job in _jobs(running) for index in job.get("gpus", [])}
    first = _jobs(waiting[:1])
    each = []
    for index in offered.gpus or ():
        held = lines.token_held(line, index)
        holder = holders.get(index) or (dict(first[0], first_in_line=True) if held and first else None)
        each.append({"index": index, "held": held, "held_by": holder if held else None, "busy_outside": index in busy})
    return {"source": offered.source, "problem": offered.problem, "each": each}


def _jobs(said: list[dict]) -> list[dict]:
    """Each ticket's job as it says, checked."""
    shown = []
    for ticket in said:
        job = ticket.get("job")
        run = ticket.get("run")
        gpus = ticket.get("gpus")
        entry = {
            "job": job if isinstance(job, str) and NAME_PATTERN.fullmatch(job) else None,
            "run": run if isinstance(run, int) and not isinstance(run, bool) and 0 < run < 10**9 else None,
            "user": ticket.get("user") if isinstance(ticket.get("user"), int) else None,
            "since": ticket["since"],
        }
        wants = ticket.get("wants")
        if isinstance(wants, int) and not isinstance(wants, bool) and 0 < wants < 1024:
            entry["wants"] = wants
        if isinstance(gpus, list):
            entry["gpus"] = [
                index
                for index in gpus[:64]
                if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 1024
            ]
        shown.append(entry)
    return shown


def lines_text(found: dict) -> str:
    """`jupyter-trainer queue` as a person reads it."""
    out = []
    gpus = found.get("gpus")
    if gpus is not None:
        each = gpus["each"]
        if gpus["problem"]:
            out.append(f"GPUs: unknown ({readable(gpus['problem'])})")
        elif not each:
            out.append(
                "GPUs: none offered (no nvidia-smi, and no pool: JUPYTER_TRAINER_GPUS=0-3 or "
                "%config TrainerMagics.gpu_pool)"
            )
        else:
            out.append(f"GPUs (from {gpus['source']}):")
            for gpu in each:
                out.append(f"  GPU {gpu['index']}  {_gpu_state(gpu)}")
    for line in found["lines"]:
        if line["line"] == "gpus":
            title = "GPU line"
        else:
            title = f"queue {line['queue']} (at most {line['max_running']} running)"
        out.append(f"{title}: {len(line['running'])} running, {len(line['waiting'])} waiting")
        for job in line["running"]:
            held = f", GPUs {', '.join(map(str, job['gpus']))}" if job.get("gpus") else ""
            out.append(f"  running  {_job(job)}{held}")
        for place, job in enumerate(line["waiting"], 1):
            wants = f", for {job['wants']} GPU{'s' if job['wants'] != 1 else ''}" if job.get("wants") else ""
            out.append(f"  {place:>3}.    {_job(job)}{wants}, waiting since {_time(job['since'])}")
    return "\n".join(out)


def _gpu_state(gpu: dict) -> str:
    holder = gpu["held_by"]
    if gpu["held"] and holder is not None:
        state = f"kept for {_job(holder)} (first in line)" if holder.get("first_in_line") else f"held by {_job(holder)}"
    elif gpu["held"]:
        state = "held by a job of jupyter_trainer"
    else:
        state = "free"
    return state + ("; busy outside jupyter_trainer" if gpu["busy_outside"] else "")


def _job(job: dict) -> str:
    name = job["job"] or "(a job)"
    run = f" (run {job['run']})" if job.get("run") and job["run"] != 1 else ""
    user = f" of uid {job['user']}" if job.get("user") is not None and job["user"] != _uid() else ""
    return f"{name}{run}{user}"


def _uid() -> int:
    return os.getuid()


def _time(seconds: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(seconds))
