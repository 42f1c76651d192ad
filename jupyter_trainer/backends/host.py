"""The `--host` backend: the job's supervisor is a detached process on this machine."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.lines import lines_root
from ..core.processes import (
    ProcessIdentity,
    boot_id,
    command_line,
    memory_limit,
    session_id,
    session_members,
    session_usage,
    start_time,
)
from ..core.record import JobRecord, Observation
from ..core.resources import NVIDIA_SMI_QUERY, Usage, parse_nvidia_smi
from ..spec.job_spec import DetachedSpec
from . import turns
from .base import (
    LAUNCH_FILE,
    LOG_FILE,
    STOP_GRACE_SECONDS,
    SUPERVISOR_FILE,
    BackendBase,
    FileLogSource,
    ScriptPlace,
    job_command,
    job_environment,
    notify_input,
    prepare_supervised_run,
    read_supervisor_facts,
    write_launch_target,
)

# Variables a Jupyter kernel sets for itself that would mislead a plain script.
_KERNEL_ONLY_VARIABLES = ("JPY_PARENT_PID", "JPY_SESSION_NAME", "JPY_INTERRUPT_EVENT")

JOB_START_WINDOW = 60  # seconds: the supervisor starts the job at once, even on a loaded machine

# Supervisors this process started, by identity: polled so they are reaped, not left as zombies.
_children: dict[ProcessIdentity, subprocess.Popen] = {}
# The jobs' processes found so far, by run directory and supervisor (see find_job).
_found_jobs: dict[tuple[str, ProcessIdentity], ProcessIdentity] = {}
FOUND_JOBS_KEPT = 256


def _inherited_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _KERNEL_ONLY_VARIABLES}
    if env.get("MPLBACKEND", "").startswith("module://matplotlib_inline"):
        del env["MPLBACKEND"]
    return env


def _reap_children() -> None:
    for identity, child in list(_children.items()):
        if child.poll() is not None:
            _children.pop(identity, None)


def _child_running(supervisor: ProcessIdentity) -> bool | None:
    """Whether `supervisor`, if this process started it, still runs: one waitpid (which reaps it
    once it has ended), no look in /proc; its pid cannot have gone to another process while it
    is not reaped. None if this process did not start it."""
    child = _children.get(supervisor)
    if child is None or supervisor.boot_id != boot_id():
        return None
    if child.poll() is None:
        return True
    _children.pop(supervisor, None)
    return False


@dataclass(frozen=True)
class HostRuntime:
    """A job supervised on this machine: its supervisor's identity."""

    supervisor: ProcessIdentity

    def to_dict(self) -> dict:
        return {"supervisor": self.supervisor.to_dict()}

    @classmethod
    def of(cls, record: JobRecord) -> "HostRuntime":
        # a malformed identity matches no process, so it is never signalled (see ProcessIdentity)
        return cls(ProcessIdentity.from_dict(record.runtime.get("supervisor")))


