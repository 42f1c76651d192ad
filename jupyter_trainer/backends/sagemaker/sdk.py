"""The `sagemaker` SDK, imported only when a SageMaker job is submitted, in either generation.

v2 (`sagemaker.estimator.Estimator`) overrides the container's entrypoint with
the launcher shipped in the code channel (launcher.py), so any image with
`python3` runs the cell's script as script mode would. v3's `ModelTrainer` has no
public entrypoint override (its SourceCode launcher needs bash and pip in the
image), so with v3 a remote job is created through sagemaker-core's
`TrainingJob.create`, the resource layer ModelTrainer itself submits through,
with the same request; and a local one through sagemaker-core's `LocalSession`,
v2's local engine, with that request too.

Either way the SDK is given an explicit role ARN, output path and region so it
makes no STS, IAM or default-bucket calls of its own, and telemetry is off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Iterator

from ...errors import BackendUnavailable, TrainerError
from .errors import NO_BUCKET, has_code, job_refused, no_framework_image, translate
from .spec import CODE_CHANNEL, LAUNCHER_NAME, SageMakerSpec

TELEMETRY_OFF = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}
ENTRYPOINT = ["python3", f"/opt/ml/input/data/{CODE_CHANNEL}/{LAUNCHER_NAME}"]  # runs the script as script mode would
DEFAULT_MAX_RUN = 86400  # the SDK's own default: one day
DEFAULT_VOLUME_GB = 30  # the SDK's own default


@contextlib.contextmanager
def quiet_sdk() -> Iterator[None]:
    """Keep the SDK's side effects out of the kernel: its excepthook, root logging and banners."""
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    os.environ.setdefault("SAGEMAKER_VALIDATE_ROLE", "false")  # v3 would ask IAM about the role
    for name in ("sagemaker.config", "sagemaker.telemetry"):  # banners, even with telemetry off
        logging.getLogger(name).setLevel(logging.WARNING)
    hook, root = sys.excepthook, logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        sys.excepthook = hook
        root.handlers[:] = handlers
        root.setLevel(level)


def sdk_major() -> int:
    """The installed SDK generation (2 or 3), or a one-line error naming the extra to install."""
    with quiet_sdk():
        try:
            import sagemaker
        except ImportError:
            raise BackendUnavailable(
                "the sagemaker package is not installed", "pip install 'jupyter_trainer[sagemaker]'"
            ) from None
    version = getattr(sagemaker, "__version__", "")
    if not version:
        from importlib.metadata import version as installed_version

        version = installed_version("sagemaker")
    return int(version.split(".")[0])


