"""What the SageMaker backend declares: the options of `%%sagemaker_fit` (its own magic;
`%%train_detached` does not run it), its entry in the registry, and the files it keeps in a run
directory. Read at %load_ext: no boto3 nor sagemaker here."""

from __future__ import annotations

from ...spec.options import NOTIFY, Option
from ..declaration import Declaration

_CHECK = "jupyter_trainer.spec.checks:"

# the files of a run, beside the store's
CLOUDWATCH_STATE_FILE = "cloudwatch.json"  # how far each log stream was fetched
CLOUDWATCH_LOCK_FILE = "cloudwatch.lock"  # held while fetching
SPEC_FILE = "sagemaker.json"  # local mode: the spec, without secrets
CODE_DIR = "code"  # the script and --source-dir, shipped with the job
FAILURE_FILE = "failure"  # local mode: what the training container wrote as its failure reason

SAGEMAKER = (
    Option("image_uri", "--image-uri", "the training image (it needs python3, nothing else)", "URI", config=True),
    Option(
        "role", "--role", "the execution role (default: config, else the notebook instance's role)", "ARN", config=True,
    ),
    Option(
        "instance_type", "--instance-type", "e.g. ml.g5.xlarge; 'local' runs SageMaker local mode here", "TYPE",
        config=True, default="ml.m5.xlarge",
    ),
    Option("instance_count", "--instance-count", "how many instances (default 1)", "N", "int", default=1),
    Option("inputs", "--input", "an input channel (repeatable; s3:// or file://)", "CHANNEL=URI", "append"),
    Option("output_path", "--output-path", "where the model artifact goes", "URI", config=True),
    Option("hyperparameters", "--hyperparameter", "a hyperparameter (repeatable)", "KEY=VALUE", "append"),
    Option("max_run", "--max-run", "the longest the job may train", "SECONDS", "int"),
    Option("spot", "--spot", "managed spot training", kind="switch"),
    Option("max_wait", "--max-wait", "with --spot: the longest to wait and train", "SECONDS", "int"),
    Option("checkpoint_s3_uri", "--checkpoint-s3-uri", "where checkpoints are synced", "URI"),
    Option(
        "source_dir", "--source-dir",
        "more files shipped beside the script (its imports; its requirements.txt is installed first)", "DIR",
    ),
    Option(
        "interpreter", "--interpreter", "the command that runs the script on every host (default python3)", "CMD",
        config=True, default="python3", parse=_CHECK + "parse_interpreter",
    ),
    Option(
        "env", "--env", "the job's environment (repeatable); values are never stored or shown", "KEY=VALUE", "append",
        config=True, parse=_CHECK + "parse_env",
    ),
    Option(
        "framework", "--framework",
        "instead of --image-uri: AWS's training image of pytorch, tensorflow, huggingface, sklearn or xgboost", "NAME",
        config=True,
    ),
    Option(
        "framework_version", "--framework-version",
        "with --framework: its version (for huggingface, the transformers version)", "V", config=True,
    ),
    Option("py_version", "--py-version", "with --framework: the Python of the image, e.g. py310", "PY", config=True),
    Option(
        "volume_size", "--volume-size", "the storage volume of each instance (default 30)", "GB", "int", config=True,
    ),
    Option("tags", "--tag", "a tag of the training job (repeatable)", "KEY=VALUE", "append", config=True),
    Option(
        "subnets", "--subnet", "a VPC subnet to train in (repeatable; with --security-group-id)", "ID", "append",
        config=True,
    ),
    Option(
        "security_group_ids", "--security-group-id", "a VPC security group (repeatable; with --subnet)", "ID", "append",
        config=True,
    ),
    Option(
        "keep_alive_period", "--keep-alive-period", "keep the instances warm this long after the job (warm pools)",
        "SECONDS", "int", config=True,
    ),
    NOTIFY,
)  # fmt: skip


DECLARATION = Declaration(
    "sagemaker",
    entry="jupyter_trainer.backends.sagemaker.backend:SageMakerBackend",
    magic_options=SAGEMAKER,
    run_files=(CLOUDWATCH_STATE_FILE, CLOUDWATCH_LOCK_FILE, SPEC_FILE, CODE_DIR, FAILURE_FILE),
)
