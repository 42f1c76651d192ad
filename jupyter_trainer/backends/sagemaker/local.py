"""Runs one SageMaker local-mode training job to its end: `python -m jupyter_trainer.backends.sagemaker.local RUN_DIR`.

Started detached under the job supervisor, so the training survives the
kernel; its output (the SDK's and the container's) is the job's log, and its
exit code the job's. Local mode writes the session's AWS credentials into its
compose file, the training container's environment, so when every channel is a
local path the run gets none, and its working files live in a private
temporary directory removed at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from ...core.files import write_private_file
from ...errors import TrainerError
from ...spec.job_spec import Metric
from .declared import CODE_DIR, FAILURE_FILE, SPEC_FILE
from .errors import local_mode_failure
from .launcher import FAILURE_LIMIT, FAILURE_MARKER
from .reasons import kept_text
from .spec import COMPOSE_VARIABLE, JOB_ENV_VARIABLE, SageMakerSpec, local_region

# Kept when AWS is not needed: they name a region, not an identity.
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
# Where botocore looks for credentials in files; pointed at an empty file when AWS is not needed.
CREDENTIAL_FILE_VARIABLES = ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "BOTO_CONFIG")


def load_spec(run_dir: Path) -> tuple[str, SageMakerSpec]:
    data = json.loads((run_dir / SPEC_FILE).read_text())
    job_name = data.pop("job_name")
    data["metrics"] = tuple(Metric(name, regex) for name, regex in data.get("metrics", []))
    for name in ("interpreter", "args", "subnets", "security_group_ids"):
        if name in data:
            data[name] = tuple(data[name])
    data.pop("env_keys", None)
    data.pop("notify_to", None)  # the notification is the supervisor's business, not the runner's
    data["env"] = json.loads(os.environ.pop(JOB_ENV_VARIABLE, "{}"))  # not inherited by what this starts
    return job_name, SageMakerSpec(script="", **data)


COLOUR = r"\x1b\[[0-9;]*m"  # a terminal colour code, as compose writes them
# docker-compose's prefix on each line of a training container ("PROJECT-algo-1-abcde  | " from
# SDK v2, "algo-1_1  | " from v3), with the colours compose may put around it; group 1 names the
# host without local mode's random suffix
COMPOSE_PREFIX = re.compile(
    rf"(?:{COLOUR})*(?:[A-Za-z0-9_.-]*?[-_])?(algo-\d+)(?:-[a-z0-9]+)?(?:_\d+)?\s*(?:{COLOUR})*\|(?:{COLOUR})* ?"
)
COLOURS = re.compile(COLOUR)


# the launcher's report is one line of JSON of at most FAILURE_LIMIT characters (12 bytes each
# at worst, as \ud83d\ude00): a longer one is not the launcher's, and is not even decoded
MAX_REPORT_CHARS = 16 * FAILURE_LIMIT


def _reason(encoded: str) -> str | None:
    if len(encoded) > MAX_REPORT_CHARS:
        return None
    try:
        reason = json.loads(encoded)
    except ValueError:
        return None
    return reason[:FAILURE_LIMIT] if isinstance(reason, str) else None


class ComposeLogCleaner:
    """Stands for sys.stdout while local mode runs, so the log reads as CloudWatch's would: each
    container line without compose's prefix and its colours, without the CR a tty adds, and with
    `[algo-N] ` in front only when the job has more than one host."""

    def __init__(self, out, hosts: int):
        self.out = out
        self.hosts = hosts
        self._pending: list[str] = []  # the unended line, in pieces (joined once it ends)
        self._reasons: dict[str, str] = {}  # host -> the last failure reason its launcher reported

    def write(self, text: str) -> int:
        if "\n" not in text:
            self._pending.append(text)
            return len(text)
        *lines, rest = "".join([*self._pending, text]).split("\n")
        self._pending = [rest] if rest else []
        for line in lines:
            self.out.write(self.clean(line) + "\n")
        return len(text)

    def clean(self, line: str) -> str:
        prefix = COMPOSE_PREFIX.match(line)
        if not prefix:  # compose's or the SDK's own line: without compose's colours
            return COLOURS.sub("", line)
        text = line[prefix.end() :].removesuffix("\r")
        if text.startswith(FAILURE_MARKER):  # the launcher's is the last a host prints: a script's own comes before
            reason = _reason(text[len(FAILURE_MARKER) :])
            if reason:
                self._reasons[prefix.group(1)] = reason
        return f"[{prefix.group(1)}] {text}" if self.hosts > 1 else text

    def flush(self) -> None:
        self.out.flush()

    @property
    def failure(self) -> str | None:
        """The failure reason of the host that failed first (as SageMaker reports one host's)."""
        return next(iter(self._reasons.values()), None)

    def close_line(self) -> None:
        if self._pending:
            self.out.write(self.clean("".join(self._pending)) + "\n")
            self._pending = []
        self.out.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding...: the real stdout's
        return getattr(self.out, name)


def keep_failure(reason: str | None, run_dir: Path) -> None:
    """Keep a training container's failure reason in the run, as SageMaker keeps FailureReason."""
    reason = kept_text(reason or "")
    if reason:
        write_private_file(run_dir / FAILURE_FILE, reason.encode())


def written_failure(kept: list[bytes]) -> str | None:
    """What a training container wrote to /opt/ml/output/failure itself (an image's own `train`;
    our launcher says it on its log instead), as sdk.keeping_failures kept it: the first host's."""
    return kept[0].decode("utf-8", "replace") if kept else None


def refuse_compose_variables(paths: list[str]) -> None:
    """The host paths local mode mounts (the store's, the temporary directory's) must mean what
    they say in the compose file, where `$` starts a variable."""
    for path in paths:
        if COMPOSE_VARIABLE in path:
            raise TrainerError(
                f"docker-compose would read the '$' in {path!r} as a variable", "use a store and a TMPDIR without '$'"
            )


def needs_aws(spec: SageMakerSpec) -> bool:
    uris = [*spec.inputs.values(), spec.output_path, spec.checkpoint_s3_uri or ""]
    return any(uri.startswith("s3://") for uri in uris)


def session_for(spec: SageMakerSpec):
    """The boto3 session local mode runs with. Both SDK generations write the credentials of the
    session they use into the compose file, so when no channel needs AWS it has none."""
    import boto3

    region = local_region()
    if needs_aws(spec):
        return boto3.Session(region_name=region)
    forget_aws_credentials()
    return boto3.Session(botocore_session=botocore_session_without_credentials(), region_name=region)


def forget_aws_credentials() -> None:
    """Leave this process nothing botocore's credential chain could find, for the sessions the SDK
    makes on its own (v2 makes one as it is imported, v3 whenever it wants one). Every link of
    the chain is named by an AWS_* variable (keys, profile, web identity, container credentials,
    EC2 credential file) or a file (config, credentials, ~/.boto; SSO and login caches are found
    through the config), so all AWS_* variables go and the files become empty ones."""
    for name in [n for n in os.environ if n.startswith("AWS_") and n not in REGION_VARIABLES]:
        del os.environ[name]
    for name in CREDENTIAL_FILE_VARIABLES:
        os.environ[name] = os.devnull
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"  # no instance role either


def botocore_session_without_credentials():
    """A botocore session whose credential chain is empty: get_credentials() is None whatever the
    environment holds, so the SDK has no credentials to write into the compose file."""
    import botocore.credentials
    import botocore.session

    session = botocore.session.Session()
    session.register_component("credential_provider", botocore.credentials.CredentialResolver(providers=[]))
    return session


def remove_containers(project: str) -> None:
    """Remove the training containers of a compose project. Stopping the job stops docker-compose
    too, which may be removing the same containers: they are awaited, within the supervisor's
    grace period."""
    from ..docker.containers import remove_compose_project

    try:
        remove_compose_project(project, timeout=8.0)
    except Exception as exc:  # cleaning up must not change the job's result
        print(f"jupyter_trainer: could not remove the local-mode containers: {exc}", flush=True)


def main(argv: list[str]) -> int:
    from .sdk import run_local

    run_dir = Path(argv[0])
    job_name, spec = load_spec(run_dir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still clean up
    container_root = tempfile.mkdtemp(prefix="jupyter-trainer-local-")
    failures: list[bytes] = []  # what training containers wrote to /opt/ml/output/failure
    print(f"SageMaker local mode: training job {job_name} ({spec.image_uri}) on this machine's Docker", flush=True)
    if not needs_aws(spec):  # the SDK then logs that it could not get AWS credentials: on purpose
        print("jupyter_trainer: every channel is local, so the container gets no AWS credentials", flush=True)
    cleaner = sys.stdout = ComposeLogCleaner(sys.stdout, spec.instance_count)
    try:
        code_dir = None if spec.image_train else str(run_dir / CODE_DIR)  # the image's own train: no code of ours
        refuse_compose_variables([path for path in (code_dir, container_root) if path])
        session = session_for(spec)  # before the SDK is imported: v2 makes a session of its own as it is
        run_local(spec, job_name, code_dir, container_root, session, failures)
    except Exception as exc:  # ours, AWS's or the SDK's (its error, a bug): one line in the log, not a traceback
        said, code = local_mode_failure(exc, needs_aws(spec), spec.image_uri)
        print(f"jupyter_trainer: {said}", flush=True)
        return code
    finally:
        cleaner.close_line()
        keep_failure(cleaner.failure or written_failure(failures), run_dir)
        for compose_dir in Path(container_root).glob("*"):  # compose projects are named after their directory
            if compose_dir.is_dir():
                remove_containers(re.sub(r"[^-_a-z0-9]", "", compose_dir.name.lower()))
        shutil.rmtree(container_root, ignore_errors=True)
    print(f"jupyter_trainer: the model is at {spec.output_path.rstrip('/')}/model.tar.gz", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
