"""Every option of the cell magics and of `jupyter-trainer submit`, declared once.

An `Option` says its flag, its help and whether %config can give it a default
(`%config TrainerMagics.image = "..."`). From these declarations come the
argparse parsers of the magics and of the CLI, the magics' configurable traits,
and the values handed to a spec builder, with the one rule every surface shares:
a flag always wins over config, even an empty one.

A detached backend declares itself in its own package (`DetachedBackend`, in
its `declared` module): the switch that chooses it, the options it takes, what it
cannot do without, and the typed values of its own options (a `BackendOptions`
dataclass). The registry (`backends.Backends`) collects those declarations into
`DetachedOptions`, which the surfaces parse with and the spec builder loops over:
a new backend adds its own module and changes no rule here. Here are the options
every cell magic shares and those several backends take.

Pure logic: no IPython, no runtime library.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Mapping

# The checks are named, not imported: the magics declare their options at %load_ext, and a value is
# checked only when a job is asked for. A backend names its own checks in its own package.
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
    elsewhere: str = ""  # what to say when it is given to a backend that does not take it (default: its switch)

    def check(self, value: Any) -> Any:
        """The value as its `parse` leaves it (as it is, with none)."""
        if self.parse is None:
            return value
        return (declared_function(self.parse) if isinstance(self.parse, str) else self.parse)(value)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.kind == "switch":
            # None when not given, so that a configured default can apply
            parser.add_argument(
                self.flag, dest=self.dest, action="store_const", const=True, default=None, help=self.help
            )
        elif self.kind == "append":
            parser.add_argument(
                self.flag, dest=self.dest, action="append", default=[], metavar=self.metavar, help=self.help
            )
        else:
            kind = int if self.kind == "int" else str
            parser.add_argument(
                self.flag, dest=self.dest, type=kind, default=None, metavar=self.metavar, help=self.help
            )


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
SCRIPT = argument(
    "script", help="an existing training script, run in place (relative to --workdir, else the current directory)"
)
ENTRY_SCRIPT = argument(
    "script",
    nargs="?",
    default=None,
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
    Option(
        "name", "--name", "the job's name (default: the notebook's or script's name and a hash of the cell)", "NAME"
    ),
    Option(
        "metrics", "--metric", "a metric to parse from the log (repeatable; one capture group)", "NAME=REGEX", "append"
    ),
    Option("no_widget", "--no-widget", "print a one-line summary instead of displaying the widget", kind="switch"),
    Option("rerun", "--rerun", "train again under the name of a finished job", kind="switch"),
    Option(
        "sweep",
        "--sweep",
        "run once per combination of values (repeatable; the runs are jobs NAME-1 ... NAME-N, the "
        "last KEY varying fastest); each run gets --KEY VALUE after the script's arguments, or its value where "
        "they hold {KEY}; with --trials N, a KEY may be a range: loguniform(1e-5,1e-2), uniform(A,B), randint(A,B), "
        "choice(A,B)",
        "KEY=V1,V2",
        "append",
    ),
    Option("trials", "--trials", "with --sweep: N runs, each drawing its values (from ranges, or lists)", "N", "int"),
    Option(
        "max_running",
        "--max-running",
        "with --sweep: at most K of its runs at once, the others waiting their turn",
        "K",
        "int",
    ),
)

# Both cell magics take it: a detached job's supervisor, wherever it runs, sends the message.
NOTIFY = Option(
    "notify",
    "--notify",
    "when the job ends, POST a JSON message to URL (Slack-style 'text' and the job's facts), "
    "also with no notebook open; the URL is never stored or shown",
    "URL",
    config=True,
    parse=_CHECK + "parse_notify",
)

# -- %%train_detached and `jupyter-trainer submit`: the options several backends take ----------
# Each backend declares the options it takes (its own, and those of these it takes) in its own
# package (`DetachedBackend.options`); `DetachedOptions` collects them from the registry.

WORKDIR = Option(
    "workdir",
    "--workdir",
    "host directory mounted at /workspace; the job's working directory "
    "(on a remote Docker host: a directory there; default a volume there)",
    "DIR",
    config=True,
)  # parsed by its backend's settle, else as a directory of this machine (see DetachedBackend.spec_fields)
GPUS = Option(
    "gpus",
    "--gpus",
    "N: N GPUs of the job's own, waited for until no other job holds them; 'all'; or device ids "
    "(0,1), as docker run --gpus; with --slurm: GPUs per node",
    "SPEC",
    config=True,
    parse=_CHECK + "parse_gpus",
)
QUEUE = Option(
    "queue",
    "--queue",
    "wait in the named line of the job's machine: at most its --max-running jobs run at once "
    "(set with jupyter-trainer queue NAME --max-running K; default 1)",
    "NAME",
    config=True,
    parse=_CHECK + "parse_queue",
    elsewhere="puts a job in a line of its machine, for the container backends and --host (Slurm and SageMaker "
    "queue jobs themselves)",
)
ENV = Option(
    "env",
    "--env",
    "environment for the job (repeatable); values are never stored or shown",
    "KEY=VALUE",
    "append",
    parse=_CHECK + "parse_env",
)
INTERPRETER = Option(
    "interpreter",
    "--interpreter",
    "the command that runs the script (default python3)",
    "CMD",
    config=True,
    default="python3",
    parse=_CHECK + "parse_interpreter",
)


@dataclass(frozen=True)
class BackendOptions:
    """The values of a backend's own options (those no `DetachedSpec` field holds), typed: each
    backend declares a frozen dataclass of its own (`DetachedBackend.typed`), which the spec builder
    makes from its options' values as its declaration settled them. This one has none (--host)."""

    def stored(self) -> dict[str, Any]:
        """What the job's record keeps of them, and its fingerprint covers: the given ones (by option
        name) under "backend_options"; none given, nothing, so that cells without any keep their
        fingerprints."""
        given = {
            field.name: getattr(self, field.name) for field in fields(self) if not not_given(getattr(self, field.name))
        }
        return {"backend_options": given} if given else {}

    def job_machine(self) -> str | None:
        """The name of the other machine the job runs on, where a script not found here is looked
        for (a remote Docker host); None: this one."""
        return None

    def sent_directory(self) -> str | None:
        """A directory of this machine copied to where the job runs before it starts (--sync)."""
        return None


