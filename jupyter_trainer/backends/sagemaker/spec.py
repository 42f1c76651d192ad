"""What a `%%sagemaker_fit` cell asks for, parsed and checked (pure logic, no SDK, no AWS)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ...errors import InvalidOption
from ...spec.checks import IMAGE_REF, Metric, parse_metrics
from ...spec.job_spec import added_field, cell_values, parse_declared, public_options_of, secret, spec_fingerprint
from ...spec.options import settle
from .declared import SAGEMAKER

ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}")
INSTANCE_TYPE = re.compile(r"ml\.[a-z0-9]+[a-z0-9-]*\.[0-9]*x?(small|medium|large|xlarge)")
LOCAL_TYPES = ("local", "local_gpu")
CHANNEL_NAME = re.compile(r"[A-Za-z0-9.\-_]{1,64}")
HYPERPARAMETER_KEY = re.compile(r"[A-Za-z0-9_.:/-][A-Za-z0-9_.:/ -]{0,255}")
FRAMEWORKS = ("pytorch", "tensorflow", "huggingface", "sklearn", "xgboost")
SUBNET_ID = re.compile(r"subnet-[0-9a-f]{8,17}")
SECURITY_GROUP_ID = re.compile(r"sg-[0-9a-f]{8,17}")
TAG_KEY = re.compile(r"[\w.:/=+@ -]{1,128}")
MAX_VOLUME_GB = 16384
MAX_KEEP_ALIVE_SECONDS = 3600
MAX_TAGS = 50
CODE_CHANNEL = "code"  # where the cell's script (and --source-dir) reach the container
SCRIPT_NAME = "train_script.py"
LAUNCHER_NAME = "_jupyter_trainer_launch.py"  # the entrypoint, shipped beside the script (launcher.py)
COMPOSE_VARIABLE = "$"  # docker-compose substitutes variables in its file: a host path with it is not mounted as named
JOB_ENV_VARIABLE = "JUPYTER_TRAINER_JOB_ENV"  # local mode: the job's --env values, handed to its runner's process only


@dataclass(frozen=True)
class SageMakerSpec:
    script: str
    image_uri: str | None  # None: the --framework image, looked up when the job is submitted
    role: str
    instance_type: str
    output_path: str
    instance_count: int = 1
    inputs: dict[str, str] = field(default_factory=dict)
    hyperparameters: dict[str, str] = field(default_factory=dict)
    max_run: int | None = None
    spot: bool = False
    max_wait: int | None = None
    checkpoint_s3_uri: str | None = None
    source_dir: str | None = None
    metrics: tuple[Metric, ...] = ()
    backend: str = "sagemaker"
    interpreter: tuple[str, ...] = added_field(("python3",))  # runs the script on every host
    args: tuple[str, ...] = added_field(())  # the script's arguments (after `--`), after the hyperparameters
    env: dict[str, str] = secret(added=True, default_factory=dict)
    framework: str | None = added_field(None)  # with its version: the image is AWS's, looked up at submission
    framework_version: str | None = added_field(None)
    py_version: str | None = added_field(None)
    volume_size: int | None = added_field(None)
    tags: dict[str, str] = added_field(default_factory=dict)
    subnets: tuple[str, ...] = added_field(())
    security_group_ids: tuple[str, ...] = added_field(())
    keep_alive_period: int | None = added_field(None)
    notify: str | None = secret(added=True, default=None)  # the URL told when the job ends
    # the line forms: an existing file as the entry script (absolute; its text is `script`), or
    # none at all, and the image's own `train` runs (as Estimator(image_uri=...).fit() does)
    script_path: str | None = added_field(None)
    script_sha256: str | None = added_field(None)
    image_train: bool = added_field(False)

    @property
    def local(self) -> bool:
        return self.instance_type in LOCAL_TYPES

    @property
    def entry_script(self) -> str:
        """The entry script's name in the code channel: a file of --source-dir by its place there,
        another file by its name, a cell as SCRIPT_NAME."""
        if not self.script_path:
            return SCRIPT_NAME
        if self.source_dir:
            relative = os.path.relpath(self.script_path, self.source_dir)
            if not relative.startswith(".."):
                return relative.replace(os.sep, "/")
        return os.path.basename(self.script_path)

    def public_options(self) -> dict:
        return public_options_of(self)

    def metric_definitions(self) -> list[dict]:
        return [{"Name": m.name, "Regex": m.regex} for m in self.metrics]

    def fingerprint(self, key: bytes, rerun: bool = False) -> str:
        """As a detached cell's: the --env values and the --notify URL count (through the HMAC)."""
        return spec_fingerprint(self, key, rerun)


