"""`jupyter-trainer`: list, inspect, follow and stop jobs from a terminal, on the same store as the magics."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Iterator

from .. import surface
from ..backends import DEFAULT, Backends
from ..core.record import JobRecord
from ..core.store import JobStore
from ..errors import TrainerError
from ..jobs.job import Job, refreshed_records
from ..spec.options import (
    ALL_RUNS,
    AS_JSON,
    COMPARED_METRIC,
    FOLLOW,
    JOB,
    JOB_NAME,
    JOB_NAMES,
    LINES,
    ONE_RUN,
    SCRIPT,
    WITH_CONTAINER,
    X_AXIS,
    add_options,
    argument,
    configurable,
    split_script_arguments,
)  # fmt: skip

# The modules of a few commands alone (summary, housekeeping, submit) are imported by those
# commands: `metrics` and `logs` start sooner.


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 1, as every user error
        raise TrainerError(message, f"see {self.prog} --help")


def build_parser(backends: Backends = DEFAULT) -> argparse.ArgumentParser:
    """The command's parser; `submit` takes the options the registry's backends declare."""
    parser = _Parser(prog="jupyter-trainer", description="Follow and control jupyter_trainer jobs.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help: str, *arguments):
        parser = commands.add_parser(name, help=help)
        for declared in arguments:
            declared.add_to(parser)
        return parser

    command(
        "list",
        "a table of jobs",
        argument("--json", action="store_true", help="one JSON array of job objects"),
        ALL_RUNS,
    )
    command("status", "one job's status", JOB_NAME, AS_JSON)
    command("logs", "a job's log", JOB_NAME, LINES, FOLLOW)
    command("metrics", "every metric value in a job's log", JOB_NAME,
            argument("--json", action="store_true",
                     help='one JSON object: {"loss": [[x, value], ...], ...}'))  # fmt: skip
    command("rm", "remove a finished job's runs (a running job is refused)", JOB_NAME, ONE_RUN)
    command("compare", "jobs side by side on one metric: status, last and best value, points",
            JOB_NAMES, COMPARED_METRIC, X_AXIS,
            argument("--json", action="store_true",
                     help="one JSON array: {name, status, metric, last, best, points} per job"))  # fmt: skip

    prune = commands.add_parser("prune", help="remove finished runs older than an age")
    prune.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 7d, 12h, 30m")
    prune.add_argument(
        "--containers", action="store_true", help="also the stopped containers jobs ran in that no remaining job uses"
    )

    command("stop", "stop a job (its whole process group)", JOB_NAME, WITH_CONTAINER)

    queue = commands.add_parser("queue", help="this machine's GPUs and lines: who holds what, who waits, in order")
    queue.add_argument("name", nargs="?", metavar="NAME", help="one named queue (--queue NAME)")
    queue.add_argument(
        "--max-running", type=int, metavar="K", help="how many of queue NAME's jobs may run at once (default 1)"
    )
    queue.add_argument(
        "--json", action="store_true", help="one JSON object: gpus, and each line with its running and waiting jobs"
    )

    submit = commands.add_parser(
        "submit",
        help="run a script as a detached job (the options of %%%%train_detached)",
        description="Run SCRIPT in place as a detached job, as %train_detached SCRIPT does: the options of "
        "%%train_detached, and the same defaults from c.TrainerMagics in the IPython profile's ipython_config.py. "
        "Words after -- are the script's arguments.",
    )
    SCRIPT.add_to(submit)
    add_options(submit, [option for option in JOB if option.dest != "no_widget"] + list(backends.detached.options))
    return parser


def _status_json(record: JobRecord, backends: Backends, usage=None) -> dict:
    """`status --json`'s object (with what the job's backend adds of its own)."""
    from ..view import summary

    return summary.status_json(record, backends, usage)


def run(argv: list[str] | None = None, store: JobStore | None = None, backends: Backends | None = None) -> int:
    """One command; `store` and `backends` default to the user's store and the real backends."""
    # the script's arguments, as after `--` on a magic's line
    argv, script_args = split_script_arguments(sys.argv[1:] if argv is None else argv)
    backends = backends or DEFAULT
    args = build_parser(backends).parse_args(argv)
    store = store or JobStore()
    if args.command == "submit":
        return submit(args, script_args, store, backends)
    if args.command in ("status", "stop", "rm", "logs", "metrics") and _sweep_command(args, store, backends):
        return 0
    if args.command in ("list", "status", "stop"):
        from ..view import summary
    if args.command in ("prune", "rm"):
        from ..jobs import housekeeping
    if args.command == "list":
        from ..jobs.sweeps import with_sweeps

        items = with_sweeps(refreshed_records(store, all_runs=args.all, backends=backends), store, args.all)
        if args.json:
            rows = [_status_json(item, backends) for item in items if isinstance(item, JobRecord)]
            print(json.dumps(rows, indent=1))
            for item in items:
                if isinstance(item, TrainerError):
                    print(f"jupyter-trainer: {item}", file=sys.stderr)
        else:
            print(summary.jobs_table(items, backends, summary.main_metrics(items, store, backends)))
        return 0
    if args.command == "prune":
        age = housekeeping.parse_age(args.older_than)
        try:
            print(housekeeping.describe_removed(housekeeping.prune(age, store, backends)))
        finally:  # a run that could not be removed is said (below), and the containers still go
            if args.containers:
                names = housekeeping.prune_containers(store, backends)
                print(f"removed containers {', '.join(names)}" if names else "no container to remove")
        return 0
    if args.command == "rm":
        print(housekeeping.describe_removed(housekeeping.remove_runs(args.name, args.run, store, backends)))
        return 0
    if args.command == "compare":
        print_comparison(args, store, backends)
        return 0

    if args.command == "queue":
        print_lines(args)
        return 0
    job = Job.load(args.name, store, backends)
    if args.command == "status":
        record = job.refresh().record
        if args.json:
            print(json.dumps(_status_json(record, backends, job.usage()), indent=1))
        else:
            print(summary.status_block(record, backends, job.usage()))
    elif args.command == "logs":
        if args.lines is not None and args.lines < 0:
            raise TrainerError("-n expects a number of lines, 0 or more")
        if args.follow:
            for line in job.follow(tail=args.lines):
                print(line, flush=True)
        else:
            for line in job.log_lines(tail=args.lines):
                sys.stdout.write(line + "\n")
    elif args.command == "metrics":
        print_metrics(job, args.json)
    elif args.command == "stop":
        print(summary.stop_line(job.stop(container=args.container).record, backends))
    return 0


