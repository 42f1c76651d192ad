"""Every option of the cell magics and of `jupyter-trainer submit`, declared once.

An `Option` says its flag, its help and whether %config can give it a default
(`%config TrainerMagics.image = "..."`). From these declarations come the
argparse parsers of the magics and of the CLI, the magics' configurable traits,
and the values handed to a spec builder, with the one rule every surface shares:
a flag always wins over config, even an empty one.

A detached backend is declared here too (`DetachedBackend`): the switch that
chooses it, the options it takes, what it cannot do without. The spec builder
loops over these declarations, so a new backend adds its own lines here and
changes no rule elsewhere.

Pure logic: no IPython, no runtime library.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

# The checks are named, not imported: the magics declare their options at %load_ext, and a value is
# checked only when a job is asked for.
_CHECK = "jupyter_trainer.spec.checks:"


@dataclass(frozen=True)
class Option:
    dest: str  # the spec builder's keyword, and the config trait's name
    flag: str
    help: str
    metavar: str | None = None
    kind: str = "value"  # "value", "int", "append" (repeatable) or "switch"
    config: bool = False  # %config TrainerMagics.<dest> gives it a default
    default: Any = None  # the value when neither a flag nor config gives one
    # checks the settled value and gives what the spec holds: a function, or "module:function" (one
    # of `checks`, or a backend's check in its own package), imported when a value is checked
    parse: Callable[[Any], Any] | str | None = None
    backends: tuple[str, ...] = ()  # the detached backends that take it (none named: every one)
    elsewhere: str = ""  # what to say when it is given to a backend that does not take it (default: its switch)

    def taken_by(self, backend: str) -> bool:
        return not self.backends or backend in self.backends

    def check(self, value: Any) -> Any:
        """The value as its `parse` leaves it (as it is, with none)."""
        if self.parse is None:
            return value
        return (declared_function(self.parse) if isinstance(self.parse, str) else self.parse)(value)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.kind == "switch":
            # None when not given, so that a configured default can apply
            parser.add_argument(self.flag, dest=self.dest, action="store_const", const=True, default=None, help=self.help)
        elif self.kind == "append":
            parser.add_argument(self.flag, dest=self.dest, action="append", default=[], metavar=self.metavar, help=self.help)
        else:
            kind = int if self.kind == "int" else str
            parser.add_argument(self.flag, dest=self.dest, type=kind, default=None, metavar=self.metavar, help=self.help)


def declared_function(reference: str) -> Callable:
    """The function a declaration names as "module:function", imported now."""
    import importlib

    module, _, function = reference.partition(":")
    return getattr(importlib.import_module(module), function)


# -- the line magics and the CLI's commands -----------------------------------------------------


@dataclass(frozen=True)
class Argument:
    """An argument of a line magic and of the CLI command that does the same (`%train_logs` and
    `jupyter-trainer logs`): declared once, added to both parsers."""

    flags: tuple[str, ...]
    settings: tuple[tuple[str, Any], ...]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, **dict(self.settings))


def argument(*flags: str, **settings: Any) -> Argument:
    return Argument(flags, tuple(settings.items()))


JOB_NAME = argument("name", help="the job's name")
LINES = argument("-n", "--lines", type=int, default=None, metavar="LINES", help="only the last LINES lines")
FOLLOW = argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends")
ALL_RUNS = argument("--all", action="store_true", help="include earlier runs of re-run jobs")
ONE_RUN = argument("--run", type=int, default=None, metavar="N", help="only run N")
WITH_CONTAINER = argument("--container", action="store_true", help="also stop the job's container")
NO_WIDGET_TABLE = argument("--no-widget", action="store_true", help="print a text table instead of the live one")
AS_JSON = argument("--json", action="store_true", help="one JSON object")
SCRIPT = argument("script", help="an existing training script, run in place (relative to --workdir, else the current directory)")
ENTRY_SCRIPT = argument(
    "script", nargs="?", default=None,
    help="an existing file as the entry script (relative to --source-dir when given); none: the image's own train runs",
)
# %train_compare and `jupyter-trainer compare`
JOB_NAMES = argument("names", nargs="+", metavar="NAME", help="the jobs to compare (their latest runs)")
COMPARED_METRIC = argument(
    "--metric", default=None, metavar="M",
    help="the metric to compare (default: the first loss-like one the jobs share, else their main metric)",
)  # fmt: skip
X_AXIS = argument(
    "--x", dest="x", choices=("time",), default=None,
    help="time: x is the seconds since each job's start (the default when the jobs' axes differ)",
)  # fmt: skip


def split_script_arguments(words: list[str]) -> tuple[list[str], list[str]]:
    """The options, and the script's arguments: the words after the first `--` (on a magic's line
    and on `jupyter-trainer submit`'s)."""
    if "--" not in words:
        return list(words), []
    cut = words.index("--")
    return list(words[:cut]), list(words[cut + 1 :])


