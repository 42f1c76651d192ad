"""What the Slurm backend declares: its switch, its options and their typed values, its entry in
the registry, and the files it keeps in a run directory. Read at %load_ext: its checks are named
(spec.py), imported when a value is checked."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ...spec.options import (
    ENV,
    GPUS,
    INTERPRETER,
    NOTIFY,
    WORKDIR,
    BackendOptions,
    DetachedBackend,
    Option,
)
from ..declaration import Declaration

_CHECK = "jupyter_trainer.backends.slurm.spec:"

# the files of a run, beside the supervisor's (start.py and batch.sh name them too)
BATCH_FILE = "slurm_batch.sh"  # what sbatch submits: the same for every job
START_FILE = "slurm_start.py"  # run by it on the batch node: the environment, then the supervisor
NODE_FILE = "slurm_node.py"  # with --nodes N: run on each node by srun
ENV_FILE = "slurm_env"  # the job's --env values (secrets), read and removed by slurm_start.py
NOTIFY_INPUT_FILE = "slurm_notify"  # with --notify: what the supervisor reads on its stdin
SECRET_FILES = (ENV_FILE, NOTIFY_INPUT_FILE)  # removed once the job has ended, however it ended

SLURM = Option(
    "slurm",
    "--slurm",
    "submit to Slurm with sbatch (this machine is a submit host; the job store on a filesystem the nodes share)",
    kind="switch",
    config=True,
    default=False,
)
OWN_OPTIONS = (
    Option(
        "partition", "--partition", "with --slurm: the partition, as sbatch --partition", "P", config=True,
        parse=_CHECK + "parse_partition",
    ),
    Option(
        "time", "--time", "with --slurm: the time limit, as sbatch --time (a job past it ends failed)", "LIMIT",
        config=True, parse=_CHECK + "parse_time",
    ),
    Option(
        "nodes", "--nodes", "with --slurm: how many nodes; the interpreter runs once on each, through srun", "N", "int",
        parse=_CHECK + "parse_nodes",
    ),
    Option(
        "account", "--account", "with --slurm: the account charged, as sbatch --account", "A", config=True,
        parse=_CHECK + "parse_account",
    ),
    Option(
        "qos", "--qos", "with --slurm: the quality of service, as sbatch --qos", "Q", config=True,
        parse=_CHECK + "parse_qos",
    ),
    Option(
        "sbatch_args", "--sbatch-arg",
        "with --slurm: any other sbatch option, as given (repeatable; --sbatch-arg=--mem=8G)", "ARG", "append",
        parse=_CHECK + "parse_sbatch_args",
    ),
    Option(
        "requeue", "--requeue",
        "with --slurm: let Slurm requeue the job after preemption or node failure (counted as restarts)", kind="switch",
    ),
)  # fmt: skip


@dataclass(frozen=True)
class SlurmOptions(BackendOptions):
    """A Slurm job's own options, as checked (spec.py); stored as "backend_options", the given ones."""

    partition: str | None = None
    time: str | None = None
    nodes: int | None = None
    account: str | None = None
    qos: str | None = None
    sbatch_args: tuple[str, ...] = ()
    requeue: bool = False
    # a sweep's run: its task of the sweep's job array (array.py), given by the sweep, never stored
    array_task: Any = field(default=None, compare=False)

    def stored(self) -> dict[str, Any]:
        return BackendOptions.stored(dataclasses.replace(self, array_task=None))


# its workdir is this machine's, which the nodes must see at the same path
DETACHED = DetachedBackend(
    "slurm",
    options=(WORKDIR, GPUS, ENV, INTERPRETER, NOTIFY, SLURM, *OWN_OPTIONS),
    switch="slurm",
    lacks="runs on the cluster's nodes, without a container",
    typed=SlurmOptions,
    instead="--requeue, which lets Slurm start it again",
)

DECLARATION = Declaration(
    "slurm",
    entry="jupyter_trainer.backends.slurm.backend:SlurmBackend",
    detached=DETACHED,
    run_files=(BATCH_FILE, START_FILE, NODE_FILE, *SECRET_FILES),
)
