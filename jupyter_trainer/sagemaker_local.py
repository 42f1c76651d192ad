"""Runs one SageMaker local-mode training job to its end: `python -m jupyter_trainer.sagemaker_local RUN_DIR`.

Started detached under the job supervisor, so the training survives the
kernel; its output (the SDK's and the container's) is the job's log, and its
exit code the job's. Local mode writes the session's AWS credentials into its
compose file, so when every channel is a local path the run gets none, and its
working files live in a private temporary directory removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from .errors import TrainerError
from .sagemaker_spec import SageMakerSpec
from .spec import Metric

CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def load_spec(run_dir: Path) -> tuple[str, SageMakerSpec]:
    data = json.loads((run_dir / "sagemaker.json").read_text())
    job_name = data.pop("job_name")
    data["metrics"] = tuple(Metric(name, regex) for name, regex in data.get("metrics", []))
    return job_name, SageMakerSpec(script="", **data)


def session_for(spec: SageMakerSpec):
    import boto3

    uris = [*spec.inputs.values(), spec.output_path, spec.checkpoint_s3_uri or ""]
    if not any(uri.startswith("s3://") for uri in uris):
        for name in CREDENTIAL_VARIABLES:
            os.environ.pop(name, None)
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return boto3.Session(region_name=region)


def remove_containers(project: str, timeout: float = 8.0) -> None:
    """Remove the training containers of a compose project. Stopping the job stops docker-compose
    too, which may be removing the same containers: wait until every one is gone, within the
    supervisor's grace period."""
    try:
        import docker

        client = docker.from_env()
        deadline = time.monotonic() + timeout
        while True:
            left = client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
            if not left:
                return
            for container in left:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):  # being removed already
                    container.remove(force=True)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{', '.join(c.name for c in left)} still there after {timeout:.0f} s")
            time.sleep(0.2)
    except Exception as exc:  # cleaning up must not change the job's result
        print(f"jupyter_trainer: could not remove the local-mode containers: {exc}", flush=True)


def main(argv: list[str]) -> int:
    from .sagemaker_sdk import run_local

    run_dir = Path(argv[0])
    job_name, spec = load_spec(run_dir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still clean up
    container_root = tempfile.mkdtemp(prefix="jupyter-trainer-local-")
    print(f"SageMaker local mode: training job {job_name} ({spec.image_uri}) on this machine's Docker", flush=True)
    try:
        run_local(spec, job_name, str(run_dir / "code"), container_root, session_for(spec))
    except TrainerError as error:
        print(f"jupyter_trainer: {error}", flush=True)
        return 1
    except RuntimeError as exc:  # the SDK's words for a container that exited non-zero
        match = re.search(r"exited with code: (\d+)", str(exc))
        print(f"jupyter_trainer: the training container failed ({' '.join(str(exc).split())[-200:]})", flush=True)
        return int(match.group(1)) if match else 1
    finally:
        for compose_dir in Path(container_root).glob("*"):  # compose projects are named after their directory
            if compose_dir.is_dir():
                remove_containers(re.sub(r"[^-_a-z0-9]", "", compose_dir.name.lower()))
        shutil.rmtree(container_root, ignore_errors=True)
    print(f"jupyter_trainer: the model is at {spec.output_path.rstrip('/')}/model.tar.gz", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