# -- what every cell magic takes --------------------------------------------------------------

JOB = (
    Option("name", "--name", "the job's name (default: the notebook's or script's name and a hash of the cell)", "NAME"),
    Option("metrics", "--metric", "a metric to parse from the log (repeatable; one capture group)", "NAME=REGEX", "append"),
    Option("no_widget", "--no-widget", "print a one-line summary instead of displaying the widget", kind="switch"),
    Option("rerun", "--rerun", "train again under the name of a finished job", kind="switch"),
)

# Both cell magics take it: a detached job's supervisor, wherever it runs, sends the message.
NOTIFY = Option(
    "notify", "--notify", "when the job ends, POST a JSON message to URL (Slack-style 'text' and the job's facts), "
    "also with no notebook open; the URL is never stored or shown", "URL", config=True, parse=_CHECK + "parse_notify",
)

# -- %%train_detached and `jupyter-trainer submit` ---------------------------------------------

_SLURM_CHECK = "jupyter_trainer.backends.slurm.spec:"
SLURM_OPTIONS = (
    Option(
        "slurm", "--slurm", "submit to Slurm with sbatch (this machine is a submit host; the job store on a filesystem the nodes share)",
        kind="switch", config=True, default=False,
    ),
    Option("partition", "--partition", "with --slurm: the partition, as sbatch --partition", "P", config=True, parse=_SLURM_CHECK + "parse_partition", backends=("slurm",)),
    Option("time", "--time", "with --slurm: the time limit, as sbatch --time (a job past it ends failed)", "LIMIT", config=True, parse=_SLURM_CHECK + "parse_time", backends=("slurm",)),
    Option("nodes", "--nodes", "with --slurm: how many nodes; the interpreter runs once on each, through srun", "N", "int", parse=_SLURM_CHECK + "parse_nodes", backends=("slurm",)),
    Option("account", "--account", "with --slurm: the account charged, as sbatch --account", "A", config=True, parse=_SLURM_CHECK + "parse_account", backends=("slurm",)),
    Option("qos", "--qos", "with --slurm: the quality of service, as sbatch --qos", "Q", config=True, parse=_SLURM_CHECK + "parse_qos", backends=("slurm",)),
    Option(
        "sbatch_args", "--sbatch-arg", "with --slurm: any other sbatch option, as given (repeatable; --sbatch-arg=--mem=8G)", "ARG", "append",
        parse=_SLURM_CHECK + "parse_sbatch_args", backends=("slurm",),
    ),
    Option("requeue", "--requeue", "with --slurm: let Slurm requeue the job after preemption or node failure (counted as restarts)", kind="switch", backends=("slurm",)),
)  # fmt: skip

CONTAINER = ("docker",)  # the backends that run a job in a container

