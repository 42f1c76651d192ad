"""Slurm's commands (sbatch, squeue, sacct, scancel, scontrol), run as argument lists, never
through a shell, with a time limit; the one place their failures become our errors.

`CALLS` counts the commands run by name (the benchmarks and tests read it: a poll must cost one
squeue, and at most one accounting query).
"""

from __future__ import annotations

import collections
import shutil
import subprocess

from ...errors import BackendUnavailable, InvalidOption, Unreachable

COMMAND_TIMEOUT = 60.0  # seconds: a controller that does not answer by then cannot be reached
CONTROLLER = "the Slurm controller"

CALLS: collections.Counter = collections.Counter()

# What Slurm's commands say when the controller cannot be reached (slurm_load_jobs error: Unable
# to contact slurm controller (connect failure); Socket timed out on send/recv operation)
_UNREACHABLE = ("unable to contact slurm controller", "socket timed out", "connection refused", "zero bytes were transmitted")


class SlurmCommandFailed(Exception):
    """A Slurm command ran and said no: its one line, for the caller to word."""

    def __init__(self, command: str, message: str):
        self.command = command
        self.message = message
        super().__init__(f"{command}: {message}")


def require(command: str) -> str:
    """The command's path; BackendUnavailable when it is not on PATH."""
    program = shutil.which(command)
    if program is None:
        raise BackendUnavailable(
            f"`{command}` is not on PATH: this machine is not a Slurm submit host",
            "run the notebook on the cluster's login node (or in a Slurm job), where Slurm's commands are",
        )
    return program


def run(command: str, *args: str, timeout: float = COMMAND_TIMEOUT, env: dict | None = None, check: bool = True) -> str:
    """The command's standard output. A missing command is BackendUnavailable; a controller that
    cannot be reached is Unreachable; any other refusal is SlurmCommandFailed (its last line)."""
    program = require(command)
    CALLS[command] += 1
    try:
        done = subprocess.run(
            [program, *args], capture_output=True, text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL, env=env
        )
    except subprocess.TimeoutExpired:
        raise Unreachable(CONTROLLER, f"`{command}` got no answer in {timeout:.0f} s: {CONTROLLER} cannot be reached") from None
    except OSError as exc:
        raise BackendUnavailable(f"`{command}` cannot be run ({exc.strerror or exc})") from None
    if done.returncode != 0 or (check and _says_unreachable(done.stderr)):
        said = _last_line(done.stderr) or _last_line(done.stdout) or f"exit code {done.returncode}"
        if _says_unreachable(done.stderr):
            raise Unreachable(CONTROLLER, f"cannot reach {CONTROLLER} ({said})", "check the cluster's status with sinfo; the jobs go on meanwhile")
        if done.returncode != 0:
            raise SlurmCommandFailed(command, said)
    return done.stdout


def _says_unreachable(text: str) -> bool:
    lowered = text.lower()
    return any(words in lowered for words in _UNREACHABLE)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def refused(error: SlurmCommandFailed, what: str) -> InvalidOption:
    """A refusal of sbatch's as one line: what Slurm said, and what to do."""
    message = error.message
    for prefix in ("sbatch: error: ", "error: ", "Batch job submission failed: "):
        message = message.replace(prefix, "")
    return InvalidOption(f"Slurm refused {what}: {message}", "check the --slurm options (sinfo lists partitions, sacctmgr show assoc your accounts)")
