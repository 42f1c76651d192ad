"""The IPython magics: parse the line, build a spec, hand it to the job layer, show the job."""

from __future__ import annotations

import functools
import os
import shlex
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display
from traitlets import Bool, Int, Unicode

from . import summary
from .errors import TrainerError
from .job import Job, refreshed_records
from .spec import build_spec
from .store import JobStore


def user_errors(method):
    """Show a TrainerError as one line (IPython prints a UsageError without a traceback)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except TrainerError as error:
            raise UsageError(str(error)) from None

    return wrapper


def parse_line(magic, line: str):
    """Parse a magic's line the way a shell would split it (quotes removed), then with its argparse parser."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"cannot split the options into words ({exc}): check the quotes") from None
    return magic.parser.parse_args(argv)


def job_display_options(func):
    func = argument("--rerun", action="store_true", help="train again under the name of a finished job")(func)
    func = argument(
        "--no-widget", action="store_true", help="print a one-line summary instead of displaying the widget"
    )(func)
    func = argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="a metric to parse from the log (repeatable; one capture group)",
    )(func)
    func = argument("--name", metavar="NAME", help="the job's name (default: derived from the cell)")(func)
    return func


@magics_class
class TrainerMagics(Magics):
    """Detached training jobs from a cell. Defaults below can be set with %config; flags win."""

    image = Unicode(None, allow_none=True, help="default --image for %%train_detached").tag(config=True)
    container = Unicode(None, allow_none=True, help="default --container for %%train_detached").tag(config=True)
    workdir = Unicode(None, allow_none=True, help="default --workdir (else the current directory)").tag(config=True)
    gpus = Unicode(None, allow_none=True, help="default --gpus").tag(config=True)
    interpreter = Unicode("python3", help="default --interpreter").tag(config=True)
    host = Bool(False, help="run on this machine by default, as --host").tag(config=True)
    stop_container_when_done = Bool(False, help="default --stop-container-when-done").tag(config=True)
    widget = Bool(True, help="display the widget (False: print a summary, as --no-widget)").tag(config=True)
    log_lines = Int(200, help="how many log lines the widget and %train_logs show").tag(config=True)
    image_uri = Unicode(None, allow_none=True, help="default --image-uri for %%sagemaker_fit").tag(config=True)
    role = Unicode(None, allow_none=True, help="default --role (an IAM role ARN) for %%sagemaker_fit").tag(config=True)
    instance_type = Unicode("ml.m5.xlarge", help="default --instance-type for %%sagemaker_fit").tag(config=True)
    output_path = Unicode(None, allow_none=True, help="default --output-path for %%sagemaker_fit").tag(config=True)

    def _store(self) -> JobStore:
        return JobStore()

    # -- %%train_detached ------------------------------------------------------

    @magic_arguments()
    @job_display_options
    @argument("--image", metavar="IMAGE", help="create (if missing) a persistent container from IMAGE and run in it")
    @argument("--container", metavar="NAME", help="the persistent container to use or create")
    @argument("--workdir", metavar="DIR", help="host directory mounted at /workspace; the job's working directory")
    @argument("--gpus", metavar="SPEC", help="'all', a count, or device ids (0,1), as docker run --gpus")
    @argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment for the job (repeatable)")
    @argument("--interpreter", metavar="CMD", help="the command that runs the script (default python3)")
    @argument(
        "--stop-container-when-done",
        action="store_const",
        const=True,
        default=None,
        help="stop the container when the job ends, releasing its GPUs",
    )
    @argument("--host", action="store_const", const=True, default=None, help="no container: run on this machine")
    @cell_magic
    @user_errors
    def train_detached(self, line, cell):
        """Run the cell as a training script, detached: it outlives the kernel, the notebook and the SSH session."""
        args = parse_line(self.train_detached, line)
        # an explicit --image or --container overrides a configured host, as an explicit --host
        # overrides configured container defaults: a flag always wins
        host = _pick(args.host, self.host and args.image is None and args.container is None)
        use_config = not host
        spec = build_spec(
            cell,
            host=host,
            image=_pick(args.image, self.image if use_config else None),
            container=_pick(args.container, self.container if use_config else None),
            workdir=_pick(args.workdir, self.workdir),
            gpus=_pick(args.gpus, self.gpus if use_config else None),
            env=args.env,
            interpreter=_pick(args.interpreter, self.interpreter),
            stop_container_when_done=_pick(args.stop_container_when_done, self.stop_container_when_done and use_config),
            metrics=args.metric,
        )
        self._submit(spec, args)

    # -- %%sagemaker_fit ----------------------------------------------------------

    @magic_arguments()
    @job_display_options
    @argument("--image-uri", metavar="URI", help="the training image (it needs python3, nothing else)")
    @argument("--role", metavar="ARN", help="the execution role (default: config, else the notebook instance's role)")
    @argument("--instance-type", metavar="TYPE", help="e.g. ml.g5.xlarge; 'local' runs SageMaker local mode here")
    @argument("--instance-count", type=int, default=1, metavar="N", help="how many instances")
    @argument("--input", action="append", default=[], metavar="CHANNEL=URI", help="an input channel (s3:// or file://)")
    @argument("--output-path", metavar="URI", help="where the model artifact goes")
    @argument("--hyperparameter", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    @argument("--max-run", type=int, metavar="SECONDS", help="the longest the job may train")
    @argument("--spot", action="store_true", help="managed spot training")
    @argument("--max-wait", type=int, metavar="SECONDS", help="with --spot: the longest to wait and train")
    @argument("--checkpoint-s3-uri", metavar="URI", help="where checkpoints are synced")
    @argument("--source-dir", metavar="DIR", help="more files shipped beside the script (its imports)")
    @cell_magic
    @user_errors
    def sagemaker_fit(self, line, cell):
        """Run the cell as the entry script of a SageMaker training job; returns as soon as it is submitted."""
        from .sagemaker_spec import build_sagemaker_spec

        args = parse_line(self.sagemaker_fit, line)
        spec = build_sagemaker_spec(
            cell,
            image_uri=_pick(args.image_uri, self.image_uri),
            role=_pick(args.role, self.role) or _notebook_instance_role(),
            instance_type=_pick(args.instance_type, self.instance_type),
            output_path=_pick(args.output_path, self.output_path),
            instance_count=args.instance_count,
            inputs=args.input,
            hyperparameters=args.hyperparameter,
            max_run=args.max_run,
            spot=args.spot,
            max_wait=args.max_wait,
            checkpoint_s3_uri=args.checkpoint_s3_uri,
            source_dir=args.source_dir,
            metrics=args.metric,
        )
        self._submit(spec, args)

    # -- line magics -------------------------------------------------------------

    @magic_arguments()
    @argument("--all", action="store_true", help="include earlier runs of re-run jobs")
    @line_magic
    @user_errors
    def train_jobs(self, line):
        """A table of jobs: name, backend, status, started, duration, exit code."""
        args = parse_line(self.train_jobs, line)
        print(summary.jobs_table(refreshed_records(self._store(), all_runs=args.all)))

    @magic_arguments()
    @argument("name", help="the job's name")
    @line_magic
    @user_errors
    def train_attach(self, line):
        """Show an existing job (from any kernel)."""
        args = parse_line(self.train_attach, line)
        self._show(Job.load(args.name, self._store()), widget=self.widget, detailed=True)

    @magic_arguments()
    @argument("name", help="the job's name")
    @argument("-n", "--lines", type=int, default=None, metavar="LINES", help="only the last LINES lines")
    @argument("--follow", "-f", action="store_true", help="keep printing new lines until the job ends")
    @line_magic
    @user_errors
    def train_logs(self, line):
        """Print the job's log (collapsed progress bars); --follow keeps printing until the job ends."""
        args = parse_line(self.train_logs, line)
        if args.lines is not None and args.lines < 0:
            raise UsageError("-n expects a number of lines, 0 or more")
        job = Job.load(args.name, self._store())
        if args.follow:
            try:
                for text in job.follow(tail=args.lines):
                    print(text, flush=True)
            except KeyboardInterrupt:
                pass  # interrupting the kernel ends following, not the job
            print(summary.one_line(job.refresh().record))
        else:
            for text in job.log_lines(tail=args.lines):
                print(text)

    @magic_arguments()
    @argument("name", help="the job's name")
    @argument("--container", action="store_true", help="also stop the job's container")
    @line_magic
    @user_errors
    def train_stop(self, line):
        """Stop the job (its whole process group); --container also stops its container."""
        args = parse_line(self.train_stop, line)
        job = Job.load(args.name, self._store()).stop(container=args.container)
        print(summary.one_line(job.record))

    def _submit(self, spec, args) -> None:
        """Submit (or attach to) the job of a cell, then show it."""
        from .submit import submit_detached

        submission = submit_detached(spec, name=args.name, rerun=args.rerun, store=self._store())
        if submission.attached:
            print(submission.message)
        self._show(submission.job, widget=not args.no_widget and self.widget, fresh=not submission.attached)

    # -- display -----------------------------------------------------------------

    def _show(self, job: Job, widget: bool, detailed: bool = False, fresh: bool = False) -> None:
        """The widget where a frontend can show it; else text (one line, or the widget's content).
        `fresh`: the job was launched a moment ago, so its record is already current."""
        from .widget import JobWidget, poller, widgets_supported

        if widget and widgets_supported(self.shell):
            view = JobWidget(job, log_lines=self.log_lines)  # it asks for the status itself
            display(view)
            if not view.monitor.finished:
                poller().watch(view)
            return
        if not fresh:
            job.refresh()
        if detailed:
            from .monitor import JobMonitor

            monitor = JobMonitor(job, log_lines=self.log_lines)
            monitor.start()
            monitor.read_log()
            print(monitor.summary_text(now=time.time()))
        else:
            print(summary.one_line(job.record))
        if not job.record.status.is_final:
            print(f"Follow with %train_logs {job.name} --follow, stop with %train_stop {job.name}.")


def _notebook_instance_role() -> str | None:
    """On a SageMaker notebook instance, its role (the SDK asks IAM); elsewhere None."""
    if not os.path.exists("/opt/ml/metadata/resource-metadata.json"):
        return None
    try:
        from .sagemaker_sdk import quiet_sdk

        with quiet_sdk():
            import sagemaker

            return sagemaker.get_execution_role()
    except Exception:
        return None


def _pick(flag, configured):
    """A flag always wins over config, even an empty one."""
    return configured if flag is None else flag
