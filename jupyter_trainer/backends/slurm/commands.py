"""Slurm's commands (sbatch, squeue, sacct, scancel, scontrol), run as argument lists, never
through a shell, with a time limit; the one place their failures become our errors.

`CALLS` counts the commands run by name (the benchmarks and tests read it: a poll must cost one
squeue, and at most one accounting query).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess

from ...errors import BackendUnavailable, InvalidOption, Unreachable

COMMAND_TIMEOUT = 60.0  # seconds: a controller that does not answer by then cannot be reached
CONTROLLER = "the Slurm controller"

CALLS: collections.Counter = collections.Counter()

# What Slurm's commands say when the controller cannot be reached (slurm_load_jobs error: Unable
# to contact slurm controller (connect failure); Socket timed out on send/recv operation)
_UNREACHABLE = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "zero bytes were transmitted",
)

# What says Slurm itself cannot work on this machine (no configuration, munge down or not trusted),
# whatever the job asked for
_BROKEN_HERE = ("fatal:", "authentication", "munge", "configuration file", "configuration source", "slurm.conf")

# The user's own settings that change what squeue, sacct and scontrol list or how they print it
# (SQUEUE_PARTITION=other hides every job of ours; SLURM_TIME_FORMAT changes the times), and what
# scancel cancels (SCANCEL_STATE=PENDING cancels nothing that runs, and says so with success):
# never given to the commands run on a job's behalf
_QUERY_SETTINGS = ("SQUEUE_", "SACCT_", "SCONTROL_", "SCANCEL_")
_QUERY_VARIABLES = {"SLURM_TIME_FORMAT", "SLURM_BITSTR_LEN"}

# sbatch's settings from the environment that no command-line option of ours overrides and that
# make the job one we cannot follow: --wait (sbatch blocks until the job ends), an array, where
# its stderr and stdin go; the rest (a default partition, account, ...) are the user's to keep
_UNFOLLOWABLE_SBATCH_VARIABLES = {"SBATCH_WAIT", "SBATCH_ARRAY_INX", "SBATCH_ERROR", "SBATCH_INPUT", "SBATCH_BATCH"}


class SlurmCommandFailed(BackendUnavailable):
    """A Slurm command ran and said no: one line (what it said, and what to do). `said` is its
    last line as it wrote it; `output` what it printed on stdout before it failed. Slurm's commands
    have no error codes: the refusals that are answers are read from their words here alone."""

    def __init__(self, command: str, said: str, output: str = ""):
        self.command = command
        self.said = said
        self.output = output
        super().__init__(
            f"`{command}` failed: {_without_prefix(said)}",
            "check that Slurm's commands work on this machine (sinfo, squeue --me)",
        )

    @property
    def unknown_job(self) -> bool:
        """The controller knows no job of that id (scancel, scontrol: an ended job it has forgotten)."""
        return "invalid job id" in self.said.lower()

    @property
    def job_ending(self) -> bool:
        """scancel: the job is already completing or completed."""
        return "already completing or completed" in self.said.lower()

    @property
    def job_ended(self) -> bool:
        """scontrol: the job (or one task of an array) has ended, and is still known."""
        return "already finished" in self.said.lower()

    @property
    def no_accounting(self) -> bool:
        """sacct: accounting is disabled, or its database daemon (slurmdbd) does not answer."""
        said = self.said.lower()
        return "accounting storage is disabled" in said or "slurmdbd" in said

    @property
    def accounting_down(self) -> bool:
        """sacct: slurmdbd does not answer now (it may later)."""
        return "slurmdbd" in self.said.lower()

    @property
    def broken_here(self) -> bool:
        """Slurm itself cannot work on this machine (no configuration, munge down or not trusted)."""
        return any(words in self.said.lower() for words in _BROKEN_HERE)


class ControllerUnreachable(Unreachable):
    """A Slurm command could not reach the controller (it said so, or gave no answer in time): the
    jobs keep their status. `output` is what it printed on stdout before (sbatch: perhaps the id of
    a job the controller had accepted)."""

    def __init__(self, message: str, hint: str | None = None, output: str = ""):
        self.output = output
        super().__init__(CONTROLLER, message, hint)


def printed_before(error: BaseException) -> str:
    """What a failed Slurm command printed on stdout before it failed ("" for any other error)."""
    return error.output if isinstance(error, (SlurmCommandFailed, ControllerUnreachable)) else ""


class UnusableAnswer(BackendUnavailable):
    """A Slurm command answered with what it never prints: nothing in it can be trusted (a job
    missing from it is not a job that ended)."""

    def __init__(self, command: str, problem: str):
        super().__init__(
            f"`{command}` gave an answer that cannot be read ({problem})",
            "the jobs keep their status until it answers again; try it by hand",
        )


def require(command: str) -> str:
    """The command's path; BackendUnavailable when it is not on PATH."""
    program = shutil.which(command)
    if program is None:
        raise BackendUnavailable(
            f"`{command}` is not on PATH: this machine is not a Slurm submit host",
            "run the notebook on the cluster's login node (or in a Slurm job), where Slurm's commands are",
        )
    return program