def _pairs(items: Iterable[str], option: str, example: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidOption(f"{option} expects KEY=VALUE, got {item[:60]!r}", f"for example {option} {example}")
        pairs.append((key, value))
    return pairs


def parse_uri(uri: str, what: str, schemes: tuple[str, ...] = ("s3", "file")) -> str:
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in schemes or len(uri) <= len(scheme) + 3:
        wanted = " or ".join(f"{s}://" for s in schemes)
        raise InvalidOption(f"{what} {uri[:80]!r} is not a {wanted} URI")
    if scheme == "s3" and not re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?", uri):
        raise InvalidOption(f"{what} {uri[:80]!r} does not name an S3 bucket", "for example s3://my-bucket/prefix")
    if scheme == "file" and not os.path.isabs(uri[len("file://") :]):
        raise InvalidOption(f"{what} {uri[:80]!r} needs an absolute path", "for example file:///data/train")
    return uri


def parse_channels(items: Iterable[str], local: bool) -> dict[str, str]:
    channels: dict[str, str] = {}
    for name, uri in _pairs(items, "--input", "train=s3://my-bucket/train"):
        if not CHANNEL_NAME.fullmatch(name):
            raise InvalidOption(f"--input: bad channel name {name[:70]!r}", "use letters, digits, '.', '-' or '_'")
        if name == CODE_CHANNEL:
            raise InvalidOption(
                f"--input: the channel name {CODE_CHANNEL!r} is reserved for the script", "choose another"
            )
        if name in channels:
            raise InvalidOption(f"--input: channel {name!r} is given twice")
        channels[name] = parse_uri(uri, f"--input {name}", ("s3", "file") if local else ("s3",))
        if uri.startswith("file://") and not os.path.exists(uri[len("file://") :]):
            raise InvalidOption(f"--input {name}: {uri[len('file://') :]} does not exist")
        if uri.startswith("file://") and COMPOSE_VARIABLE in uri:
            raise InvalidOption(
                f"--input {name}: local mode's docker-compose would read the '$' in {uri[len('file://') :][:80]!r} "
                "as a variable",
                "link the directory from a path without '$' and give that",
            )
    return channels


def build_sagemaker_spec(
    script: str, *, metrics: Iterable[str] = (), args: Iterable[str] = (), image_train: bool = False, **values: Any
) -> SageMakerSpec:
    """A SageMaker spec from option values (by option name; one not given takes its default).
    `image_train`: no script of ours, the image's own `train` runs."""
    values = cell_values(script, SAGEMAKER, values, needs_script=not image_train)
    if image_train:
        _refuse_script_options(values, args)
    values["instance_type"] = values["instance_type"] or "ml.m5.xlarge"  # an empty flag, as none
    image_uri, role, instance_type = values["image_uri"], values["role"], values["instance_type"]
    _check_image(image_uri, values["framework"], values["framework_version"], values["py_version"])
    local = instance_type in LOCAL_TYPES
    if not local and not INSTANCE_TYPE.fullmatch(instance_type):
        raise InvalidOption(
            f"unknown instance type {instance_type!r}", "use an ml.* type such as ml.g5.xlarge, or local"
        )
    if not role:
        raise InvalidOption(
            "no execution role given", "pass --role arn:aws:iam::ACCOUNT:role/NAME (or %config TrainerMagics.role)"
        )
    if not ROLE_ARN.fullmatch(role):
        raise InvalidOption(
            f"--role {role[:80]!r} is not an IAM role ARN", "for example arn:aws:iam::123456789012:role/SageMakerRole"
        )
    if values["instance_count"] < 1:
        raise InvalidOption("--instance-count must be 1 or more")
    if not values["output_path"]:
        raise InvalidOption(
            "no output path given", "pass --output-path s3://bucket/prefix (file:///dir with --instance-type local)"
        )
    values["output_path"] = parse_uri(values["output_path"], "--output-path", ("s3", "file") if local else ("s3",))
    _check_time_limits(values["max_run"], values["max_wait"], values["spot"])
    if values["checkpoint_s3_uri"] is not None:
        values["checkpoint_s3_uri"] = parse_uri(values["checkpoint_s3_uri"], "--checkpoint-s3-uri", ("s3",))
    if values["source_dir"] is not None:
        values["source_dir"] = os.path.abspath(os.path.expanduser(values["source_dir"]))
        if not os.path.isdir(values["source_dir"]):
            raise InvalidOption(f"--source-dir {values['source_dir']!r} is not a directory")
    values["inputs"] = parse_channels(values["inputs"], local)
    values["hyperparameters"] = parse_hyperparameters(values["hyperparameters"])
    values = parse_declared(SAGEMAKER, values)  # --interpreter, --env: checked as for %%train_detached
    values["tags"] = parse_tags(values["tags"])
    values["subnets"], values["security_group_ids"] = parse_vpc(values["subnets"], values["security_group_ids"])
    _check_instances(values["volume_size"], values["keep_alive_period"])
    return SageMakerSpec(
        script=script, metrics=parse_metrics(metrics), args=tuple(args), image_train=image_train, **values
    )


def _refuse_script_options(values: dict, args: Iterable[str]) -> None:
    """What means something only with a script of ours, given where the image's own `train` runs."""
    given = ["--source-dir"] if values["source_dir"] else []
    if (values["interpreter"] or "python3").split() != ["python3"]:  # python3: the default, said or not
        given.append("--interpreter")
    if tuple(args):
        given.append("words after --")
    if given:
        listed = " and ".join(given)
        raise InvalidOption(
            f"{listed} {'mean' if len(given) > 1 else 'means'} nothing without a script: the image's own train runs",
            "give SCRIPT (or write the script in a %%sagemaker_fit cell), or drop "
            + listed
            + " (the image's train reads --hyperparameter values)",
        )


def _check_image(image_uri: str | None, framework: str | None, version: str | None, py_version: str | None) -> None:
    if image_uri and framework:
        raise InvalidOption("--image-uri and --framework both name the image", "give one of them")
    if framework:
        if framework not in FRAMEWORKS:
            raise InvalidOption(
                f"--framework {framework[:40]!r} is not one this knows",
                f"use one of {', '.join(FRAMEWORKS)}, or --image-uri",
            )
        if not version:
            raise InvalidOption(
                f"--framework {framework} needs --framework-version", "for example --framework-version 2.1"
            )
        for value, option in ((version, "--framework-version"), (py_version, "--py-version")):
            if value is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,32}", value):
                raise InvalidOption(f"{option} {value[:40]!r} is not a version")
        return
    if version or py_version:
        raise InvalidOption(
            "--framework-version and --py-version go with --framework", "add --framework NAME, or drop them"
        )
    if not image_uri:
        raise InvalidOption(
            "no training image given",
            "pass --image-uri URI or --framework NAME --framework-version V (or set them with %config)",
        )
    if not IMAGE_REF.fullmatch(image_uri):
        raise InvalidOption(f"invalid image URI {image_uri[:80]!r}")


