"""The IPython magics: parse the line, build a spec, hand it to the job layer, show the job."""

from __future__ import annotations

import functools
import os
import shlex
import time
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser
from traitlets import Bool, Dict, Int, List, Unicode

from ..backends import DEFAULT
from ..errors import InvalidOption, TrainerError
from ..spec.options import (
    ALL_RUNS,
    COMPARED_METRIC,
    ENTRY_SCRIPT,
    FOLLOW,
    JOB,
    JOB_NAME,
    JOB_NAMES,
    LINES,
    NO_WIDGET_TABLE,
    ONE_RUN,
    SCRIPT,
    WITH_CONTAINER,
    X_AXIS,
    Argument,
    add_options,
    configurable,
    split_script_arguments,
)  # fmt: skip
from .magic_help import describe

if TYPE_CHECKING:
    from ..backends import Backends
    from ..core.store import JobStore
    from ..jobs.job import Job

# Registering the magics needs only their option declarations (the backends declare theirs in small
# modules of their own, which the registry collects): the job model, the backends themselves, the
# views and the SDKs are imported when a magic first runs, so %load_ext stays light.


def user_errors(method):
    """Show a TrainerError as one line (IPython prints a UsageError without a traceback)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except TrainerError as error:
            raise UsageError(str(error)) from None

    return wrapper


def split_words(line: str) -> list[str]:
    """A magic's line split the way a shell would (quotes removed)."""
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"cannot split the options into words ({exc}): check the quotes") from None


def options_and_arguments(line: str) -> tuple[list[str], list[str]]:
    """A cell magic's options, and the script's arguments: the words after `--`."""
    return split_script_arguments(split_words(line))


def parse_line(magic, line: str):
    """Parse a line magic's line with its argparse parser."""
    return magic.parser.parse_args(split_words(line))


def line_arguments(*arguments: Argument):
    """A line magic's parser (`func.parser`), from the arguments it shares with the CLI."""

    def decorate(func):
        func.parser = MagicArgumentParser(prog=f"%{func.__name__}", add_help=False)
        for declared in arguments:
            declared.add_to(func.parser)
        return func

    return decorate


def cell_parser(*groups) -> MagicArgumentParser:
    """A cell magic's parser, from the option declarations (its errors are one-line UsageErrors)."""
    parser = MagicArgumentParser(add_help=False)
    for group in groups:
        add_options(parser, group)
    return parser


@functools.lru_cache(maxsize=8)
def detached_parser(options: tuple, line_form: bool) -> MagicArgumentParser:
    """`%%train_detached`'s parser for the options a registry's backends declare (`line_form`:
    %train_detached SCRIPT, SCRIPT first)."""
    parser = cell_parser(JOB, options)
    if line_form:
        SCRIPT.add_to(parser)
    return parser


SAGEMAKER = DEFAULT.magic_options("sagemaker")
DETACHED_PARSER = cell_parser(JOB, DEFAULT.detached.options)  # the real backends' (its help is the magic's)
SAGEMAKER_PARSER = cell_parser(JOB, SAGEMAKER)
SAGEMAKER_LINE_PARSER = cell_parser(JOB, SAGEMAKER)  # the line form: an entry script, or none
ENTRY_SCRIPT.add_to(SAGEMAKER_LINE_PARSER)


def documented(magic: str, parser=None):
    """The magic's help (`%%train_detached?`): its description, options and examples. A line
    magic's parser is the one `magic_arguments` built."""

    def decorate(func):
        prefix = "%%" if parser is not None else "%"
        func.__doc__ = describe(parser if parser is not None else func.parser, magic, prefix + magic)
        return func

    return decorate


def config_traits(options) -> dict:
    """One configurable trait per option that %config can give a default."""
    traits = {}
    for option in configurable(options):
        help = f"default {option.flag} (a flag always wins)"
        if option.kind == "switch":
            traits[option.dest] = Bool(bool(option.default), help=help).tag(config=True)
        elif option.kind == "int":
            traits[option.dest] = Int(option.default, allow_none=True, help=help).tag(config=True)
        elif option.kind == "append":
            traits[option.dest] = List(Unicode(), help=f"default {option.flag} values (a flag always wins)").tag(
                config=True
            )
        else:
            traits[option.dest] = Unicode(option.default, allow_none=True, help=help).tag(config=True)
    return traits


REMOTE_NOTIFY_NOTE = (
    "--notify: a remote SageMaker job runs no process of ours, so nothing will be sent when it ends; "
    "an EventBridge rule on its state change can post to the URL (see docs/notify.md), or run it in local mode."
)