DETACHED = (
    Option(
        "image", "--image", "create (if missing) a persistent container from IMAGE and run in it", "IMAGE",
        config=True, parse=_CHECK + "parse_image", backends=CONTAINER,
    ),
    Option(
        "container", "--container", "the persistent container to use or create", "NAME",
        config=True, parse=_CHECK + "parse_container", backends=CONTAINER,
    ),
    Option(
        "workdir", "--workdir", "host directory mounted at /workspace; the job's working directory "
        "(on a remote Docker host: a directory there; default a volume there)", "DIR",
        config=True,
    ),  # parsed by the spec builder: a local directory, or one of the remote host (see spec.build_spec)
    Option(
        "gpus", "--gpus", "'all', a count, or device ids (0,1), as docker run --gpus; with --slurm: GPUs per node", "SPEC",
        config=True, parse=_CHECK + "parse_gpus", backends=(*CONTAINER, "slurm"),
    ),
    Option(
        "env", "--env", "environment for the job (repeatable); values are never stored or shown", "KEY=VALUE", "append",
        parse=_CHECK + "parse_env",
    ),
    Option(
        "interpreter", "--interpreter", "the command that runs the script (default python3)", "CMD",
        config=True, default="python3", parse=_CHECK + "parse_interpreter",
    ),
    Option(
        "stop_container_when_done", "--stop-container-when-done", "stop the container when the job ends, releasing its GPUs",
        kind="switch", config=True, default=False, backends=CONTAINER,
    ),
    Option(
        "docker_host", "--docker-host", "the Docker engine: ssh://USER@HOST, tcp://HOST:2376 (TLS), unix:///PATH, "
        "a name from TrainerMagics.docker_hosts, or a Docker context (default: DOCKER_HOST, the current context)",
        "URL|NAME", config=True, backends=CONTAINER,
    ),
    Option(
        "sync", "--sync", "copy a local directory to the job's workdir on a remote Docker host before the job starts "
        "(a home directory is refused; the job store, credential files and what DIR/.trainerignore lists are left out)", "DIR",
        parse=_CHECK + "parse_sync", backends=CONTAINER,
    ),
    Option(
        "restarts", "--restarts", "when the job is interrupted without ending by itself (the Docker engine, the machine "
        "or its container restarted), start it again in its container, up to N times, with no kernel needed; it resumes "
        "from its own checkpoint",
        "N", "int", parse="jupyter_trainer.backends.docker.restarts:parse_restarts", backends=CONTAINER,
        elsewhere="works with the container backends only (--image or --container, on this machine's Docker engine or a --docker-host's)",
    ),
    Option("host", "--host", "no container: run the job as a detached process on this machine", kind="switch", config=True, default=False),
    NOTIFY,
    *SLURM_OPTIONS,
)  # fmt: skip


@dataclass(frozen=True)
class DetachedBackend:
    """How `%%train_detached` comes to run a job on a backend, and what that backend needs."""

    name: str
    switch: str | None = None  # the switch option that chooses it; None: the backend chosen when no switch is on
    lacks: str = ""  # what it runs without, said when it is given another backend's option
    needs_one_of: tuple[str, ...] = ()  # options of which at least one must have a value
    missing: tuple[str, str] = ("", "")  # the error and the hint when none of them has
    # "module:function" that turns its parsed option values (and the named Docker hosts) into the
    # spec's fields, where its options mean something together; None: the workdir is this machine's
    settle_spec: str | None = None
    # "module:function" giving the name of the other machine a spec's job runs on (None: this
    # one), where a script not found here is looked for; None: its jobs run on this machine
    job_machine: str | None = None
    instead: str = ""  # what it offers in place of another backend's option, said when refusing that option

    def machine_of(self, spec) -> str | None:
        return declared_function(self.job_machine)(spec) if self.job_machine else None

    def spec_fields(self, parsed: dict[str, Any], hosts: Mapping[str, str] | None) -> dict[str, Any]:
        if self.settle_spec is None:
            from .checks import parse_workdir

            return {**parsed, "workdir": parse_workdir(parsed.get("workdir"))}
        return declared_function(self.settle_spec)(parsed, hosts)