def _sweep_command(args, store: JobStore, backends: Backends) -> bool:
    """`status`, `stop` and `rm` given a sweep's name act on the whole sweep; False: NAME names no sweep."""
    from ..jobs import sweeps

    sweep = sweeps.load_sweep(store, args.name) if store.latest_run(args.name) is None else None
    if sweep is None:
        return False
    if args.command == "status":
        from ..view.sweep_text import sweep_json, sweep_text

        print(
            json.dumps(sweep_json(args.name, store, backends), indent=1)
            if args.json
            else sweep_text(args.name, store, backends)
        )
    elif args.command == "stop":
        from ..view import summary

        for job in sweeps.stop_sweep(store, sweep, backends, container=args.container):
            print(summary.stop_line(job.record, backends))
    elif args.command == "rm":
        if args.run is not None:
            raise TrainerError(
                f"{args.name} is a sweep: --run names a run of a job",
                f"remove one of its runs: jupyter-trainer rm {sweep.runs[0]}",
            )
        print("\n".join(sweeps.remove_sweep(store, sweep, backends)))
    else:
        raise TrainerError(
            f"{args.name} is a sweep of {len(sweep.runs)} runs",
            f"give one of them: jupyter-trainer {args.command} {sweep.runs[0]}",
        )
    return True


def print_lines(args) -> None:
    """`queue`: what this machine's lines hold; with NAME --max-running K, set that queue's bound first."""
    from ..core import lines
    from ..spec.checks import parse_queue
    from ..view.lines_view import lines_text, machine_lines

    name = parse_queue(args.name)
    root = lines.lines_root()
    if args.max_running is not None:
        if name is None:
            raise TrainerError(
                "--max-running needs the queue's NAME", "for example: jupyter-trainer queue nightly --max-running 2"
            )
        try:
            line = lines.line_dir(root, name)
            lines.ensure_line(root, line)
            lines.set_max_running(line, args.max_running)
        except (lines.LineError, OSError) as problem:
            raise TrainerError(f"cannot set queue {name}'s --max-running: {problem}") from None
    found = machine_lines(root, only=name)
    print(json.dumps(found, indent=1) if args.json else lines_text(found))


