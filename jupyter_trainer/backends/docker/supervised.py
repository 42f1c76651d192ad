"""The job's supervisor as its container shows it: whether it runs (its exec, or a process whose
command line names the run), what its files say, and how its exec ended."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..base import EXIT_CODE_FILE, PID_FILE, RUN_FILE_LIMIT, SupervisorFacts, read_supervisor_facts
from .errors import engine_errors
from .in_container import container_file, read_container_file, runs_supervisor
from .runtime import DockerRuntime


def exec_outcome(container, exec_id: str) -> str:
    """How the supervisor's exec ended, in words, when the engine still knows."""
    try:
        code = container.client.api.exec_inspect(exec_id).get("ExitCode")
    except engine_errors():
        return " (was it killed?)"
    if code in (None, 0, 137, 143):
        return " (was it killed?)"
    return f" (it exited with code {code}: can the container's user read and write the store's files?)"


def supervisor_running(container, runtime: DockerRuntime, by_command_line: bool = False) -> bool:
    """Whether the job's supervisor runs: its exec's, or (`by_command_line`, or a job its
    container's keeper started again) the one whose command line names the run."""
    import docker

    try:
        if not by_command_line and not runtime.restarts:
            return bool(container.client.api.exec_inspect(runtime.exec_id).get("Running"))
    except docker.errors.NotFound:
        pass
    # The engine restarted and forgot its execs (with live-restore the container and the
    # processes in it lived on), or the keeper started it: look for it among the processes.
    try:
        listing = container.top(ps_args="-ww -eo pid,args")  # whole command lines, whatever dockerd's COLUMNS
    except docker.errors.APIError:  # an engine whose ps takes no such options
        listing = container.top()
    return runs_supervisor(listing, runtime.run_dir)


def supervisor_facts(container, runtime: DockerRuntime, run_dir: Path) -> SupervisorFacts:
    if runtime.mounted:
        return read_supervisor_facts(run_dir)
    inner = runtime.run_dir
    exit_code, written_at = container_file(container, f"{inner}/{EXIT_CODE_FILE}", limit=RUN_FILE_LIMIT)
    facts = SupervisorFacts.parse(
        read_container_file(container, f"{inner}/{PID_FILE}", limit=RUN_FILE_LIMIT), exit_code
    )
    return dataclasses.replace(facts, ended_at=written_at) if facts.exit_code is not None else facts


def still_supervised(client, runtime: DockerRuntime) -> bool:
    import docker

    try:
        return bool(client.api.exec_inspect(runtime.exec_id).get("Running"))
    except docker.errors.NotFound:
        return False  # the engine restarted and forgot its execs: the long way