def start_supervised(
    run_dir: Path, command: list[str], cwd: str, env: dict[str, str], given: bytes = b""
) -> HostRuntime:
    """Start `command` under the supervisor as a detached process of its own session; return its
    identity. `given` is what the supervisor reads on its stdin before the job starts (notify_input)."""
    _reap_children()
    child = subprocess.Popen(
        ["sh", str(run_dir / SUPERVISOR_FILE), str(run_dir), str(STOP_GRACE_SECONDS), "0", *command],
        cwd=cwd,
        env={**_inherited_environment(), **env},
        stdin=subprocess.PIPE if given else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    if given:  # a few hundred bytes: the pipe holds them whole, the supervisor reads them at once
        with contextlib.suppress(BrokenPipeError):
            child.stdin.write(given)
        child.stdin.close()
    identity = ProcessIdentity.of(child.pid)
    _children[identity] = child
    return HostRuntime(identity)


def _is_the_job(pid: int, supervisor: ProcessIdentity, script: str) -> bool:
    """Whether process `pid` shows itself to be the job its supervisor started: it leads a session
    of its own, runs this run's script, and started within moments of its supervisor (a process
    that got a reused pid later started long after)."""
    if pid <= 1 or pid == supervisor.pid or session_id(pid) != pid or supervisor.boot_id != boot_id():
        return False
    if script not in (command_line(pid) or []):
        return False
    started = start_time(pid)
    if started is None or supervisor.start_time is None:
        return False  # no start times to compare: nothing shows the process is the job
    return 0 <= started - supervisor.start_time <= JOB_START_WINDOW * os.sysconf("SC_CLK_TCK")


def find_job(run_dir: Path, supervisor: ProcessIdentity) -> int | None:
    """The job's process, found by what it runs, once its supervisor is gone. Never by the pid
    file alone: the job can write it, and could name another process there; the process it names
    is looked at first, and taken only if it shows itself to be the job."""
    key = (str(run_dir), supervisor)
    known = _found_jobs.get(key)
    if known is not None and known.is_alive():  # the very process found before (same pid, same start)
        return known.pid
    pid = _look_for_job(run_dir, supervisor)
    if pid is not None:
        if len(_found_jobs) >= FOUND_JOBS_KEPT:
            _found_jobs.clear()
        _found_jobs[key] = ProcessIdentity.of(pid)
    return pid


def _look_for_job(run_dir: Path, supervisor: ProcessIdentity) -> int | None:
    script = str(run_dir / LAUNCH_FILE)
    named = read_supervisor_facts(run_dir).job_pid
    if named is not None and _is_the_job(named, supervisor, script):
        return named
    try:
        pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return None
    return next((pid for pid in pids if _is_the_job(pid, supervisor, script)), None)


class HostBackend(BackendBase):
    name = "host"
    status_interval = 2.0  # seconds between two status checks by a widget
    # ...while the widget is woken by each change of the run's files: the supervisor writes the
    # job's pid and exit code there, so only a supervisor killed goes unseen until the next check
    watched_status_interval = 10.0
    usage_outlives_the_job = False
    starts_at_launch = True
    has_containers = False

    def preflight(self, spec: DetachedSpec, store) -> None:
        turns.check_gpus_offered(spec)
        turns.check_lines(spec, lines_root())

    def prepare(self, run_dir: Path, spec: DetachedSpec) -> None:
        prepare_supervised_run(run_dir, spec.script, spec.from_cell)

    def launch(self, record: JobRecord, run_dir: Path, spec: DetachedSpec) -> HostRuntime:
        # a script run in place is the file as named (this machine follows its links itself)
        write_launch_target(
            run_dir, spec, spec.workdir, record.name, ScriptPlace(spec.script_path) if spec.script_path else None
        )
        command = job_command(spec, str(run_dir))
        env = job_environment(spec)
        if turns.waits_in_line(spec):  # its waiter takes its turn in this machine's lines, then runs it
            turns.prepare_turn(run_dir, record, spec, lines_root())
            command = turns.waiting_command(str(run_dir), command)
        elif spec.gpus and spec.gpus != "all":  # device ids: these, with no waiting
            env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **env, "CUDA_VISIBLE_DEVICES": spec.gpus}
        return start_supervised(
            run_dir, command, cwd=spec.workdir, env=env, given=notify_input(record, run_dir, spec.notify)
        )

    def asking(self, record: JobRecord) -> str:
        return ""  # its supervisor's files and processes, on this machine

    def observe(self, record: JobRecord, run_dir: Path) -> Observation:
        return observe_supervised(run_dir, HostRuntime.of(record).supervisor)

    def log_source(self, record: JobRecord, run_dir: Path) -> FileLogSource:
        return FileLogSource(run_dir / LOG_FILE)

    def describe_where(self, record: JobRecord) -> str:
        pid = HostRuntime.of(record).supervisor.pid if record.runtime else 0
        return f"this machine (pid {pid})" if pid else "this machine"

    def describe_host(self, record: JobRecord) -> str | None:
        return None  # this machine, where the jobs table is read

    def describe_facts(self, record: JobRecord) -> list[str]:
        return []  # the status and exit code say it all

    def lingering(self, record: JobRecord, run_dir: Path) -> list[str]:
        return session_members(read_supervisor_facts(run_dir).job_pid) if record.status.is_final else []

    def usage(self, record: JobRecord, run_dir: Path) -> Usage | None:
        return supervised_usage(run_dir, HostRuntime.of(record).supervisor) if record.runtime else None

    def stop(self, record: JobRecord, run_dir: Path, container: bool = False) -> None:
        stop_supervised(run_dir, HostRuntime.of(record).supervisor)

    def stop_together(self, runs: list[tuple[JobRecord, Path]]) -> list[str]:
        """A sweep's runs told to stop at once, none waited for here: one by one, each waited for,
        a sweep of 1000 took six minutes to stop, and its waiting runs kept starting meanwhile."""
        return [
            record.name
            for record, _run_dir in runs
            if record.runtime and signal_supervised(HostRuntime.of(record).supervisor)
        ]