@magics_class
class TrainerMagics(Magics):
    """Detached training jobs from a cell. Defaults can be set with %config; flags win."""

    # image, container, ..., instance_type, output_path
    vars().update(config_traits(DEFAULT.detached.options + SAGEMAKER))
    widget = Bool(True, help="display the widget (False: print a summary, as --no-widget)").tag(config=True)
    log_lines = Int(200, help="how many log lines the job widget and the jobs table's Log show").tag(config=True)
    docker_hosts = Dict(
        value_trait=Unicode(), help='Docker hosts by name, for --docker-host NAME: {"gpu1": "ssh://me@gpu1"}'
    ).tag(config=True)
    gpu_pool = Unicode(
        "",
        help="the GPUs --gpus N hands out on the job's machine: 0,1,2,3 or 0-3 (default: $JUPYTER_TRAINER_GPUS, "
        "else what nvidia-smi lists)",
    ).tag(config=True)

    def __init__(self, shell=None, store: JobStore | None = None, backends: Backends | None = None, **kwargs):
        """`store` and `backends`: the job store and the backends' registry the magics use (by
        default the user's store and the real backends, found at first use)."""
        super().__init__(shell, **kwargs)
        self._given_store, self._given_backends = store, backends

    def _store(self) -> JobStore:
        from ..core.store import JobStore

        return self._given_store or JobStore()

    @property
    def backends(self) -> Backends:
        from ..backends import DEFAULT

        return self._given_backends or DEFAULT

    def _config(self, options) -> dict:
        """The configured defaults of `options` (an option a registry was given a declaration of has
        no trait, so no configured default)."""
        return {
            option.dest: getattr(self, option.dest) for option in configurable(options) if self.has_trait(option.dest)
        }

    # -- the cell magics ------------------------------------------------------------

    @line_cell_magic
    @documented("train_detached", DETACHED_PARSER)
    @user_errors
    def train_detached(self, line, cell=None):
        words, script_args = options_and_arguments(line)
        declared = self.backends.detached
        args = detached_parser(declared.options, cell is None).parse_args(words)
        config = self._config(declared.options)
        if cell is None:  # %train_detached SCRIPT [options] [-- ARGS]: an existing file, in place
            from ..spec.in_place import detached_in_place

            spec = detached_in_place(declared, args.script, vars(args), config, script_args, self.docker_hosts)
            self._submit(spec, args, label=os.path.splitext(os.path.basename(args.script))[0])
            return
        from ..spec.job_spec import detached_spec

        self._submit(detached_spec(declared, cell, vars(args), config, script_args, self.docker_hosts), args)

    @line_cell_magic
    @documented("sagemaker_fit", SAGEMAKER_PARSER)
    @user_errors
    def sagemaker_fit(self, line, cell=None):
        from ..backends.sagemaker.sdk import notebook_default_output, notebook_instance_role
        from ..backends.sagemaker.spec import sagemaker_spec

        words, script_args = options_and_arguments(line)
        args = (SAGEMAKER_PARSER if cell is not None else SAGEMAKER_LINE_PARSER).parse_args(words)
        if args.sweep or args.trials is not None or args.max_running is not None:
            raise InvalidOption(
                "%sagemaker_fit takes no --sweep, --trials or --max-running (SageMaker's own tuning jobs are the "
                "way there)",
                "sweep with %%train_detached",
            )
        given, config, label = vars(args), self._config(SAGEMAKER), None
        fallbacks = {
            "fallback_role": notebook_instance_role,
            "args": script_args,
            "fallback_output": notebook_default_output,
        }
        if cell is not None:
            spec = sagemaker_spec(cell, given, config, **fallbacks)
        elif args.script:  # %sagemaker_fit SCRIPT: an existing file, relative to --source-dir as the SDK's entry_point
            from ..spec.in_place import in_place, inside, read_script, script_path

            source_dir = given.get("source_dir") or config.get("source_dir")
            path = script_path(args.script, source_dir)
            if source_dir and inside(path, source_dir) is None:
                raise InvalidOption(
                    f"{path} is not inside --source-dir {source_dir}",
                    "the entry script is one of its files, as the SDK's entry_point: give its path there "
                    "(or drop --source-dir)",
                )
            spec = in_place(sagemaker_spec(read_script(path), given, config, **fallbacks), path)
            label = os.path.splitext(os.path.basename(path))[0]
        else:  # %sagemaker_fit: the image's own train
            spec = sagemaker_spec("", given, config, **fallbacks, image_train=True)
            label = spec.image_uri.rsplit("/", 1)[-1].split(":")[0].split("@")[0] if spec.image_uri else spec.framework
        if spec.notify and not spec.local:
            print(REMOTE_NOTIFY_NOTE)
        self._submit(spec, args, label=label)

    # -- line magics -------------------------------------------------------------

    @documented("train_jobs")
    @line_arguments(ALL_RUNS, NO_WIDGET_TABLE)
    @line_magic
    @user_errors
    def train_jobs(self, line):
        args = parse_line(self.train_jobs, line)
        from ..view.poller import poller, widgets_supported

        if self.widget and not args.no_widget and widgets_supported(self.shell):
            from IPython.display import display

            from ..view.jobs_table import JobsTable

            table = JobsTable(self._store(), all_runs=args.all, log_lines=self.log_lines, backends=self.backends)
            display(table)
            poller().watch(table)
            return
        from ..jobs.job import refreshed_records
        from ..jobs.sweeps import with_sweeps
        from ..view import summary

        items = with_sweeps(
            refreshed_records(self._store(), all_runs=args.all, backends=self.backends), self._store(), args.all
        )
        print(summary.jobs_table(items, self.backends, summary.main_metrics(items, self._store(), self.backends)))

    @documented("train_attach")
    @line_arguments(JOB_NAME)
    @line_magic
    @user_errors
    def train_attach(self, line):
        args = parse_line(self.train_attach, line)
        from ..jobs.job import Job

        if self._sweep(args.name) is not None:
            self._show_sweep(args.name, widget=self.widget)
            return
        self._show(Job.load(args.name, self._store(), self.backends), widget=self.widget, detailed=True)

    @documented("train_logs")
    @line_arguments(JOB_NAME, LINES, FOLLOW)
    @line_magic
    @user_errors
    def train_logs(self, line):
        args = parse_line(self.train_logs, line)
        if args.lines is not None and args.lines < 0:
            raise UsageError("-n expects a number of lines, 0 or more")
        from ..jobs.job import Job
        from ..view import summary

        job = Job.load(args.name, self._store(), self.backends)
        if args.follow:
            try:
                for text in job.follow(tail=args.lines):
                    print(text, flush=True)
            except KeyboardInterrupt:
                pass  # interrupting the kernel ends following, not the job
            print(summary.one_line(job.refresh().record, self.backends))
        else:
            for text in job.log_lines(tail=args.lines):
                print(text)

    @documented("train_rm")
    @line_arguments(JOB_NAME, ONE_RUN)
    @line_magic
    @user_errors
    def train_rm(self, line):
        from ..jobs.housekeeping import describe_removed, remove_runs

        args = parse_line(self.train_rm, line)
        sweep = self._sweep(args.name)
        if sweep is not None:
            from ..jobs.sweeps import remove_sweep

            if args.run is not None:
                raise InvalidOption(
                    f"{args.name} is a sweep: --run names a run of a job",
                    f"remove one of its runs: %train_rm {sweep.runs[0]}",
                )
            print("\n".join(remove_sweep(self._store(), sweep, self.backends)))
            return
        print(describe_removed(remove_runs(args.name, args.run, self._store(), self.backends)))

    @documented("train_stop")
    @line_arguments(JOB_NAME, WITH_CONTAINER)
    @line_magic
    @user_errors
    def train_stop(self, line):
        args = parse_line(self.train_stop, line)
        from ..jobs.job import Job
        from ..view import summary

        sweep = self._sweep(args.name)
        if sweep is not None:
            from ..jobs.sweeps import stop_sweep

            for job in stop_sweep(self._store(), sweep, self.backends, container=args.container):
                print(summary.stop_line(job.record, self.backends))
            return
        job = Job.load(args.name, self._store(), self.backends).stop(container=args.container)
        print(summary.stop_line(job.record, self.backends))

    @documented("train_compare")
    @line_arguments(JOB_NAMES, COMPARED_METRIC, X_AXIS, NO_WIDGET_TABLE)
    @line_magic
    @user_errors
    def train_compare(self, line):
        args = parse_line(self.train_compare, line)
        from ..view.compare_runs import load_runs
        from ..view.poller import poller, widgets_supported

        widget = self.widget and not args.no_widget and widgets_supported(self.shell)
        # an unknown name: one line; the view asks for the statuses itself, without waiting for a slow backend
        from ..jobs.sweeps import runs_named

        names = runs_named(args.names, self._store())  # a sweep's name stands for its runs
        runs = load_runs(names, args.metric, self._store(), self.backends, refresh=not widget, curves=widget)
        by_time = args.x == "time"
        if widget:
            from IPython.display import display

            from ..view.compare_view import CompareWidget

            view = CompareWidget(runs, args.metric, by_time)
            display(view)
            if not view.finished:
                poller().watch(view)
            return
        print(compare_text(runs, args.metric, by_time))

    def _submit(self, spec, args, label: str | None = None) -> None:
        """Submit (or attach to) the job of a cell (or a script: `label`, its name), then show it."""
        import dataclasses

        from ..core.naming import notebook_label
        from ..jobs.submit import submit_detached
        from ..spec.job_spec import DetachedSpec

        label = label or notebook_label(self.shell.user_ns if self.shell else None)
        if self.gpu_pool.strip() and isinstance(spec, DetachedSpec):
            spec = dataclasses.replace(spec, gpu_pool=self.gpu_pool)  # the pool is the notebook's, not the cell's
        if args.sweep or args.trials is not None or args.max_running is not None:
            self._submit_sweep(spec, args, label)
            return
        submission = submit_detached(
            spec, name=args.name, rerun=bool(args.rerun), store=self._store(), backends=self.backends, label=label
        )
        if submission.attached or submission.facts:  # facts: what the launch left out, say
            print(submission.message)
        self._show(submission.job, widget=not args.no_widget and self.widget, fresh=not submission.attached)

    def _submit_sweep(self, spec, args, label: str) -> None:
        """A sweep: its runs submitted (or attached to), then shown as one."""
        from ..jobs.sweeps import submit_sweep

        sweep = submit_sweep(
            spec, args.sweep, name=args.name, trials=args.trials, max_running=args.max_running, rerun=bool(args.rerun),
            store=self._store(), backends=self.backends, label=label,
        )  # fmt: skip
        if spec.notify:
            from .sweep_notify import start

            start(self._store(), sweep.sweep.name, spec.notify)
        print(sweep.message)
        self._show_sweep(sweep.sweep.name, widget=not args.no_widget and self.widget)

    def _show_sweep(self, name: str, widget: bool) -> None:
        """The sweep's view where a frontend can show it, else its text."""
        from ..jobs.sweeps import load_sweep
        from ..view.poller import poller, widgets_supported

        store = self._store()
        if widget and widgets_supported(self.shell):
            from IPython.display import display

            from ..view.compare_runs import load_runs
            from ..view.sweep_view import SweepWidget

            sweep = load_sweep(store, name)
            present = [
                run for run in sweep.runs if store.latest_run(run) is not None
            ]  # a run removed from under it is left out
            view = SweepWidget(
                sweep, load_runs(present, None, store, self.backends, refresh=False), store, self.backends
            )
            display(view)
            if not view.finished:
                poller().watch(view)
            return
        from ..view.sweep_text import sweep_text

        print(sweep_text(name, store, self.backends))

    def _sweep(self, name: str):
        """The sweep `name` names, if it names one and no job."""
        from ..jobs.sweeps import load_sweep

        store = self._store()
        return load_sweep(store, name) if store.latest_run(name) is None else None

    # -- display -----------------------------------------------------------------

    def _show(self, job: Job, widget: bool, detailed: bool = False, fresh: bool = False) -> None:
        """The widget where a frontend can show it; else text (one line, or the widget's content).
        `fresh`: the job was launched a moment ago, so its record is already current."""
        from .. import surface
        from ..view import summary
        from ..view.job_widget import JobWidget
        from ..view.poller import poller, widgets_supported

        if widget and widgets_supported(self.shell):
            view = JobWidget(job, log_lines=self.log_lines)  # it asks for the status itself
            view.show()
            if not view.monitor.finished:
                poller().watch(view)
            return
        if not fresh:
            job.refresh()
        if detailed:
            from ..view.monitor import JobMonitor

            monitor = JobMonitor(job, log_lines=self.log_lines)
            monitor.start()
            monitor.read_log()
            print(summary.snapshot_text(monitor.snapshot(now=time.time())))
        else:
            print(summary.one_line(job.record, self.backends))
        if not job.record.status.is_final:
            print(surface.follow_and_stop(job.name))


def compare_text(runs, metric: str | None, by_time: bool) -> str:
    """The comparison as text, every log read whole (a terminal, --no-widget)."""
    from ..metrics.comparison import table_text
    from ..view.compare_runs import compare

    for run in runs:
        run.read_all()
    comparison = compare(runs, metric, by_time)
    return table_text(comparison.rows, comparison.note)