DETACHED_BACKENDS = (
    DetachedBackend("host", switch="host", lacks="runs without a container"),
    # its options' checks are in its package (`parse=` above); its workdir is this machine's, which
    # the nodes must see at the same path
    DetachedBackend("slurm", switch="slurm", lacks="runs on the cluster's nodes, without a container", instead="--requeue, which lets Slurm start it again"),
    DetachedBackend(
        "docker",
        needs_one_of=("image", "container"),
        missing=("no image or container given", "pass --image IMAGE (or set %config TrainerMagics.image), --container NAME, or --host"),
        settle_spec="jupyter_trainer.backends.docker.spec:settle_docker_spec",
        job_machine="jupyter_trainer.backends.docker.spec:remote_machine",
    ),
)

# -- %%sagemaker_fit ------------------------------------------------------------------------------

SAGEMAKER = (
    Option("image_uri", "--image-uri", "the training image (it needs python3, nothing else)", "URI", config=True),
    Option("role", "--role", "the execution role (default: config, else the notebook instance's role)", "ARN", config=True),
    Option("instance_type", "--instance-type", "e.g. ml.g5.xlarge; 'local' runs SageMaker local mode here", "TYPE", config=True, default="ml.m5.xlarge"),
    Option("instance_count", "--instance-count", "how many instances (default 1)", "N", "int", default=1),
    Option("inputs", "--input", "an input channel (repeatable; s3:// or file://)", "CHANNEL=URI", "append"),
    Option("output_path", "--output-path", "where the model artifact goes", "URI", config=True),
    Option("hyperparameters", "--hyperparameter", "a hyperparameter (repeatable)", "KEY=VALUE", "append"),
    Option("max_run", "--max-run", "the longest the job may train", "SECONDS", "int"),
    Option("spot", "--spot", "managed spot training", kind="switch"),
    Option("max_wait", "--max-wait", "with --spot: the longest to wait and train", "SECONDS", "int"),
    Option("checkpoint_s3_uri", "--checkpoint-s3-uri", "where checkpoints are synced", "URI"),
    Option("source_dir", "--source-dir", "more files shipped beside the script (its imports; its requirements.txt is installed first)", "DIR"),
    Option(
        "interpreter", "--interpreter", "the command that runs the script on every host (default python3)", "CMD",
        config=True, default="python3", parse=_CHECK + "parse_interpreter",
    ),
    Option(
        "env", "--env", "the job's environment (repeatable); values are never stored or shown", "KEY=VALUE", "append",
        config=True, parse=_CHECK + "parse_env",
    ),
    Option("framework", "--framework", "instead of --image-uri: AWS's training image of pytorch, tensorflow, huggingface, sklearn or xgboost", "NAME", config=True),
    Option("framework_version", "--framework-version", "with --framework: its version (for huggingface, the transformers version)", "V", config=True),
    Option("py_version", "--py-version", "with --framework: the Python of the image, e.g. py310", "PY", config=True),
    Option("volume_size", "--volume-size", "the storage volume of each instance (default 30)", "GB", "int", config=True),
    Option("tags", "--tag", "a tag of the training job (repeatable)", "KEY=VALUE", "append", config=True),
    Option("subnets", "--subnet", "a VPC subnet to train in (repeatable; with --security-group-id)", "ID", "append", config=True),
    Option("security_group_ids", "--security-group-id", "a VPC security group (repeatable; with --subnet)", "ID", "append", config=True),
    Option("keep_alive_period", "--keep-alive-period", "keep the instances warm this long after the job (warm pools)", "SECONDS", "int", config=True),
    NOTIFY,
)  # fmt: skip


def add_options(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    for option in options:
        option.add_to(parser)


def configurable(options: Iterable[Option]) -> list[Option]:
    return [option for option in options if option.config]


def settle(options: Iterable[Option], given: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The value of each option, by its name: the flag's when given (None or [] when not), else the
    configured default, else the option's own; a switch is True or False, a repeatable option a list.
    A flag always wins over config, even an empty one."""
    values = {}
    for option in options:
        value = given.get(option.dest)
        if value is None or value == []:
            value = config.get(option.dest, option.default) if option.config else option.default
        if option.kind == "switch":
            value = bool(value)
        elif option.kind == "append":
            value = list(value or ())
        values[option.dest] = value
    return values