# A job supervised on this machine, by its run directory and its supervisor's identity: what the
# host backend does, and what SageMaker local mode (also supervised here) borrows.


def observe_supervised(run_dir: Path, supervisor: ProcessIdentity) -> Observation:
    """What is seen of a supervised job now (and of its turn, where it waited for one)."""
    return turns.with_turn(_observe_supervisor(run_dir, supervisor), run_dir)


def _observe_supervisor(run_dir: Path, supervisor: ProcessIdentity) -> Observation:
    supervisor_alive = _child_running(supervisor)
    if supervisor_alive is None:  # another process's: its pid and start time, in /proc
        supervisor_alive = supervisor.is_alive()
    facts = read_supervisor_facts(run_dir)  # read after the liveness check: no race
    if supervisor_alive:
        # the job can write its exit-code file too: an exit code counts only once its supervisor,
        # which writes it last, is gone
        if facts.problem:
            return facts.unknown(True)
        return Observation(alive=True, started=facts.job_pid is not None or facts.exit_code is not None)
    if find_job(run_dir, supervisor) is not None:
        # the supervisor was killed but the job goes on (whatever its files say): it can no
        # longer record its exit code
        return Observation(alive=True, started=True)
    if facts.exit_code is not None:
        return facts.ended()
    if facts.problem:
        return facts.unknown(False)
    if supervisor.boot_id and supervisor.boot_id != boot_id():
        return Observation(alive=False, why_gone="the machine restarted while the job ran")
    return Observation(
        alive=False,
        why_gone="the job's supervisor process ended without recording an exit code (was it killed?)",
    )


def supervised_usage(run_dir: Path, supervisor: ProcessIdentity) -> Usage | None:
    """What a supervised job's processes (its session) use, and the GPUs of this machine if it has
    any; None once they are gone."""
    job = find_job(run_dir, supervisor)
    used = session_usage(job, shared=True) if job is not None else None
    if used is None:
        return None
    cpu_seconds, memory, taken_at = used
    return Usage(
        "processes", taken_at=taken_at, cpu_seconds=cpu_seconds, memory_bytes=memory,
        memory_limit_bytes=_memory_limit_this_minute(job, _this_minute()), gpus=_local_gpus(),
    )  # fmt: skip


# A view looks at what its job uses every few seconds; what seldom changes is looked up once a minute.


def _this_minute() -> int:
    return int(time.monotonic() // 60)


@functools.lru_cache(maxsize=64)
def _memory_limit_this_minute(pid: int, minute: int) -> int | None:
    """The job's memory limit (a file per cgroup level to read; a limit is seldom changed)."""
    return memory_limit(pid)


@functools.lru_cache(maxsize=1)
def _nvidia_smi_this_minute(minute: int) -> str | None:
    import shutil

    return shutil.which("nvidia-smi")


def _local_gpus() -> tuple:
    """This machine's GPUs, from its nvidia-smi (none without one)."""
    program = _nvidia_smi_this_minute(_this_minute())
    if program is None:
        return ()
    try:
        answer = subprocess.run(
            [program, *NVIDIA_SMI_QUERY], capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse_nvidia_smi(answer.stdout) if answer.returncode == 0 else ()


def signal_supervised(supervisor: ProcessIdentity) -> bool:
    """The stop sent to a supervised job's supervisor (alive, and still itself), not waited for;
    whether it was sent."""
    with contextlib.suppress(ProcessLookupError):
        if supervisor.is_alive():
            os.kill(supervisor.pid, signal.SIGTERM)
            return True
    return False


def stop_supervised(run_dir: Path, supervisor: ProcessIdentity) -> None:
    """Stop a supervised job (its whole process group) and wait for it."""
    with contextlib.suppress(ProcessLookupError):  # it may end on its own meanwhile
        if supervisor.is_alive():
            # the supervisor stops the job's process group: TERM, then KILL after the grace
            # period; wait for it, so that the stop is seen done as with every backend
            os.kill(supervisor.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_SECONDS + 5
            while supervisor.is_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
                _reap_children()
            return
        job_pid = find_job(run_dir, supervisor)
        if job_pid is not None:
            # no supervisor left to do it: TERM the group, then KILL what is left after the grace period
            os.killpg(job_pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_SECONDS
            while session_id(job_pid) == job_pid and time.monotonic() < deadline:
                time.sleep(0.2)
            if session_id(job_pid) == job_pid:
                os.killpg(job_pid, signal.SIGKILL)