def table_text_of(rows: list[list[str]], titles: list[str]) -> str:
    """Columns of words, as the other tables are laid out."""
    from ..core.wording import readable

    table = [titles] + [[readable(str(cell)) for cell in row] for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(len(titles))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table)


def print_metrics(job: Job, as_json: bool) -> None:
    """As JSON, `job.metrics()` itself (a value that is not a number is null); as text, a
    tab-separated table that pandas or awk read."""
    if as_json:
        out = sys.stdout
        for piece in metrics_json(job.metric_columns()):
            out.write(piece)
        out.write("\n")
        return
    sys.stdout.write("metric\taxis\tx\tvalue\n")
    for name, points in job.metric_points().items():
        for axis, x, value in points:
            sys.stdout.write(f"{name}\t{axis}\t{x:g}\t{value!r}\n")


JSON_BLOCK = 1 << 16  # points formatted at once


def metrics_json(columns: dict) -> Iterator[str]:
    """`json.dumps({name: [[x, value or None where it is no number], ...], ...})` in pieces, the
    same text, a block of points at a time by one %-format instead of a list per point: a log of a
    million values is written in a fraction of the time."""
    yield "{"
    for index, (name, column) in enumerate(columns.items()):
        yield (", " if index else "") + json.dumps(name) + ": ["
        xs, values, texts = column.xs, column.values, _Texts()
        for start in range(0, len(xs), JSON_BLOCK):
            yield (", " if start else "") + _points_json(
                xs[start : start + JSON_BLOCK], values[start : start + JSON_BLOCK], texts
            )
        yield "]"
    yield "}"


def _points_json(xs: list, values: list, texts: _Texts) -> str:
    """`[x, value]` pairs as json.dumps writes them, comma-separated: %r is json's own text of a
    finite float, and %d then ".0" that of a whole one below 1e16 (but -0.0). `texts`: the values'
    texts written so far (of the same series)."""
    whole = _whole(xs)
    if not (_all_floats(values) and (whole or _all_floats(xs))):  # never from the reader
        return ", ".join(json.dumps([x, value if math.isfinite(value) else None]) for x, value in zip(xs, values))
    if whole:
        x_text = "%d.0"
    elif _finite(xs):
        x_text = "%r"
    else:  # json's NaN and Infinity
        x_text, xs = "%s", list(map(json.dumps, xs))
    if not _finite(values):
        value_text, values = "%s", [repr(value) if math.isfinite(value) else "null" for value in values]
    elif _repeat(values) and 0.0 not in values:  # (-0.0 and 0.0 are one key, not one text)
        value_text, values = "%s", list(map(texts.__getitem__, values))
    else:
        value_text = "%r"
    flat = [None] * (2 * len(xs))
    flat[::2], flat[1::2] = xs, values
    return ", ".join([f"[{x_text}, {value_text}]"] * len(xs)) % tuple(flat)


class _Texts(dict):
    """Each float's text, written once: a loss printed with four digits takes a few thousand."""

    def __missing__(self, value: float) -> str:
        text = self[value] = repr(value)
        return text


def _repeat(values: list) -> bool:
    """Whether the values repeat enough for _Texts to pay, from the first ones."""
    sample = values[:1024]
    return 2 * len(set(sample)) <= len(sample)


def _finite(numbers: list) -> bool:
    # a sum is finite only if each number is (one that overflows is looked at number by number)
    return math.isfinite(sum(numbers)) or all(map(math.isfinite, numbers))


def _all_floats(numbers: list) -> bool:
    return set(map(type, numbers)) <= {float}


def _whole(xs: list) -> bool:
    """Floats of whole numbers whose text is their digits and ".0" (from 1e16 on it is 1e+16)."""
    try:
        if not all(map(float.is_integer, xs)):
            return False
    except TypeError:  # not a float
        return False
    return (
        -1e16 < min(xs) and max(xs) < 1e16 and not (0.0 in xs and any(math.copysign(1.0, x) < 0 for x in xs if x == 0))
    )


