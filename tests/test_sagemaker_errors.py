"""botocore's errors, and the SageMaker SDK's, become ours in one module (backends/sagemaker/errors.py):
what a refusal means is told by its error code, never by the words of its message."""

import pytest

pytest.importorskip("botocore")

from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError  # noqa: E402

from jupyter_trainer.backends.sagemaker import errors  # noqa: E402
from jupyter_trainer.backends.sagemaker.backend import SageMakerBackend  # noqa: E402
from jupyter_trainer.backends.sagemaker.cloudwatch import CloudWatchLogSync, SyncedLogSource  # noqa: E402
from jupyter_trainer.core.record import JobRecord  # noqa: E402
from jupyter_trainer.errors import BackendUnavailable, TrainerError  # noqa: E402


def refusal(code, message="", operation="DescribeTrainingJob"):
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


@pytest.mark.parametrize(
    "exc, kind, words",
    [
        (refusal("AccessDeniedException", "not authorized"), TrainerError, "AWS refused to describe the training job: AccessDeniedException: not authorized"),
        (refusal("ValidationException", "Requested resource not found."), TrainerError, "AWS refused to describe the training job: ValidationException: Requested resource not found."),
        (ClientError({"Error": {}}, "DescribeTrainingJob"), TrainerError, "AWS refused to describe the training job: ?:"),
        (NoCredentialsError(), BackendUnavailable, "no AWS credentials found: configure them (aws configure, AWS_PROFILE, or an instance role)"),
        (EndpointConnectionError(endpoint_url="https://api.sagemaker"), BackendUnavailable,
         'cannot reach AWS to describe the training job (EndpointConnectionError: Could not connect to the endpoint URL: "https://api.sagemaker")'),
    ],
)  # fmt: skip
def test_botocores_errors_become_ours_through_the_one_translation(exc, kind, words):
    error = errors.translate(exc, "describe the training job")
    assert type(error) is kind and str(error) == words


def test_a_refusal_is_told_by_its_code_alone():
    assert errors.error_code(refusal("ResourceNotFoundException")) == "ResourceNotFoundException"
    assert errors.error_code(ValueError("ResourceNotFoundException")) is None and errors.error_code(NoCredentialsError()) is None
    assert errors.has_code(refusal("404", operation="HeadBucket"), errors.NO_BUCKET)
    assert errors.has_code(refusal("ResourceNotFoundException"), errors.NO_LOG_YET)
    assert not errors.has_code(refusal("AccessDeniedException", "ResourceNotFoundException ValidationException 404"), errors.NO_LOG_YET | errors.ALREADY_ENDED | errors.NO_BUCKET)


class Refusing:
    """A boto3 client whose every call is refused with `exc`."""

    def __init__(self, exc):
        self.exc = exc
        self.calls = []

    def __getattr__(self, operation):
        def call(**kwargs):
            self.calls.append(operation)
            raise self.exc

        return call


def remote_record():
    runtime = {"training_job_name": "train-20260101-000000-abcd", "mode": "remote", "sdk": 2, "region": "us-east-1"}
    return JobRecord(name="train", backend="sagemaker", runtime=runtime)


def test_a_stop_of_a_job_that_has_ended_is_no_error_and_any_other_refusal_is_said(tmp_path):
    """StopTrainingJob refuses a job no longer in progress with a ValidationException: that stop has
    nothing to do. Another refusal is said, whatever words its message holds."""
    backend = SageMakerBackend()
    client = Refusing(refusal("ValidationException", "The job is not in progress", "StopTrainingJob"))
    backend._client = lambda region, service: client
    backend.stop(remote_record(), tmp_path)  # no error
    assert client.calls == ["stop_training_job"]
    denied = "User is not authorized to perform sagemaker:StopTrainingJob (an explicit deny; ValidationException would not be raised)"
    backend._client = lambda region, service: Refusing(refusal("AccessDeniedException", denied, "StopTrainingJob"))
    with pytest.raises(TrainerError) as said:
        backend.stop(remote_record(), tmp_path)
    assert str(said.value) == f"AWS refused to stop the training job: AccessDeniedException: {denied}"


def test_a_log_not_written_yet_is_an_empty_log_and_any_other_refusal_is_said(tmp_path):
    log = tmp_path / "output.log"
    log.touch()
    quiet = CloudWatchLogSync(Refusing(refusal("ResourceNotFoundException", "The specified log group does not exist.")), "train-1", tmp_path, log)
    assert quiet.sync() == 0 and log.read_bytes() == b""
    denied = Refusing(refusal("AccessDeniedException", "not authorized to perform logs:DescribeLogStreams (ResourceNotFoundException)"))
    source = SyncedLogSource(CloudWatchLogSync(denied, "train-1", tmp_path, log))
    with pytest.raises(TrainerError, match=r"^AWS refused to read the training job's log: AccessDeniedException: not authorized"):
        source.size()


@pytest.mark.parametrize(
    "exc, needs_aws, said, code",
    [
        (RuntimeError("Failed to run: ['docker-compose', 'up'], Process exited with code: 3"), False,
         "the training container failed (Failed to run: ['docker-compose', 'up'], Process exited with code: 3)", 3),
        (RuntimeError("compose\nwent away"), False, "the training container failed (compose went away)", 1),
        (NoCredentialsError(), True, "no AWS credentials found for the s3:// locations", 1),
        (NoCredentialsError(), False, "pulling img:1 needs AWS credentials, and a job whose channels are all local gets none: pull the image with docker first", 1),
        (TrainerError("docker-compose would read the '$' in '/a$b' as a variable", "use a store without '$'"), False,
         "docker-compose would read the '$' in '/a$b' as a variable: use a store without '$'", 1),
        (KeyError("HostName"), False, "local mode failed: KeyError: 'HostName'", 1),
    ],
)  # fmt: skip
def test_how_a_local_mode_run_ended_is_one_line_in_its_log_and_an_exit_code(exc, needs_aws, said, code):
    assert errors.local_mode_failure(exc, needs_aws, "img:1") == (said, code)


def test_the_sdks_refusals_are_one_line():
    created = errors.job_refused(refusal("ResourceLimitExceeded", "The account-level service limit\nis 0 Instances", "CreateTrainingJob"))
    assert type(created) is TrainerError and "\n" not in str(created)
    assert str(created) == "SageMaker refused the training job: An error occurred (ResourceLimitExceeded) when calling the CreateTrainingJob operation: The account-level service limit is 0 Instances"
    assert str(errors.job_refused(ValueError())) == "SageMaker refused the training job: ValueError"
    assert str(errors.no_framework_image("pytorch", ValueError("Unsupported pytorch version: 0.1."))) == "no pytorch training image for that: Unsupported pytorch version: 0.1."
