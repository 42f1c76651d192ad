"""The SageMaker backend: the cell's script runs as the entrypoint of a SageMaker training job.

Remote jobs are created through the sagemaker SDK and followed with plain
boto3. `--instance-type local` runs the SDK's local mode in a detached process
on this machine (supervised like a --host job), so it outlives the kernel too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ...core.files import write_private_file
from ...core.processes import ProcessIdentity
from ...core.record import JobRecord, Observation, Status, format_duration
from ...core.resources import Usage
from ...core.store import JobStore
from ..base import (
    LOG_FILE,
    SCRIPT_FILE,
    BackendBase,
    FileLogSource,
    malformed_runtime,
    notify_input,
    prepare_supervised_run,
    read_runtime,
    write_script,
)
from ..host import observe_supervised, start_supervised, stop_supervised
from . import launcher
from .cloudwatch import CloudWatchLogSync, SyncedLogSource, aws_session, client, observe_training_job
from .declared import CODE_DIR, FAILURE_FILE, SPEC_FILE
from .errors import ALREADY_ENDED, has_code, translate
from .reasons import headline, reason_from_file
from .spec import CODE_CHANNEL, JOB_ENV_VARIABLE, LAUNCHER_NAME, SageMakerSpec, local_region, training_job_name


@dataclass(frozen=True)
class SageMakerRuntime:
    """A SageMaker training job: its name, and where it runs (a region, or local mode under a
    supervisor on this machine); plus what DescribeTrainingJob last said of it."""

    training_job_name: str
    mode: str  # "remote" or "local"
    sdk: int  # the sagemaker SDK's major version that submitted it
    region: str | None = None  # remote
    supervisor: dict | None = None  # local: the supervisor's identity (see HostRuntime)
    secondary_status: str | None = None
    failure_reason: str | None = None
    billable_seconds: int | None = None
    model_artifacts: str | None = None
    image_uri: str | None = None  # the training image (looked up, with --framework)

    def to_dict(self) -> dict:
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}

    @classmethod
    def of(cls, record: JobRecord) -> "SageMakerRuntime":
        optional = {
            "region": str,
            "supervisor": dict,
            "secondary_status": str,
            "failure_reason": str,
            "billable_seconds": int,
            "model_artifacts": str,
            "image_uri": str,
        }
        kinds = {
            "training_job_name": str,
            "mode": str,
            "sdk": int,
            **{key: (kind, "optional") for key, kind in optional.items()},
        }
        runtime = read_runtime(cls, record, kinds)
        if runtime.mode not in ("remote", "local") or (runtime.mode == "remote" and not runtime.region):
            raise malformed_runtime(record, f"mode {runtime.mode!r}")
        return runtime


class SageMakerBackend(BackendBase):
    name = "sagemaker"
    usage_outlives_the_job = True  # the instances it was given
    starts_at_launch = True
    status_interval = 10.0  # seconds between two status checks by a widget
    has_containers = False

    def __init__(self):
        self._log_sources: dict[Path, SyncedLogSource] = {}
        self._clients: dict[tuple[str, str], object] = {}

    # -- launching ---------------------------------------------------------

    def preflight(self, spec: SageMakerSpec, store) -> None:
        from .sdk import installed_sdk_major, sdk_major

        installed_sdk_major() if spec.local else sdk_major()  # a remote job is made by this process's SDK
        if spec.local:  # the SDK runs it with docker-compose, on the engine the environment names
            from ..docker.clients import check_answers
            from ..docker.errors import LOCAL_MODE
            from ..docker.hosts import resolve

            check_answers(resolve(None), LOCAL_MODE)
        else:
            aws_session()
        if spec.framework:  # an unknown version is one line before anything is created
            self._with_image(spec)

    def _with_image(self, spec: SageMakerSpec) -> SageMakerSpec:
        """The spec with its image: --image-uri's, or AWS's image for --framework in the job's region."""
        if spec.image_uri:
            return spec
        from .sdk import framework_image

        region = aws_session().region_name if not spec.local else local_region()
        return dataclasses.replace(spec, image_uri=framework_image(spec, region))

    def prepare(self, run_dir: Path, spec: SageMakerSpec) -> None:
        from_cell = not spec.script_path  # a cell's line 1 is the magic's; a file's is its own
        if spec.local:  # run on this machine under the supervisor
            prepare_supervised_run(run_dir, spec.script, from_cell)
        else:
            write_script(run_dir, spec.script, from_cell)

    def launch(self, record: JobRecord, run_dir: Path, spec: SageMakerSpec) -> SageMakerRuntime:
        from .sdk import installed_sdk_major, sdk_major

        sdk = installed_sdk_major() if spec.local else sdk_major()
        job_name = training_job_name(record.name, time.strftime("%Y%m%d-%H%M%S"), secrets.token_hex(2))
        spec = self._with_image(spec)
        code_dir = None if spec.image_train else self._stage_code(run_dir, spec, job_name)
        if spec.local:
            job = {"job_name": job_name, **spec.public_options(), "image_uri": spec.image_uri}
            with JobStore.of_run(run_dir).writing():  # a full store: one line
                write_private_file(run_dir / SPEC_FILE, json.dumps(job).encode())
            command = [sys.executable, "-m", "jupyter_trainer.backends.sagemaker.local", str(run_dir)]
            # the job's environment values reach the runner's process only, never a file
            env = {"PYTHONUNBUFFERED": "1", JOB_ENV_VARIABLE: json.dumps(spec.env)}
            supervised = start_supervised(
                run_dir, command, cwd=str(run_dir), env=env, given=notify_input(record, run_dir, spec.notify)
            )
            return SageMakerRuntime(
                job_name, "local", sdk, supervisor=supervised.supervisor.to_dict(), image_uri=spec.image_uri
            )
        session = aws_session()
        code_uri = None if code_dir is None else self._upload_code(session, code_dir, spec.output_path, job_name)
        from .sdk import submit_remote

        submit_remote(spec, job_name, code_uri, session)
        return SageMakerRuntime(job_name, "remote", sdk, region=session.region_name, image_uri=spec.image_uri)

    def _stage_code(self, run_dir: Path, spec: SageMakerSpec, job_name: str) -> Path:
        """The code channel: the cell's script, --source-dir's files beside it for its imports, and
        the launcher that runs it as script mode would (with what it needs to know)."""
        code_dir = run_dir / CODE_DIR
        if spec.source_dir:
            shutil.copytree(spec.source_dir, code_dir, ignore=shutil.ignore_patterns("__pycache__", ".git", "*.pyc"))
        else:
            code_dir.mkdir(mode=0o700)
        # the entry script as submitted (a file of --source-dir is already there, at its place)
        (code_dir / spec.entry_script).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_dir / SCRIPT_FILE, code_dir / spec.entry_script)
        shutil.copyfile(launcher.__file__, code_dir / LAUNCHER_NAME)
        launch = {
            "script": spec.entry_script,
            "interpreter": list(spec.interpreter),
            "args": list(spec.args),
            "job_name": job_name,
        }
        (code_dir / launcher.CONFIG_NAME).write_text(json.dumps(launch))
        return code_dir

    def _upload_code(self, session, code_dir: Path, output_path: str, job_name: str) -> str:
        bucket, _, prefix = output_path[len("s3://") :].partition("/")
        key_prefix = "/".join(part for part in (prefix.strip("/"), job_name, CODE_CHANNEL) if part)
        s3 = client(session, "s3")
        try:
            for path in sorted(code_dir.rglob("*")):
                if path.is_file():
                    s3.upload_file(str(path), bucket, f"{key_prefix}/{path.relative_to(code_dir).as_posix()}")
        except Exception as exc:
            raise translate(exc, f"upload the script to s3://{bucket}/{key_prefix}/") from exc
        return f"s3://{bucket}/{key_prefix}/"

    # -- following ---------------------------------------------------------

    def asking(self, record: JobRecord) -> str:
        # a local-mode job is its runner's files and processes, on this machine
        return "" if record.runtime.get("mode") == "local" else "asking SageMaker…"

    def observe(self, record: JobRecord, run_dir: Path) -> Observation:
        runtime = SageMakerRuntime.of(record)
        if runtime.mode == "local":
            return self._observe_local(run_dir, runtime)
        try:
            description = self._client(runtime.region, "sagemaker").describe_training_job(
                TrainingJobName=runtime.training_job_name
            )
        except Exception as exc:
            raise translate(exc, "describe the training job") from exc
        return observe_training_job(description)

    def _observe_local(self, run_dir: Path, runtime: SageMakerRuntime) -> Observation:
        """The local runner's outcome; a failure with the reason the training container wrote, as
        SageMaker would report it."""
        seen = observe_supervised(run_dir, ProcessIdentity.from_dict(runtime.supervisor))
        if seen.exit_code in (None, 0) or seen.stopped:
            return seen
        try:
            reason = reason_from_file(run_dir / FAILURE_FILE)
        except OSError:  # none written: the exit code says what is known
            return seen
        return (
            dataclasses.replace(seen, final=Status.FAILED, reason=reason, headline=headline(reason)) if reason else seen
        )

    def log_source(self, record: JobRecord, run_dir: Path):
        if not record.runtime or SageMakerRuntime.of(record).mode != "remote":  # local, or not submitted yet
            return FileLogSource(run_dir / LOG_FILE)
        runtime = SageMakerRuntime.of(record)
        if run_dir not in self._log_sources:
            logs = self._client(runtime.region, "logs")
            hosts = record.options.get("instance_count", 1)
            hosts = hosts if isinstance(hosts, int) else 1
            syncer = CloudWatchLogSync(logs, runtime.training_job_name, run_dir, run_dir / LOG_FILE, hosts)
            self._log_sources[run_dir] = SyncedLogSource(syncer)
        return self._log_sources[run_dir]

    def _client(self, region: str, service: str):
        """One client per region, service and endpoint (AWS_ENDPOINT_URL is read at each use, as the
        AWS CLI does): the widget asks every few seconds."""
        key = (region, service, os.environ.get("AWS_ENDPOINT_URL", ""))
        if key not in self._clients:
            self._clients[key] = client(aws_session(region), service)
        return self._clients[key]

    def stop(self, record: JobRecord, run_dir: Path, container: bool = False) -> None:
        runtime = SageMakerRuntime.of(record)
        if runtime.mode == "local":
            stop_supervised(run_dir, ProcessIdentity.from_dict(runtime.supervisor))
            return
        try:
            self._client(runtime.region, "sagemaker").stop_training_job(TrainingJobName=runtime.training_job_name)
        except Exception as exc:
            if has_code(exc, ALREADY_ENDED):
                return
            raise translate(exc, "stop the training job") from exc

    def lingering(self, record: JobRecord, run_dir: Path) -> list[str]:
        return []  # what it started ends with its instances (local mode: its containers)

    def usage(self, record: JobRecord, run_dir: Path) -> Usage | None:
        """The instances the job has to itself (SageMaker gives no live use without CloudWatch metrics)."""
        count = record.options.get("instance_count", 1)
        kind = record.options.get("instance_type")
        return Usage(
            "instances",
            instance_type=kind if isinstance(kind, str) else None,
            instance_count=count if isinstance(count, int) else None,
        )

    def describe_where(self, record: JobRecord) -> str:
        count = record.options.get("instance_count", 1)
        size = f"{record.options.get('instance_type')}" + (f" x{count}" if count != 1 else "")
        name = (
            record.runtime.get("training_job_name")
            if isinstance(record.runtime.get("training_job_name"), str)
            else None
        )
        return f"SageMaker job {name or '?'} ({size})"

    def describe_host(self, record: JobRecord) -> str | None:
        return None  # its instances are in describe_where

    def describe_facts(self, record: JobRecord) -> list[str]:
        if not record.runtime:
            return []
        runtime = SageMakerRuntime.of(record)
        said = []
        if runtime.secondary_status:
            said.append(f"SageMaker: {runtime.secondary_status}")
        if runtime.billable_seconds is not None:
            said.append(f"billable {format_duration(runtime.billable_seconds)}")
        if runtime.model_artifacts:
            said.append(f"model {runtime.model_artifacts}")
        return said