def _check_instances(volume_size: int | None, keep_alive: int | None) -> None:
    if volume_size is not None and not 1 <= volume_size <= MAX_VOLUME_GB:
        raise InvalidOption(f"--volume-size must be between 1 and {MAX_VOLUME_GB} GB")
    if keep_alive is not None and not 1 <= keep_alive <= MAX_KEEP_ALIVE_SECONDS:
        raise InvalidOption(f"--keep-alive-period must be between 1 and {MAX_KEEP_ALIVE_SECONDS} seconds")


def parse_tags(items: Iterable[str]) -> dict[str, str]:
    tags = {}
    for key, value in _pairs(items, "--tag", "team=vision"):
        if not TAG_KEY.fullmatch(key) or key.lower().startswith("aws:"):
            raise InvalidOption(
                f"--tag: bad key {key[:60]!r}", "up to 128 letters, digits, spaces and _.:/=+-@, not starting with aws:"
            )
        if len(value) > 256:
            raise InvalidOption(f"--tag {key}: the value is longer than 256 characters")
        tags[key] = value
    if len(tags) > MAX_TAGS:
        raise InvalidOption(f"--tag: at most {MAX_TAGS} tags")
    return tags


def parse_vpc(subnets: Iterable[str], groups: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    subnets, groups = tuple(subnets or ()), tuple(groups or ())
    if bool(subnets) != bool(groups):
        raise InvalidOption(
            "a VPC needs both --subnet and --security-group-id", "give at least one of each, or neither"
        )
    for value, pattern, option in [
        *((s, SUBNET_ID, "--subnet") for s in subnets),
        *((g, SECURITY_GROUP_ID, "--security-group-id") for g in groups),
    ]:
        if not pattern.fullmatch(value):
            raise InvalidOption(
                f"{option} {value[:40]!r} is not an id", "for example subnet-0123456789abcdef0 and sg-0123456789abcdef0"
            )
    if len(subnets) > 16 or len(groups) > 5:
        raise InvalidOption("at most 16 subnets and 5 security groups")
    return subnets, groups


def _check_time_limits(max_run: int | None, max_wait: int | None, spot: bool) -> None:
    for value, option in ((max_run, "--max-run"), (max_wait, "--max-wait")):
        if value is not None and value <= 0:
            raise InvalidOption(f"{option} must be a positive number of seconds")
    if max_wait is not None and not spot:
        raise InvalidOption("--max-wait applies to spot training only", "add --spot, or drop --max-wait")
    if spot and max_wait is not None and max_run is not None and max_wait < max_run:
        raise InvalidOption("--max-wait must be at least --max-run")


def parse_hyperparameters(items: Iterable[str]) -> dict[str, str]:
    hyperparameters = {}
    for key, value in _pairs(items, "--hyperparameter", "lr=0.01"):
        if not HYPERPARAMETER_KEY.fullmatch(key):
            raise InvalidOption(f"--hyperparameter: bad name {key[:60]!r}")
        hyperparameters[key] = value
    return hyperparameters


def local_region() -> str:
    """The region local mode says it is in (it names the framework images to pull)."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def training_job_name(name: str, stamp: str, suffix: str) -> str:
    """A SageMaker training job name for our job: only letters, digits and '-', at most 63 characters."""
    base = re.sub(r"[^A-Za-z0-9-]+", "-", name).strip("-") or "job"
    tail = f"-{stamp}-{suffix}"
    return base[: 63 - len(tail)].rstrip("-") + tail


def sagemaker_spec(
    script: str,
    given: Mapping[str, Any],
    config: Mapping[str, Any],
    fallback_role=None,
    args: Iterable[str] = (),
    fallback_output=None,
    image_train: bool = False,
) -> SageMakerSpec:
    """A `%%sagemaker_fit` cell: its flags (`given`, by option name) and the configured defaults; a
    flag always wins. On a notebook instance or in Studio, `fallback_role()` gives the role and
    `fallback_output(name)` the output path when neither names one. `image_train`: the line form
    without a script (a configured --interpreter, for the cells, is not held against it)."""
    if image_train:
        config = {key: value for key, value in config.items() if key != "interpreter"}
    values = settle(SAGEMAKER, given, config)  # by option name, as build_sagemaker_spec takes them
    if not values["role"] and fallback_role:
        values["role"] = fallback_role()
    local = (values["instance_type"] or "") in LOCAL_TYPES
    if not values["output_path"] and fallback_output and not local:
        values["output_path"] = fallback_output(given.get("name"))
    return build_sagemaker_spec(
        script, **values, metrics=given.get("metrics") or (), args=args, image_train=image_train
    )