def not_given(value: Any) -> bool:
    """An option's value when neither a flag nor config gave one (0 is a value: `is`, not ==)."""
    return value is None or value is False or (isinstance(value, (list, tuple)) and not value)


@dataclass(frozen=True)
class DetachedBackend:
    """How `%%train_detached` comes to run a job on a backend, and what that backend needs: declared
    by the backend, in its own package (its `declared` module)."""

    name: str
    # every option it takes, its switch and the shared ones above included, in the order its help shows them
    options: tuple[Option, ...] = ()
    switch: str | None = None  # the switch option that chooses it; None: the backend chosen when no switch is on
    lacks: str = ""  # what it runs without, said when it is given another backend's option
    needs_one_of: tuple[str, ...] = ()  # options of which at least one must have a value
    missing: tuple[str, str] = ("", "")  # the error and the hint when none of them has
    # a function, or "module:function" of its own package, that turns its parsed option values (and
    # the named Docker hosts) into the spec's fields, where its options mean something together;
    # None: the workdir is this machine's
    settle: Callable[[dict[str, Any], Mapping[str, str] | None], dict[str, Any]] | str | None = None
    typed: type[BackendOptions] = BackendOptions  # its own options' values, as the spec holds them
    instead: str = ""  # what it offers in place of another backend's option, said when refusing that option

    def takes(self, dest: str) -> bool:
        return any(option.dest == dest for option in self.options)

    def spec_fields(self, parsed: dict[str, Any], hosts: Mapping[str, str] | None) -> dict[str, Any]:
        if self.settle is None:
            from .checks import parse_workdir

            return {**parsed, "workdir": parse_workdir(parsed.get("workdir"))}
        return (declared_function(self.settle) if isinstance(self.settle, str) else self.settle)(parsed, hosts)


class DetachedOptions:
    """The detached backends a registry knows and their options, collected: what `%%train_detached`
    and `jupyter-trainer submit` parse, and what the spec builder chooses a backend by.

    The options come in the order each backend lists its own; where those orders leave a choice,
    an earlier backend's first (the registry's order: the backend chosen without a switch first)."""

    def __init__(self, backends: Iterable[DetachedBackend]):
        self.backends = tuple(backends)
        defaults = [backend for backend in self.backends if backend.switch is None]
        if len(defaults) != 1:
            raise ValueError(f"one detached backend must need no switch, not {[backend.name for backend in defaults]}")
        self.default = defaults[0]
        self.options = _merged([backend.options for backend in self.backends])
        self.switches = {backend.switch for backend in self.backends if backend.switch}
        for backend in self.backends:
            if backend.switch and not backend.takes(backend.switch):
                raise ValueError(f"the {backend.name} backend does not declare its switch {backend.switch!r}")

    def taken_by(self, option: Option, backend: DetachedBackend) -> bool:
        """Whether `backend` takes `option` (every backend takes the switches: choosing is theirs)."""
        return option.dest in self.switches or backend.takes(option.dest)

    def taken_by_every_one(self, option: Option) -> bool:
        return all(self.taken_by(option, backend) for backend in self.backends)

    def named(self, name: str) -> DetachedBackend | None:
        return next((backend for backend in self.backends if backend.name == name), None)


def _merged(lists: list[tuple[Option, ...]]) -> tuple[Option, ...]:
    """The options of every list once, each list's order kept; where they leave a choice, the one an
    earlier list names first. One dest declared as two different options is a programming error."""
    by_dest: dict[str, Option] = {}
    rank: dict[str, tuple[int, int]] = {}
    before: dict[str, set[str]] = {}
    for index, listed in enumerate(lists):
        for position, option in enumerate(listed):
            if by_dest.setdefault(option.dest, option) != option:
                raise ValueError(f"two declarations of the option {option.dest!r}")
            rank.setdefault(option.dest, (index, position))
            before.setdefault(option.dest, set()).update(earlier.dest for earlier in listed[:position])
    merged: list[str] = []
    while len(merged) < len(by_dest):
        ready = [dest for dest in by_dest if dest not in merged and before[dest] <= set(merged)]
        if not ready:
            raise ValueError(
                "the backends list their options in orders that contradict each other: "
                f"{sorted(set(by_dest) - set(merged))}"
            )
        merged.append(min(ready, key=rank.__getitem__))
    return tuple(by_dest[dest] for dest in merged)


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
