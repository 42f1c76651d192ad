"""The one place where botocore's errors, and the sagemaker SDK's, become ours.

A call to AWS fails in one of three ways, each worded once here (`translate`):

* AWS answered, and said no (a ClientError): "AWS refused to DO: CODE: its message";
* no credentials were found: the way to configure them;
* AWS could not be reached, or botocore failed otherwise: "cannot reach AWS to DO (...)".

A refusal that is no failure (a job's log not written yet, the session's bucket not made yet, a
stop of a job that has already ended) is told by the error's code, `has_code(exc, NO_LOG_YET)`,
never by its words. And the SDK's own failures have words here too: a training job it would not
create, an image it has no data for, and how a local-mode run ended (said in the job's log).
"""

from __future__ import annotations

import re

from ...errors import BackendUnavailable, InvalidOption, TrainerError

# The codes of the refusals that are answers
NO_LOG_YET = frozenset({"ResourceNotFoundException"})  # DescribeLogStreams: the job has written no log yet
NO_BUCKET = frozenset({"404", "NoSuchBucket", "NotFound"})  # HeadBucket's word for a missing bucket is 404
ALREADY_ENDED = frozenset({"ValidationException"})  # StopTrainingJob of a job that is no longer in progress

CONFIGURE_CREDENTIALS = "configure them (aws configure, AWS_PROFILE, or an instance role)"


def error_code(exc: BaseException) -> str | None:
    """The code of an AWS error ("ResourceNotFoundException", "404"...), None for any other exception."""
    import botocore.exceptions

    if not isinstance(exc, botocore.exceptions.ClientError):
        return None
    return exc.response.get("Error", {}).get("Code")


def has_code(exc: BaseException, codes: frozenset[str]) -> bool:
    """Whether AWS refused with one of `codes`."""
    return error_code(exc) in codes


def translate(exc: BaseException, doing: str) -> TrainerError:
    """Our error for a failed call to AWS, made to `doing` ("describe the training job")."""
    import botocore.exceptions

    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        return TrainerError(f"AWS refused to {doing}: {error.get('Code', '?')}: {error.get('Message', '')}".strip())
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return no_credentials()
    return BackendUnavailable(f"cannot reach AWS to {doing} ({exc.__class__.__name__}: {exc})")


def no_credentials() -> BackendUnavailable:
    return BackendUnavailable("no AWS credentials found", CONFIGURE_CREDENTIALS)


def unreadable_configuration(exc: BaseException) -> BackendUnavailable:
    """botocore could not read the AWS configuration (a broken profile, an unknown one)."""
    return BackendUnavailable(f"the AWS configuration cannot be read ({exc})")


def job_refused(exc: BaseException) -> TrainerError:
    """The SDK (or CreateTrainingJob behind it) would not create the training job."""
    return TrainerError(f"SageMaker refused the training job: {one_line(exc)}")


def no_framework_image(framework: str, exc: BaseException) -> InvalidOption:
    """The SDK's image data has no training image for --framework, its version and the rest."""
    return InvalidOption(f"no {framework} training image for that: {one_line(exc)}")


def local_mode_failure(exc: BaseException, needs_aws: bool, image: str) -> tuple[str, int]:
    """How a local-mode run that raised `exc` ended, as its runner says it in the job's log (one
    line, not a traceback), and the exit code the runner ends with."""
    from botocore.exceptions import NoCredentialsError

    if isinstance(exc, TrainerError):
        return str(exc), 1
    # an AWS call without credentials: an S3 channel, or logging in to ECR for the image
    if isinstance(exc, NoCredentialsError):
        if needs_aws:
            return "no AWS credentials found for the s3:// locations", 1
        return (
            f"pulling {image} needs AWS credentials, and a job whose channels are all local gets none: "
            "pull the image with docker first",
            1,
        )
    if isinstance(exc, RuntimeError):
        # the SDK's words for a container that exited non-zero: its only way of giving the code
        match = re.search(r"exited with code: (\d+)", str(exc))
        return f"the training container failed ({' '.join(str(exc).split())[-200:]})", int(
            match.group(1)
        ) if match else 1
    return (
        f"local mode failed: {exc.__class__.__name__}: {' '.join(str(exc).split())[:300]}",
        1,
    )  # the SDK's own trouble, a bug


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else exc.__class__.__name__