def print_comparison(args, store: JobStore, backends: Backends) -> None:
    """The jobs' table of one metric (as %train_compare prints it); as JSON, one object per job."""
    from ..jobs.sweeps import runs_named
    from ..metrics.comparison import table_text
    from ..view.compare_runs import compare, load_runs, what_differs

    # the table shows each run's last and best value and its count: no curve is kept to show them
    runs = [
        run.read_all() for run in load_runs(runs_named(args.names, store), args.metric, store, backends, curves=False)
    ]
    comparison = compare(runs, args.metric, args.x == "time")
    differs = what_differs([run.record for run in runs])
    if not args.json:
        print(table_text(comparison.rows, comparison.note))
        if differs and differs[0]:  # what tells the runs apart: their values, arguments, commit, image
            print(
                "\nwhat differs:\n"
                + table_text_of(
                    [[run.label, *each.values()] for run, each in zip(runs, differs)], ["name", *differs[0]]
                )
            )
        return
    objects = [
        dict(row.as_json(), **({"differs": each} if each else {})) for row, each in zip(comparison.rows, differs)
    ]
    print(json.dumps(objects, indent=1))
    for row in comparison.rows:
        if row.note:  # a job with no value of the metric: said beside the JSON, not in it
            print(f"jupyter-trainer: {row.note}", file=sys.stderr)


def submit(args, script_args: list[str], store: JobStore, backends: Backends) -> int:
    from ..jobs.submit import submit_detached
    from ..spec.in_place import detached_in_place
    from ..view import summary

    declared = backends.detached
    defaults = configured_defaults(declared.options)
    hosts = defaults.pop("docker_hosts", {})
    spec = detached_in_place(declared, args.script, vars(args), defaults, script_args, hosts)
    if args.sweep or args.trials is not None or args.max_running is not None:
        from ..jobs.sweeps import submit_sweep
        from ..view.sweep_text import sweep_text

        sweep = submit_sweep(
            spec, args.sweep, name=args.name, trials=args.trials, max_running=args.max_running, rerun=bool(args.rerun),
            store=store, backends=backends, label=Path(args.script).stem,
        )  # fmt: skip
        if spec.notify:
            from .sweep_notify import start

            start(store, sweep.sweep.name, spec.notify)
        print(sweep.message)
        print(sweep_text(sweep.sweep.name, store, backends))
        return 0
    submission = submit_detached(
        spec, name=args.name, rerun=bool(args.rerun), store=store, backends=backends, label=Path(args.script).stem
    )
    if submission.attached or submission.facts:  # facts: what the launch left out, say
        print(submission.message)
    print(summary.one_line(submission.job.record, backends))
    name = submission.job.name
    print(surface.follow_and_stop(name))
    return 0


def configured_defaults(options=None) -> dict:
    """The defaults the magics would take from %config for `options` (by default the real backends'
    detached options), as set in the default IPython profile (`c.TrainerMagics.image = ...` in
    ipython_config.py); none if there is no such file."""
    from IPython.paths import get_ipython_dir
    from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

    profile = Path(get_ipython_dir()) / "profile_default"
    try:
        config = PyFileConfigLoader("ipython_config.py", path=str(profile)).load_config()
    except ConfigFileNotFound:
        return {}
    except Exception as exc:  # the user's own file: say where, in one line
        raise TrainerError(f"cannot read {profile / 'ipython_config.py'} ({exc.__class__.__name__}: {exc})") from None
    section = config.get("TrainerMagics", {})
    options = DEFAULT.detached.options if options is None else options
    defaults = {option.dest: section[option.dest] for option in configurable(options) if option.dest in section}
    if isinstance(section.get("docker_hosts"), dict):  # names for --docker-host
        defaults["docker_hosts"] = dict(section["docker_hosts"])
    return defaults


def main(argv: list[str] | None = None) -> int:
    try:
        with surface.speaking(surface.TERMINAL):
            return run(argv)
    except TrainerError as error:
        print(f"jupyter-trainer: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `jupyter-trainer logs NAME | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