def query_environment(base: dict | None = None) -> dict[str, str]:
    """The environment for a command whose answer is read: the user's, without the settings that
    filter or reformat what it prints."""
    env = dict(os.environ if base is None else base)
    return {
        key: value for key, value in env.items() if not key.startswith(_QUERY_SETTINGS) and key not in _QUERY_VARIABLES
    }


def sbatch_environment(base: dict) -> dict[str, str]:
    """The environment for sbatch: the user's, without the SBATCH_* settings that make a job we
    cannot follow (the job itself gets the user's environment through --export=ALL)."""
    return {key: value for key, value in base.items() if key not in _UNFOLLOWABLE_SBATCH_VARIABLES}


def run(command: str, *args: str, timeout: float = COMMAND_TIMEOUT, env: dict | None = None) -> str:
    """The command's standard output. A missing command is BackendUnavailable; a controller that
    cannot be reached is ControllerUnreachable (an Unreachable); any other refusal is SlurmCommandFailed
    (its last line).
    A command whose output is read gets `query_environment()` unless `env` is given."""
    program = require(command)
    CALLS[command] += 1
    try:
        done = subprocess.run(
            [program, *args], capture_output=True, text=True, errors="replace", timeout=timeout,
            stdin=subprocess.DEVNULL, env=query_environment() if env is None else env,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        message = f"`{command}` got no answer in {timeout:.0f} s: {CONTROLLER} cannot be reached"
        raise ControllerUnreachable(message, output=_text(exc.stdout)) from None
    except OSError as exc:
        raise BackendUnavailable(f"`{command}` cannot be run ({exc.strerror or exc})") from None
    if done.returncode == 0:
        return done.stdout  # an answer, whatever warnings came with it
    said = _last_line(done.stderr) or _last_line(done.stdout) or _exit_status(done.returncode)
    if _says_unreachable(done.stderr):
        hint = "check the cluster's status with sinfo; the jobs go on meanwhile"
        raise ControllerUnreachable(f"cannot reach {CONTROLLER} ({said})", hint, output=done.stdout)
    raise SlurmCommandFailed(command, said, done.stdout)


def _text(data) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def _exit_status(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _says_unreachable(text: str) -> bool:
    lowered = text.lower()
    return any(words in lowered for words in _UNREACHABLE)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _without_prefix(said: str) -> str:
    """What a command said, without the `sbatch: error: ` its lines start with."""
    message = said
    for prefix in ("sbatch: ", "squeue: ", "scancel: ", "scontrol: ", "sacct: "):
        message = message[len(prefix) :] if message.startswith(prefix) else message
    for prefix in ("fatal: ", "error: ", "Batch job submission failed: "):
        message = message.replace(prefix, "")
    return message


def refused(error: SlurmCommandFailed, what: str) -> InvalidOption:
    """A refusal of sbatch's as one line: what Slurm said, and what to do."""
    message = _without_prefix(error.said)
    if error.broken_here:
        return InvalidOption(
            f"sbatch cannot submit {what}: {message}",
            "check that Slurm works on this machine (sinfo; SLURM_CONF, munge)",
        )
    return InvalidOption(
        f"Slurm refused {what}: {message}",
        "check the --slurm options (sinfo lists partitions, sacctmgr show assoc your accounts)",
    )


# sbatch --parsable's answer, its last line: "ID", or "ID;CLUSTER" on a federation (a job array's too)
SBATCH_ANSWER = re.compile(r"(\d{1,12})(?:;([A-Za-z0-9_.-]{1,64}))?")


def job_id_in(output: str):
    """sbatch --parsable's answer (the id, and the cluster if any, as the match's groups), if it is one."""
    answer = output.strip().splitlines()[-1].strip() if output.strip() else ""
    return SBATCH_ANSWER.fullmatch(answer)
