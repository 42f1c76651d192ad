"""The Slurm backend's options, checked when a `%%train_detached --slurm` cell becomes a spec.

Each option is checked here (named as `parse="jupyter_trainer.backends.slurm.spec:..."` in
declared.py); they reach the backend as the spec's typed `options` (SlurmOptions). `check_gpus` is the
backend's preflight check of the shared `--gpus`. Every value reaches `sbatch` as one
argument of its own, never through a shell; these checks refuse what sbatch would misread (an
option where a value belongs, a newline) and the sbatch options the backend sets itself.

Pure logic: no Slurm command is run here.
"""

from __future__ import annotations

import re

from ...errors import InvalidOption

# Slurm's names of partitions, accounts and QOS: letters, digits and a few marks; a list with commas
NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}(,[A-Za-z0-9_.+-]{1,64}){0,15}")
# sbatch --time: minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED/INFINITE
TIME = re.compile(r"(\d{1,7}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|INFINITE|unlimited|infinite)")
GPUS = re.compile(r"([A-Za-z0-9_.-]{1,32}:)?[1-9]\d{0,2}")
MAX_NODES = 1024

# sbatch options the backend gives itself (its job's name, log, directory, environment) or that
# would make the job something it cannot follow (an array, a wrapped command): refused in --sbatch-arg
OWN_SBATCH_OPTIONS = {
    "-J": "--name", "--job-name": "--name", "-o": None, "--output": None, "-e": None, "--error": None,
    "-i": None, "--input": None, "-D": "--workdir", "--chdir": "--workdir", "--open-mode": None,
    "--parsable": None, "--wrap": None, "--export": "--env", "--export-file": "--env", "-a": None,
    "--array": None, "-N": "--nodes", "--nodes": "--nodes", "-p": "--partition", "--partition": "--partition",
    "-t": "--time", "--time": "--time", "-A": "--account", "--account": "--account", "-q": "--qos",
    "--qos": "--qos", "--requeue": "--requeue", "--no-requeue": "--requeue", "-W": None, "--wait": None,
    "--gpus-per-node": "--gpus", "--test-only": None,
}  # fmt: skip


def _name(flag: str, value: str | None) -> str | None:
    if value is None:
        return None
    if not NAME.fullmatch(value):
        raise InvalidOption(
            f"{flag} {value[:40]!r} is not a Slurm name",
            "use letters, digits, '_', '.', '+' or '-' (a list: comma-separated)",
        )
    return value


def parse_partition(value: str | None) -> str | None:
    return _name("--partition", value)


def parse_account(value: str | None) -> str | None:
    return _name("--account", value)


def parse_qos(value: str | None) -> str | None:
    return _name("--qos", value)


def parse_time(value: str | None) -> str | None:
    if value is None:
        return None
    if not TIME.fullmatch(value.strip()):
        raise InvalidOption(
            f"--time {value[:40]!r} is not a Slurm time limit", "use MINUTES, H:MM:SS or D-HH:MM:SS, as sbatch --time"
        )
    return value.strip()


def parse_nodes(value: int | None) -> int | None:
    if value is None:
        return None
    if not 1 <= value <= MAX_NODES:
        raise InvalidOption(f"--nodes {value} is out of range", f"give 1 to {MAX_NODES} nodes")
    return value


# sbatch's long options that are also the start of one refused above: given whole, they are
# theirs (getopt takes an exact match first); any shorter start is refused
_PREFIXES_OF_OWN = {"--gpus", "--export", "--time", "--nodes", "--wait"}
# sbatch's short options that take no value: in a cluster (-vH), the letters after them are options too
_SHORT_WITHOUT_VALUE = set("hHOQsuVvW")


def _refused_flag(value: str) -> str | None:
    """The option of ours that `value` names as sbatch reads it, if any: a long option or any
    start of it that sbatch would take for it (getopt accepts any unambiguous start), or a
    short one in a cluster of short options (-vJname)."""
    if value.startswith("--"):
        flag = value.split("=", 1)[0]
        if flag in OWN_SBATCH_OPTIONS:
            return flag
        if flag in _PREFIXES_OF_OWN or len(flag) < 3:
            return None
        starting = sorted(own for own in OWN_SBATCH_OPTIONS if own.startswith("--") and own.startswith(flag))
        return starting[0] if starting else None
    for letter in value[1:]:
        if f"-{letter}" in OWN_SBATCH_OPTIONS:
            return f"-{letter}"
        if letter not in _SHORT_WITHOUT_VALUE:
            return None  # the rest is this option's value (-c4)
    return None


def parse_sbatch_args(values: list[str] | None) -> tuple[str, ...]:
    args = []
    for value in values or ():
        shown = value[:60]
        if not value.startswith("-") or value in ("-", "--") or any(ch in value for ch in "\n\r\0"):
            raise InvalidOption(
                f"--sbatch-arg {shown!r} is not an sbatch option",
                "give one option per --sbatch-arg, with '=': --sbatch-arg=--mem=8G",
            )
        flag = _refused_flag(value)
        if flag is not None:
            instead = OWN_SBATCH_OPTIONS[flag]
            hint = f"use {instead} instead" if instead else "drop it: jupyter_trainer sets it for the job"
            named = value.split("=", 1)[0]
            raise InvalidOption(
                f"--sbatch-arg {named[:40] if named == flag else f'{named[:40]} ({flag})'} is not allowed", hint
            )
        args.append(value)
    return tuple(args)


def check_gpus(gpus: str | None) -> None:
    """With --slurm, --gpus (checked first as every backend's) is a count of GPUs per node."""
    if gpus is not None and not GPUS.fullmatch(gpus):
        raise InvalidOption(
            f"with --slurm, --gpus is a count of GPUs per node (or TYPE:COUNT), not {gpus!r}", "for example --gpus 2"
        )


def sbatch_options(spec, options) -> list[str]:
    """sbatch's options for the job besides its name and log: the same for a lone job and a
    sweep's job array."""
    nodes = options.nodes or 1
    args = [
        f"--chdir={spec.workdir}",
        "--open-mode=append",
        "--export=ALL",
        f"--nodes={nodes}",
        "--requeue" if options.requeue else "--no-requeue",
    ]
    if nodes > 1:
        args.append("--ntasks-per-node=1")
    for flag, value in (
        ("--partition", options.partition),
        ("--time", options.time),
        ("--account", options.account),
        ("--qos", options.qos),
    ):
        if value:
            args.append(f"{flag}={value}")
    if spec.gpus:
        args.append(f"--gpus-per-node={spec.gpus}")
    return args + list(options.sbatch_args)
