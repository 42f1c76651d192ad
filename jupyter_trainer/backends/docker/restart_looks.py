"""A look at a job run with --restarts whose container has restarted: its keeper starts the job
again (see restarts.py), and the look follows it, counts its starts and says why each was needed."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ...core.record import Observation, Status
from .in_container import job_processes, run_in
from .restarts import (
    BEYOND_LIMIT,
    KEEPER_GRACE_SECONDS,
    engine_time,
    forbid_restart,
    kept_down,
    may_be_started_again,
    read_restart_log,
    restart_forbidden,
    why_it_restarted,
)
from .runtime import DockerRuntime
from .supervised import supervisor_facts, supervisor_running


def follow_restarts(
    client, container, runtime: DockerRuntime, run_dir: Path, label: str, restarted: bool, exec_seconds: float
) -> Observation | None:
    """A job run with --restarts whose container has restarted since it was last seen (or since
    it started): the container's keeper starts it again (see restarts.py), and is followed here.
    None: nothing new since it was last seen in this start of its container (the usual way)."""
    state = container.attrs["State"]
    log = read_restart_log(container, runtime, run_dir)
    seen_before = runtime.restarts or 0
    details = None
    if log.count > seen_before:  # started again since it was last seen: this is its container's start now
        causes = list(runtime.restart_causes or [])[:seen_before]
        for number in range(seen_before + 1, log.count + 1):
            said = log.causes[number - 1]
            causes.append(
                why_it_restarted(client, container, runtime.container_started_at, said)
                if number == log.count
                else cause_said(said)
            )
        details = {"restarts": log.count, "restart_causes": causes, "container_started_at": state.get("StartedAt")}
        runtime = dataclasses.replace(runtime, restarts=log.count, container_started_at=state.get("StartedAt"))
    elif not restarted:
        return None
    running = bool(state.get("Running")) and not state.get("Restarting")
    supervised = running and supervisor_running(container, runtime, by_command_line=True)
    if supervised and log.beyond(runtime.restarts_allowed or 0, seen_before, restarted):
        # the keeper counts a start before it makes it: read again, now that the supervisor runs
        if read_restart_log(container, runtime, run_dir).beyond(runtime.restarts_allowed or 0, seen_before, restarted):
            return end_uncounted(container, runtime, run_dir, label, details, exec_seconds)
    facts = supervisor_facts(container, runtime, run_dir)
    if facts.exit_code is not None and not supervised:
        return dataclasses.replace(facts.ended(), details=details)
    if facts.problem:
        return dataclasses.replace(facts.unknown(bool(supervised)), details=details)
    if supervised:
        return Observation(alive=True, started=facts.job_pid is not None, details=details)
    forbidden = restart_forbidden(container, runtime, run_dir)
    if forbidden == BEYOND_LIMIT:  # another look found it started beyond its limit, and stopped it
        return Observation(alive=False, why_gone=beyond_limit(label, runtime), details=details)
    if forbidden:  # asked while its container was down: its keeper left it
        return Observation(
            final=Status.STOPPED,
            reason="stopped: a stop was asked while its container was down, so it was not started again",
            details=details,
        )
    if may_come_back(client, container, runtime, run_dir):
        return Observation(alive=True, started=True, details=details)
    if state.get("Restarting"):
        why = (
            f"container {label} keeps restarting, its main process (the keeper) ending at once "
            f"(exit code {state.get('ExitCode')}), and the job was not started again"
        )
        return Observation(alive=False, why_gone=why, details=details)
    if not running:
        why = why_it_restarted(client, container, runtime.container_started_at, started_again=False)
        return Observation(
            alive=False, why_gone=f"{why} (container {label}, exit code {state.get('ExitCode')})", details=details
        )
    allowed = runtime.restarts_allowed or 0
    if log.used_up is not None:
        cause = (
            why_it_restarted(client, container, runtime.container_started_at, log.used_up)
            if restarted
            else cause_said(log.used_up)
        )
        used = f"its {allowed} restart{'s were' if allowed != 1 else ' was'} used up"
        return Observation(alive=False, why_gone=f"{cause} (container {label}), and {used}", details=details)
    started = engine_time(state.get("StartedAt"))
    if (
        started is not None
        and time.time() - started < KEEPER_GRACE_SECONDS
        and not kept_down(client, container, runtime.container_started_at)
    ):
        return Observation(alive=True, started=True, details=details)  # its keeper is about to start it again
    if restarted:
        return Observation(
            alive=False,
            why_gone=f"container {label} restarted, and its keeper did not start the job again",
            details=details,
        )
    return None  # the supervisor of this start ended without an exit code: as without --restarts


def end_uncounted(
    container, runtime: DockerRuntime, run_dir: Path, label: str, details: dict | None, exec_seconds: float
) -> Observation:
    """A job started again beyond its --restarts, or without its keeper's count: from inside
    its container, the run's files that the keeper goes by were changed (its `restarts` file
    emptied, the limit in its `restart` file raised), which a job running as the container's
    user can do. Its limit is kept here: it is stopped, and never started again."""
    forbid_restart(container, runtime, run_dir, BEYOND_LIMIT)  # first: a look meanwhile says why, too
    supervisors = job_processes(container, runtime.run_dir, exec_seconds)["supervisor"]
    if supervisors:  # its supervisor stops the job's process group, TERM then KILL
        run_in(container, 'for pid in "$@"; do kill -TERM "$pid"; done', *supervisors, seconds=exec_seconds)
    return Observation(alive=False, why_gone=beyond_limit(label, runtime), details=details)


def may_come_back(client, container, runtime: DockerRuntime, run_dir: Path) -> bool:
    """Whether the container of a job with restarts left, and no stop asked, is down only for
    a moment (the restart policy, or `docker restart`, is starting it again): see restarts.py."""
    left = (runtime.restarts_allowed or 0) > (runtime.restarts or 0)
    return (
        left
        and may_be_started_again(client, container, runtime.container_started_at)
        and not restart_forbidden(container, runtime, run_dir)
    )


def beyond_limit(label: str, runtime: DockerRuntime) -> str:
    allowed = runtime.restarts_allowed or 0
    return (
        f"container {label} started it again beyond its --restarts {allowed}, as the run's files its keeper "
        "counts by were changed from inside the container; stopped, and not started again"
    )


def cause_said(word: str) -> str:
    """Why a container restarted, as its keeper could tell (see restarts.RestartLog)."""
    return (
        "the container stopped when the machine restarted (a new boot id)"
        if word == "boot"
        else "the container restarted"
    )