def installed_sdk_major() -> int:
    """The installed SDK generation, read from its package's metadata without importing it (an
    import takes seconds): for a job whose SDK runs in a process of its own (local mode's runner,
    which says in the job's log if the SDK cannot be imported there)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("sagemaker").split(".")[0])
    except (PackageNotFoundError, ValueError):  # no metadata (or none that reads): the import says
        return sdk_major()


def submit_remote(spec: SageMakerSpec, job_name: str, code_uri: str | None, boto_session) -> None:
    """CreateTrainingJob through the installed SDK; returns as soon as the job is created."""
    major = sdk_major()
    with quiet_sdk():
        try:
            if major >= 3:
                _create_v3(spec, job_name, code_uri, boto_session)
            else:
                _estimator_v2(
                    spec, boto_session, local=False
                ).fit(  # no channel at all: none (an empty list is refused)
                    _inputs_v2(spec, code_uri) or None, job_name=job_name, wait=False, logs=False
                )
        except TrainerError:
            raise
        except Exception as exc:
            raise job_refused(exc) from exc


def run_local(
    spec: SageMakerSpec,
    job_name: str,
    code_dir: str | None,
    container_root: str,
    boto_session,
    failures: list | None = None,
) -> None:
    """SageMaker local mode on this machine's Docker; blocks until the training container exits.
    `code_dir`: the code channel (None: the image's own `train` runs); `failures` gets what each
    host's container wrote to /opt/ml/output/failure."""
    major = sdk_major()
    with quiet_sdk():
        keeping_failures(failures if failures is not None else [])
        if major >= 3:
            _local_v3(spec, job_name, code_dir, container_root, boto_session)
            return
        estimator = _estimator_v2(spec, boto_session, local=True, container_root=container_root)
        estimator.fit(
            _inputs_v2(spec, code_dir and f"file://{code_dir}") or None, job_name=job_name, wait=True, logs=True
        )


def keeping_failures(kept: list) -> None:
    """Local mode deletes each host's directory (its /opt/ml/output) as the job ends, before the
    failure file a container wrote there is read: read it first, as SageMaker would for its
    FailureReason. The container's file: a regular one, never a link followed, bounded."""
    import importlib

    from ...core.files import read_small

    for module in ("sagemaker.local.image", "sagemaker.core.local.image"):  # v2's engine, and v3's copy of it
        try:
            container = importlib.import_module(module)._SageMakerContainer
        except (ImportError, AttributeError):
            continue
        cleanup = getattr(container, "_cleanup", None)
        if cleanup is None or getattr(cleanup, "keeps_failures", False):
            continue

        def _cleanup(self, *args, _cleanup=cleanup, **kwargs):
            for host in getattr(self, "hosts", None) or []:
                with contextlib.suppress(OSError, TypeError):
                    kept.append(read_small(os.path.join(self.container_root, host, "output", "failure"), 4096))
            return _cleanup(self, *args, **kwargs)

        _cleanup.keeps_failures = True
        container._cleanup = _cleanup


def _code(spec: SageMakerSpec, code_uri: str | None) -> tuple[dict[str, str], dict]:
    """The code channel and the entrypoint that runs our launcher; neither when the image's own
    `train` runs (the request then names the image alone, as Estimator(image_uri=...) makes it)."""
    if spec.image_train or code_uri is None:
        return {}, {}
    return {CODE_CHANNEL: code_uri}, {"ContainerEntrypoint": ENTRYPOINT}


def _local_v3(spec: SageMakerSpec, job_name: str, code_dir: str | None, container_root: str, boto_session) -> None:
    """v3 local mode: sagemaker-core's LocalSession (v2's local engine, carried over) given the
    request a remote v3 job gets, the launcher as the container's entrypoint. Not ModelTrainer: its
    SourceCode driver needs bash and pip, logs the container's whole environment (--env values
    too), and sources a file holding every hyperparameter in bare single quotes, so a quote or a
    newline in a value ran as shell code in the container."""
    from sagemaker.core.local import LocalSession

    session = LocalSession(boto_session=boto_session, sagemaker_config=TELEMETRY_OFF)
    session.config = {"local": {"local_code": True, "container_root": container_root}}
    code, entrypoint = _code(spec, code_dir and f"file://{code_dir}")
    channels = {**spec.inputs, **code}
    session.sagemaker_client.create_training_job(  # returns when the training container has exited
        TrainingJobName=job_name,
        AlgorithmSpecification={"TrainingImage": spec.image_uri, "TrainingInputMode": "File", **entrypoint},
        InputDataConfig=[_channel_request(name, uri) for name, uri in channels.items()],
        OutputDataConfig={"S3OutputPath": spec.output_path},
        ResourceConfig={
            "InstanceType": spec.instance_type,
            "InstanceCount": spec.instance_count,
            "VolumeSizeInGB": spec.volume_size or DEFAULT_VOLUME_GB,
        },  # fmt: skip
        HyperParameters=dict(spec.hyperparameters),
        Environment=compose_environment(spec.env),
        RoleArn=spec.role,
    )


def _channel_request(name: str, uri: str) -> dict:
    """A channel as CreateTrainingJob names it (local mode reads a file:// URI there too)."""
    source = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
    return {"ChannelName": name, "DataSource": {"S3DataSource": source}, "InputMode": "File"}


def compose_environment(env: dict[str, str]) -> dict[str, str]:
    """The job's environment as local mode hands it to docker-compose, which reads `$` in its file
    as a variable (`$HOME` would become this machine's; `${x:-...}` an error that shows the value):
    each `$` doubled, as compose escapes it, so that every value arrives as given."""
    return {key: value.replace("$", "$$") for key, value in env.items()}


def _estimator_v2(spec: SageMakerSpec, boto_session, local: bool, container_root: str | None = None):
    import sagemaker
    from sagemaker.estimator import Estimator

    if local:
        from sagemaker.local import LocalSession

        session = LocalSession(boto_session=boto_session, sagemaker_config=TELEMETRY_OFF)
        session.config = {"local": {"local_code": True, "container_root": container_root}}
    else:
        session = sagemaker.Session(boto_session=boto_session, sagemaker_config=TELEMETRY_OFF)
    return Estimator(
        image_uri=spec.image_uri,
        role=spec.role,
        instance_count=spec.instance_count,
        instance_type=spec.instance_type,
        output_path=spec.output_path,
        container_entry_point=None if spec.image_train else ENTRYPOINT,
        hyperparameters=dict(spec.hyperparameters) or None,
        environment=(compose_environment(spec.env) if local else dict(spec.env)) or None,
        volume_size=spec.volume_size or DEFAULT_VOLUME_GB,
        tags=[{"Key": key, "Value": value} for key, value in spec.tags.items()] or None,
        subnets=list(spec.subnets) or None,
        security_group_ids=list(spec.security_group_ids) or None,
        keep_alive_period_in_seconds=spec.keep_alive_period,
        metric_definitions=spec.metric_definitions() or None,
        use_spot_instances=spec.spot,
        max_run=spec.max_run or DEFAULT_MAX_RUN,
        max_wait=spec.max_wait,
        checkpoint_s3_uri=spec.checkpoint_s3_uri,
        sagemaker_session=session,
        debugger_hook_config=False,
        disable_profiler=True,
    )


def _inputs_v2(spec: SageMakerSpec, code_uri: str | None) -> dict:
    from sagemaker.inputs import TrainingInput

    code, _ = _code(spec, code_uri)
    return {name: TrainingInput(uri, input_mode="File") for name, uri in {**spec.inputs, **code}.items()}


def _create_v3(spec: SageMakerSpec, job_name: str, code_uri: str | None, boto_session) -> None:
    from sagemaker.core import shapes
    from sagemaker.core.resources import TrainingJob

    def channel(name: str, uri: str):
        source = shapes.S3DataSource(s3_data_type="S3Prefix", s3_uri=uri, s3_data_distribution_type="FullyReplicated")
        return shapes.Channel(
            channel_name=name, data_source=shapes.DataSource(s3_data_source=source), input_mode="File"
        )

    stopping = shapes.StoppingCondition(max_runtime_in_seconds=spec.max_run or DEFAULT_MAX_RUN)
    if spec.max_wait:
        stopping = shapes.StoppingCondition(
            max_runtime_in_seconds=spec.max_run or DEFAULT_MAX_RUN, max_wait_time_in_seconds=spec.max_wait
        )
    options = {}
    if spec.checkpoint_s3_uri:
        options["checkpoint_config"] = shapes.CheckpointConfig(s3_uri=spec.checkpoint_s3_uri)
    if spec.hyperparameters:
        options["hyper_parameters"] = dict(spec.hyperparameters)
    if spec.env:
        options["environment"] = dict(spec.env)
    if spec.tags:
        options["tags"] = [
            {"key": key, "value": value} for key, value in spec.tags.items()
        ]  # as create() validates them
    if spec.subnets:
        options["vpc_config"] = shapes.VpcConfig(
            security_group_ids=list(spec.security_group_ids), subnets=list(spec.subnets)
        )
    TrainingJob.create(
        training_job_name=job_name,
        role_arn=spec.role,
        algorithm_specification=shapes.AlgorithmSpecification(
            training_image=spec.image_uri,
            training_input_mode="File",
            container_entrypoint=_code(spec, code_uri)[1].get("ContainerEntrypoint"),
            metric_definitions=[shapes.MetricDefinition(name=m.name, regex=m.regex) for m in spec.metrics] or None,
        ),
        input_data_config=[channel(name, uri) for name, uri in {**spec.inputs, **_code(spec, code_uri)[0]}.items()]
        or None,
        output_data_config=shapes.OutputDataConfig(s3_output_path=spec.output_path),
        resource_config=shapes.ResourceConfig(
            instance_type=spec.instance_type,
            instance_count=spec.instance_count,
            volume_size_in_gb=spec.volume_size or DEFAULT_VOLUME_GB,
            keep_alive_period_in_seconds=spec.keep_alive_period,
        ),
        stopping_condition=stopping,
        enable_managed_spot_training=spec.spot,
        session=boto_session,
        region=boto_session.region_name,
        **options,
    )


def framework_image(spec: SageMakerSpec, region: str) -> str:
    """AWS's training image for --framework, its version, the region and the instance type (GPU or
    CPU), from the image data shipped with the installed SDK (no network)."""
    sdk_major()
    with quiet_sdk():
        try:
            from sagemaker.core import image_uris  # v3
        except ImportError:
            from sagemaker import image_uris  # v2
        lookup = {"region": region, "version": spec.framework_version, "py_version": spec.py_version,
                  "instance_type": spec.instance_type, "image_scope": "training"}  # fmt: skip
        try:
            if spec.framework == "huggingface":  # its images are built on a framework: take the newest PyTorch one
                lookup["base_framework_version"] = _huggingface_base(image_uris, spec.framework_version)
            return image_uris.retrieve(spec.framework, **lookup)
        except (ValueError, KeyError) as exc:
            raise no_framework_image(spec.framework, exc) from None


def _huggingface_base(image_uris, version: str) -> str:
    training = image_uris.config_for_framework("huggingface")["training"]
    versions = training["versions"].get(training.get("version_aliases", {}).get(version, version))
    if not versions:
        raise ValueError(
            f"unsupported huggingface version {version}; supported: {', '.join(sorted(training['versions']))}"
        )
    bases = [key for key in versions if key.startswith("pytorch")]
    if not bases:
        raise ValueError(f"no PyTorch image of huggingface {version}")
    newest = max(
        bases, key=lambda key: [int(part) if part.isdigit() else 0 for part in key[len("pytorch") :].split(".")]
    )
    aliases = [alias for alias, full in versions.get("version_aliases", {}).items() if full == newest]
    return min(aliases, key=len) if aliases else newest


NOTEBOOK_METADATA = "/opt/ml/metadata/resource-metadata.json"  # present on notebook instances and in Studio
DEFAULT_OUTPUT_PREFIX = "jupyter-trainer"


def on_sagemaker_notebook() -> bool:
    return os.path.exists(NOTEBOOK_METADATA)


def notebook_default_output(name: str | None) -> str | None:
    """On a SageMaker notebook instance or in Studio, the session's default bucket
    (s3://sagemaker-REGION-ACCOUNT/jupyter-trainer/NAME), made if missing as the SDK does; elsewhere None."""
    if not on_sagemaker_notebook():
        return None
    from .cloudwatch import aws_session, client

    session = aws_session()
    region = session.region_name
    try:
        account = client(session, "sts").get_caller_identity()["Account"]
        bucket = f"sagemaker-{region}-{account}"
        s3 = client(session, "s3")
        try:
            s3.head_bucket(Bucket=bucket)
        except Exception as exc:
            if not has_code(exc, NO_BUCKET):
                raise
            location = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            s3.create_bucket(Bucket=bucket, **location)
    except Exception as exc:
        raise translate(exc, "find the session's default bucket for --output-path") from exc
    return "/".join(["s3:/", bucket, DEFAULT_OUTPUT_PREFIX, *([name] if name else [])])


def notebook_instance_role() -> str | None:
    """On a SageMaker notebook instance, its role (the SDK asks IAM); elsewhere None."""
    if not on_sagemaker_notebook():
        return None
    try:
        with quiet_sdk():
            import sagemaker

            return sagemaker.get_execution_role()
    except Exception:
        return None
