"""What a Slurm job's state and its supervisor's files say together: the job's Observation.

Slurm is the authority on whether the job still lives (queued, requeued, running); once it has
ended, the supervisor's exit code says how the script ended, unless Slurm ended it itself (its
time limit, its memory limit, a cancel from elsewhere, a failed node), which Slurm's final state
says. Pure logic: the caller asks Slurm and reads the files.
"""

from __future__ import annotations

import pwd

from ...core.record import Observation, Status
from ...core.wording import readable
from ..base import SupervisorFacts
from .queue import SlurmJob

# What slurmstepd writes into the job's output when it kills the job for its memory (jobacct_gather
# OverMemoryKill) or the kernel's OOM killer struck in the job's cgroup (task/cgroup)
OOM_WORDS = (
    b"Exceeded job memory limit",
    b"exceeded memory limit",
    b"oom-kill event",
    b"oom_kill event",
    b"OUT_OF_MEMORY",
)

OOM_REASON = (
    "out of memory: Slurm killed the job for using more memory than it asked for; "
    "ask for more with --sbatch-arg=--mem=SIZE"
)


def details(job: SlurmJob) -> dict:
    """What the record's runtime keeps of Slurm's view (shown in the job's header and table)."""
    # its id too: the job found by its name and log where the record's id (which the job can
    # rewrite) named another
    # (Slurm's words are shown as they are kept: readable, whatever a job made Slurm say)
    kept = {
        "job_id": job.job_id,
        "state": job.state,
        "partition": readable(job.partition),
        "pending_reason": readable(job.reason) if job.waiting else "",
    }
    if job.node_list and not job.waiting:
        kept["node_list"] = readable(job.node_list)
    if job.restarts is not None:
        kept["restarts"] = job.restarts
    return {key: value for key, value in kept.items() if value is not None}


def _who(uid: str) -> str:
    if not uid.isdigit():
        return uid
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (KeyError, OverflowError):
        return f"uid {uid}"


def ended_unseen(facts: SupervisorFacts, *, stop_requested: bool) -> Observation | None:
    """What the supervisor's files alone say while Slurm cannot be asked: the outcome of a script
    that exited on its own, or ended by our stop. None while it has not ended, or when it was
    signalled or killed from elsewhere: only Slurm can say why (a time limit, its memory limit, a
    preemption it may requeue the job after). The job can write an exit code as the supervisor
    does while it runs on: it counts only once the supervisor's clock says it has ended too."""
    if facts.exit_code is None or facts.problem or not facts.clock_ended:
        return None
    if facts.stopped is True and stop_requested:
        return facts.ended()
    if facts.stopped is False and facts.exit_code < 128:  # not killed by a signal
        return facts.ended()
    return None


def observe(
    job: SlurmJob | None,
    facts: SupervisorFacts,
    *,
    stop_requested: bool,
    job_id: str,
    log_tail: bytes = b"",
    forgotten: bool = True,
) -> Observation:
    """The job's Observation. `job`: Slurm's view (None: Slurm no longer knows it, or accounting is
    disabled); `log_tail`: the end of its log (read only for a failure's diagnosis)."""
    if job is not None and job.active:
        seen = details(job)
        if job.waiting:
            return Observation(alive=True, started=False, reason=job.reason or "queued", details=seen)
        # COMPLETING too: a job being requeued completes first, with the exit code of its TERM
        return Observation(alive=True, started=True, details=seen)
    seen = details(job) if job is not None else None
    state = job.state if job is not None else ""
    oom = state == "OUT_OF_MEMORY" or (state == "FAILED" and any(words in log_tail for words in OOM_WORDS))
    code = facts.exit_code if not facts.problem else None
    if state == "TIMEOUT":
        limit = (
            f" ({job.time_limit})" if job.time_limit and job.time_limit not in ("UNLIMITED", "Partition_Limit") else ""
        )
        return Observation(
            final=Status.FAILED,
            exit_code=code,
            reason=f"time limit reached{limit}: Slurm ended the job (--time)",
            alive=False,
            details=seen,
        )
    if oom:
        return Observation(final=Status.FAILED, exit_code=code, reason=OOM_REASON, alive=False, details=seen)
    if state == "CANCELLED":
        if stop_requested:
            return Observation(
                alive=False,
                exit_code=code,
                stopped=True if code is not None else None,
                why_gone="stopped by the user",
                details=seen,
            )
        who = f" by {_who(job.cancelled_by)}" if job.cancelled_by else " (scancel) from outside jupyter_trainer"
        return Observation(final=Status.STOPPED, exit_code=code, reason=f"cancelled{who}", alive=False, details=seen)
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        return Observation(
            final=Status.LOST,
            reason=f"its node failed ({state}: {job.node_list or 'node unknown'}); --requeue lets Slurm start it again",
            alive=False,
            details=seen,
        )
    if state == "PREEMPTED":
        return Observation(
            final=Status.LOST,
            reason="Slurm preempted the job; --requeue lets Slurm start it again",
            alive=False,
            details=seen,
        )
    if state == "DEADLINE":
        return Observation(
            final=Status.FAILED, exit_code=code, reason="Slurm ended the job at its deadline", alive=False, details=seen
        )
    if facts.problem:
        return facts.unknown(False)
    if code is not None:
        if facts.stopped and not stop_requested:
            # the supervisor was signalled, not by us: Slurm (its time limit, a preemption, an scancel)
            why = (
                f"Slurm signalled the job ({state})"
                if state
                else "the job was signalled from outside jupyter_trainer (a time limit, preemption or scancel); "
                "Slurm no longer says which"
            )
            return Observation(final=Status.STOPPED, exit_code=code, reason=why, alive=False, details=seen)
        ended = facts.ended()
        return Observation(
            exit_code=ended.exit_code,
            alive=False,
            started=True,
            ended_at=ended.ended_at,
            stopped=ended.stopped,
            details=seen,
        )
    if stop_requested:
        return Observation(alive=False, why_gone="stopped by the user", details=seen)
    if job is not None and facts.job_pid is None:
        return Observation(
            alive=False, details=seen,
            why_gone=f"Slurm job {job_id} ended ({state}) on {job.node_list or 'its node'} before the job started: "
            "the node cannot write to the job store or run python3; set JUPYTER_TRAINER_HOME to a directory every "
            "node shares",
        )  # fmt: skip
    if job is not None:
        return Observation(
            alive=False,
            details=seen,
            why_gone=f"Slurm job {job_id} ended ({state}) without its supervisor recording an exit code "
            "(was it killed?)",
        )
    return Observation(
        alive=False, why_gone=f"Slurm no longer knows job {job_id} and its supervisor recorded no exit code"
    )
