"""%%sagemaker_fit against a real HTTP server (moto on 127.0.0.1) and in local mode on the real Docker engine."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import IN_CI, TEST_IMAGE, run_python, wait_for

# outside CI a machine without the SDK or moto skips these; in CI their absence is a failure
for module in ("sagemaker", "moto"):
    __import__(module) if IN_CI else pytest.importorskip(module)

from moto_sagemaker import REGION, MotoSageMaker  # noqa: E402

import jupyter_trainer.backends.sagemaker.launcher  # noqa: E402
from jupyter_trainer.backends import DEFAULT  # noqa: E402
from jupyter_trainer.core.record import Status  # noqa: E402
from jupyter_trainer.jobs.job import Job, get_job  # noqa: E402

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
BUCKET = "trainer-bucket"
SCRIPT = "import os\nprint('epoch 1 loss: 0.5')\n"


@pytest.fixture(scope="module")
def moto_server():
    server = MotoSageMaker()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def local_containers(tmp_path, monkeypatch):
    """This test's local-mode containers alone (other tests' may run beside it, on the same engine):
    the runner makes its compose project in TMPDIR, set here to a directory of the test's own, and
    docker-compose labels each container with its project's directory."""
    root = tmp_path / "local-mode-tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))

    def containers(docker_client, all: bool = False) -> list:
        label = "com.docker.compose.project.working_dir"
        return [c for c in docker_client.containers.list(all=all) if c.labels.get(label, "").startswith(f"{root}/")]

    containers.root = root
    return containers


@pytest.fixture
def aws(moto_server, monkeypatch, home):
    for key, value in {
        "AWS_ENDPOINT_URL": moto_server.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret-value",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    import boto3

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    logs = boto3.client("logs")
    try:
        logs.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    moto_server.create_requests.clear()
    moto_server.stopping_describes = None
    yield moto_server


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    if "TrainerMagics" not in ip.magics_manager.registry:
        ip.run_line_magic("load_ext", "jupyter_trainer")
    return ip


def fit(shell, capsys, line, script=SCRIPT):
    result = shell.run_cell(f"%%sagemaker_fit --no-widget {line}\n{script}")
    out = "".join(capsys.readouterr())
    return result, out


def remote(name, extra=""):
    return f"--name {name} --image-uri 123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1 --role {ROLE} --instance-type ml.g5.xlarge --output-path s3://{BUCKET}/out {extra}"


def put_events(job_name, stream, events):
    import boto3

    logs = boto3.client("logs")
    name = f"{job_name}/{stream}"
    try:
        logs.create_log_stream(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=name)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    logs.put_log_events(
        logGroupName="/aws/sagemaker/TrainingJobs",
        logStreamName=name,
        logEvents=[{"timestamp": t, "message": m} for t, m in events],
    )


def test_create_training_job_request_is_exact(aws, shell, capsys, monkeypatch, tmp_path):
    import botocore.client

    calls = []
    original = botocore.client.BaseClient._make_api_call

    def recording(client, operation, params):
        calls.append((client.meta.service_model.service_name, operation))
        return original(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    source = tmp_path / "src"
    source.mkdir()
    (source / "helpers.py").write_text("VALUE = 42\n")
    line = remote(
        "exact",
        f"--instance-count 2 --input train=s3://{BUCKET}/data/train --input val=s3://{BUCKET}/data/val "
        f"--hyperparameter lr=0.1 --hyperparameter epochs=3 --max-run 3600 --spot --max-wait 7200 "
        f"--checkpoint-s3-uri s3://{BUCKET}/ckpt --source-dir {source} --metric 'loss=loss: ([0-9.]+)' "
        f"--env WANDB_API_KEY=hunter2 --interpreter 'python3 -u' -- --epochs 10 'two words'",
    )
    result, out = fit(shell, capsys, line)
    assert result.success, out
    (request,) = aws.create_requests
    job_name = request["TrainingJobName"]
    assert job_name.startswith("exact-")
    assert request["RoleArn"] == ROLE
    spec = request["AlgorithmSpecification"]
    assert spec["TrainingImage"] == "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"
    assert spec["ContainerEntrypoint"] == ["python3", "/opt/ml/input/data/code/_jupyter_trainer_launch.py"]
    assert request["Environment"] == {"WANDB_API_KEY": "hunter2"}  # the value goes to SageMaker, and nowhere else
    assert spec["MetricDefinitions"] == [{"Name": "loss", "Regex": "loss: ([0-9.]+)"}]
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in request["InputDataConfig"]}
    code_uri = f"s3://{BUCKET}/out/{job_name}/code/"
    assert channels == {"train": f"s3://{BUCKET}/data/train", "val": f"s3://{BUCKET}/data/val", "code": code_uri}
    assert request["HyperParameters"] == {"lr": "0.1", "epochs": "3"}
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}
    assert request["EnableManagedSpotTraining"] is True
    assert request["CheckpointConfig"]["S3Uri"] == f"s3://{BUCKET}/ckpt"
    assert request["OutputDataConfig"]["S3OutputPath"] == f"s3://{BUCKET}/out"
    assert request["ResourceConfig"]["InstanceType"] == "ml.g5.xlarge" and request["ResourceConfig"]["InstanceCount"] == 2
    # the script and --source-dir reached S3 under the code channel
    import boto3

    s3 = boto3.client("s3")
    prefix = f"out/{job_name}/code/"
    assert s3.get_object(Bucket=BUCKET, Key=prefix + "train_script.py")["Body"].read() == b"\n" + SCRIPT.encode()  # the magic's line
    assert s3.get_object(Bucket=BUCKET, Key=prefix + "helpers.py")["Body"].read() == b"VALUE = 42\n"
    launcher = s3.get_object(Bucket=BUCKET, Key=prefix + "_jupyter_trainer_launch.py")["Body"].read()
    assert launcher == Path(jupyter_trainer.backends.sagemaker.launcher.__file__).read_bytes()
    launch = json.loads(s3.get_object(Bucket=BUCKET, Key=prefix + "_jupyter_trainer.json")["Body"].read())
    assert launch == {"script": "train_script.py", "interpreter": ["python3", "-u"], "args": ["--epochs", "10", "two words"], "job_name": job_name}
    record = get_job("exact").record
    assert record.options["env_keys"] == ["WANDB_API_KEY"] and record.options["args"] == ["--epochs", "10", "two words"]
    assert not [path for path in Path(os.environ["JUPYTER_TRAINER_HOME"]).rglob("*") if path.is_file() and b"hunter2" in path.read_bytes()]
    # no STS, IAM or default-bucket calls: the explicit role and output path are used as given
    assert {service for service, _ in calls} <= {"s3", "sagemaker"}
    assert ("sagemaker", "CreateTrainingJob") in calls and not [c for c in calls if c[1] in ("ListBuckets", "CreateBucket")]
    record = get_job("exact").record
    assert record.runtime["training_job_name"] == job_name and record.runtime["region"] == REGION


def test_every_option_users_set_on_real_jobs_reaches_the_request(aws, shell, capsys):
    line = (
        f"--name knobs --framework pytorch --framework-version 2.1 --py-version py310 --role {ROLE} "
        f"--instance-type ml.g5.xlarge --output-path s3://{BUCKET}/out --volume-size 100 --tag team=vision "
        f"--tag 'cost center=ml-42' --subnet subnet-0123456789abcdef0 --subnet subnet-0fedcba9876543210 "
        f"--security-group-id sg-0123456789abcdef0 --keep-alive-period 600 --env SEED=7"
    )
    result, out = fit(shell, capsys, line)
    assert result.success, out
    (request,) = aws.create_requests
    assert request["AlgorithmSpecification"]["TrainingImage"] == "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1-gpu-py310"
    assert request["ResourceConfig"] == {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100, "KeepAlivePeriodInSeconds": 600}
    assert sorted(request["Tags"], key=lambda tag: tag["Key"]) == [{"Key": "cost center", "Value": "ml-42"}, {"Key": "team", "Value": "vision"}]
    assert request["VpcConfig"] == {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]}
    assert request["Environment"] == {"SEED": "7"}
    record = get_job("knobs").record
    assert record.runtime["image_uri"] == request["AlgorithmSpecification"]["TrainingImage"]
    assert (record.options["framework"], record.options["volume_size"], record.options["env_keys"]) == ("pytorch", 100, ["SEED"])


def test_new_options_take_config_defaults_and_flags_win(aws, shell, capsys):
    settings = {"volume_size": "75", "subnets": "['subnet-0123456789abcdef0']", "security_group_ids": "['sg-0123456789abcdef0']",
                "tags": "['team=config']", "env": "['SEED=3']"}  # fmt: skip
    try:
        for name, value in settings.items():
            shell.run_line_magic("config", f"TrainerMagics.{name} = {value}")
        result, out = fit(shell, capsys, remote("configured", "--tag team=flag"))
        assert result.success, out
    finally:
        for name, value in {"volume_size": "None", "subnets": "[]", "security_group_ids": "[]", "tags": "[]", "env": "[]"}.items():
            shell.run_line_magic("config", f"TrainerMagics.{name} = {value}")
    (request,) = aws.create_requests
    assert request["ResourceConfig"]["VolumeSizeInGB"] == 75
    assert request["VpcConfig"] == {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]}
    assert request["Tags"] == [{"Key": "team", "Value": "flag"}]
    assert request["Environment"] == {"SEED": "3"}


def test_on_a_notebook_instance_the_default_bucket_is_the_output_path(aws, shell, capsys, tmp_path, monkeypatch):
    from jupyter_trainer.backends.sagemaker import sdk

    metadata = tmp_path / "resource-metadata.json"
    metadata.write_text('{"ResourceName": "my-notebook"}')
    monkeypatch.setattr(sdk, "NOTEBOOK_METADATA", str(metadata))  # where a notebook instance keeps it
    line = remote("nb-job").replace(f"--output-path s3://{BUCKET}/out", "")
    result, out = fit(shell, capsys, line)
    assert result.success, out
    (request,) = aws.create_requests
    bucket = f"sagemaker-{REGION}-123456789012"  # moto's account
    assert request["OutputDataConfig"]["S3OutputPath"] == f"s3://{bucket}/jupyter-trainer/nb-job"
    import boto3

    assert bucket in [b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]]  # made, as the SDK would
    # elsewhere there is no default: one line, nothing created
    monkeypatch.setattr(sdk, "NOTEBOOK_METADATA", str(tmp_path / "missing.json"))
    result, out = fit(shell, capsys, remote("elsewhere").replace(f"--output-path s3://{BUCKET}/out", ""))
    assert not result.success and "no output path given" in out


def test_notify_on_a_remote_job_says_nothing_will_be_sent_and_keeps_the_url_out_of_the_store(aws, shell, capsys, home):
    result, out = fit(shell, capsys, remote("told-remotely", "--notify https://hooks.example.com/services/T0KEN-b7f3a9c1e5d2"))
    assert result.success, out
    assert "nothing will be sent when it ends" in out and "EventBridge" in out
    assert Job.load("told-remotely").record.options["notify_to"] == "https://hooks.example.com/…"
    assert not any(b"T0KEN-b7f3a9c1e5d2" in path.read_bytes() for path in home.rglob("*") if path.is_file())


def test_options_left_out_keep_the_request_as_it_was(aws, shell, capsys):
    result, out = fit(shell, capsys, remote("plain"))
    assert result.success, out
    (request,) = aws.create_requests
    assert request["ResourceConfig"] == {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30}
    assert "VpcConfig" not in request and "Environment" not in request and not request.get("Tags")


@pytest.mark.parametrize(
    "framework, region, instance_type, expected",
    [
        ("pytorch --framework-version 2.1 --py-version py310", "us-east-1", "ml.m5.xlarge", "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1-cpu-py310"),
        ("pytorch --framework-version 2.1 --py-version py310", "eu-west-1", "ml.p3.2xlarge", "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.1-gpu-py310"),
        ("tensorflow --framework-version 2.13 --py-version py310", "ap-southeast-2", "ml.g5.xlarge", "763104351884.dkr.ecr.ap-southeast-2.amazonaws.com/tensorflow-training:2.13-gpu-py310"),
        ("sklearn --framework-version 1.2-1 --py-version py3", "eu-west-1", "ml.m5.xlarge", "141502667606.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"),
        ("xgboost --framework-version 1.7-1", "us-east-1", "ml.m5.xlarge", "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"),
        ("huggingface --framework-version 4.28 --py-version py310", "us-west-2", "ml.g5.xlarge", "763104351884.dkr.ecr.us-west-2.amazonaws.com/huggingface-pytorch-training:2.0-transformers4.28"),
    ],
)  # fmt: skip
def test_framework_images_are_looked_up_for_the_region_and_instance_type(framework, region, instance_type, expected):
    from jupyter_trainer.backends.sagemaker.sdk import framework_image
    from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec

    name, *rest = framework.split()
    values = dict(zip([word[2:].replace("-", "_") for word in rest[::2]], rest[1::2]))
    spec = build_sagemaker_spec("print(1)", framework=name, role=ROLE, instance_type=instance_type, output_path=f"s3://{BUCKET}/o", **values)
    assert framework_image(spec, region).startswith(expected)  # the SDKs differ in the tail of huggingface's tag


def test_an_unknown_framework_version_is_one_line_before_anything_is_created(aws, shell, capsys, home):
    before = store_snapshot(home)
    result, out = fit(shell, capsys, f"--name old --framework pytorch --framework-version 0.0.1 --py-version py3 --role {ROLE} --output-path s3://{BUCKET}/o")
    assert not result.success and "no pytorch training image for that" in out and "Traceback" not in out
    assert store_snapshot(home) == before and aws.create_requests == []


def test_status_transitions(aws, shell, capsys, monkeypatch):
    monkeypatch.setattr("jupyter_trainer.jobs.job.STOP_WAIT_SECONDS", 2)
    for name in ("done", "broken", "halted"):
        result, out = fit(shell, capsys, remote(name))
        assert result.success, out
    names = {get_job(n).record.runtime["training_job_name"]: n for n in ("done", "broken", "halted")}
    by_name = {n: j for j, n in names.items()}
    assert get_job("done").status is Status.PENDING  # Starting: not training yet
    from jupyter_trainer.view.summary import status_json

    resources = status_json(get_job("done").record, DEFAULT, get_job("done").usage())["resources"]
    assert resources["scope"] == "instances" and (resources["instance_type"], resources["instance_count"]) == ("ml.g5.xlarge", 1)
    aws.set_status(by_name["done"], "InProgress", "Training")
    assert get_job("done").status is Status.RUNNING
    artifact = f"s3://{BUCKET}/out/{by_name['done']}/output/model.tar.gz"
    aws.set_status(by_name["done"], "Completed", training_end_time=__import__("datetime").datetime.now(__import__("datetime").timezone.utc),
                   model_artifacts={"S3ModelArtifacts": artifact}, billable_time_in_seconds=321)
    done = get_job("done")
    assert done.status is Status.COMPLETED and done.exit_code == 0
    assert done.record.runtime["model_artifacts"] == artifact and done.record.runtime["billable_seconds"] == 321

    aws.set_status(by_name["broken"], "Failed", failure_reason="AlgorithmError: ExecuteUserScriptError: exit code 1")
    broken = get_job("broken")
    assert broken.status is Status.FAILED and broken.reason == "AlgorithmError: ExecuteUserScriptError: exit code 1"

    aws.set_status(by_name["halted"], "InProgress", "Training")
    result, out = shell.run_cell("%train_stop halted"), "".join(capsys.readouterr())
    assert result.success, out
    assert "halted: running" in out and "still stopping" in out and "%train_jobs shows when it has stopped" in out
    assert aws.job(by_name["halted"]).training_job_status == "Stopping"
    assert get_job("halted").status is Status.RUNNING  # Stopping is not final
    aws.set_status(by_name["halted"], "Stopped")
    halted = get_job("halted")
    assert halted.status is Status.STOPPED and halted.reason == "stopped by the user"
    # final states stay final; a stop of a finished job changes nothing
    assert Job.load("done").stop().status is Status.COMPLETED


def test_a_remote_failure_in_sagemakers_words_is_said_by_its_exception(aws, shell, capsys):
    """SageMaker's FailureReason wraps what the script raised: the backend reads the exception from
    it as it learns it, and the record keeps both; the job's line says the exception."""
    from jupyter_trainer.view import summary

    result, out = fit(shell, capsys, remote("wrapped"))
    assert result.success, out
    reason = 'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: lr too high\n  File \"train.py\", line 3"\nCommand "python3 train.py"'
    aws.set_status(get_job("wrapped").record.runtime["training_job_name"], "Failed", failure_reason=reason)
    job = get_job("wrapped")
    assert (job.status, job.reason, job.record.headline) == (Status.FAILED, reason, "ValueError: lr too high")
    assert summary.one_line(job.record, DEFAULT).endswith("| ValueError: lr too high")
    assert Job.load("wrapped").record.headline == "ValueError: lr too high"  # as the store keeps it


def test_a_stop_waits_until_sagemaker_has_stopped_the_job(aws, shell, capsys):
    result, out = fit(shell, capsys, remote("stopped-soon"))
    assert result.success, out
    aws.set_status(get_job("stopped-soon").record.runtime["training_job_name"], "InProgress", "Training")
    aws.stopping_describes = 2  # Stopping for two looks, then Stopped, as SageMaker takes its time
    result, out = shell.run_cell("%train_stop stopped-soon"), "".join(capsys.readouterr())
    assert result.success, out
    assert out.startswith("stopped-soon: stopped |") and "still stopping" not in out, out


def test_throttling_is_retried(aws, shell, capsys):
    fit(shell, capsys, remote("throttled"))
    job_name = get_job("throttled").record.runtime["training_job_name"]
    aws.set_status(job_name, "InProgress", "Training")
    aws.throttle_next = 2
    before = aws.describe_calls
    job = Job.load("throttled").refresh()  # one refresh: one DescribeTrainingJob, retried twice
    assert job.record.status is Status.RUNNING
    assert aws.describe_calls - before == 3 and aws.throttle_next == 0


def test_logs_of_every_stream_merge_and_resume_across_processes(aws, shell, capsys):
    fit(shell, capsys, remote("chatty", "--instance-count 2"))
    job_name = get_job("chatty").record.runtime["training_job_name"]
    aws.set_status(job_name, "InProgress", "Training")
    now = int(time.time() * 1000)
    put_events(job_name, "algo-1-1700000000", [(now + 0, "host1 line 0"), (now + 20, "host1 line 2"), (now + 40, "host1 line 4")])
    put_events(job_name, "algo-2-1700000000", [(now + 10, "host2 line 1"), (now + 30, "host2 line 3")])
    first = subprocess.run([sys.executable, "-m", "jupyter_trainer", "logs", "chatty"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    # two hosts: each line says its host, as local mode's log does
    assert first.stdout.splitlines() == [f"[algo-{1 + i % 2}] host{1 + i % 2} line {i}" for i in range(5)]
    # more lines arrive; a new process (another kernel, the CLI) picks up where the last reader stopped
    put_events(job_name, "algo-2-1700000000", [(now + 50, "host2 line 5")])
    put_events(job_name, "algo-1-1700000000", [(now + 60, "host1 line 6")])
    second = run_python("import jupyter_trainer as jt; print(jt.get_job('chatty').logs(), end='')")
    assert second.stdout.splitlines() == [f"[algo-{1 + i % 2}] host{1 + i % 2} line {i}" for i in range(7)], second.stderr
    # a reader that died between writing lines and saving its position: the lines are fetched again, once
    run_dir = get_job("chatty").run_dir
    with open(run_dir / "output.log", "a") as log:
        log.write("half-saved line\n")
    put_events(job_name, "algo-2-1700000000", [(now + 70, "host2 line 7")])
    third = run_python("import jupyter_trainer as jt; print(jt.get_job('chatty').logs(), end='')")
    assert third.stdout.splitlines() == [f"[algo-{1 + i % 2}] host{1 + i % 2} line {i}" for i in range(8)], third.stderr
    # and the status comes from DescribeTrainingJob, as anywhere else
    aws.set_status(job_name, "Completed")
    status = json.loads(subprocess.run([sys.executable, "-m", "jupyter_trainer", "status", "chatty", "--json"], capture_output=True, text=True).stdout)
    assert (status["backend"], status["status"], status["exit_code"]) == ("sagemaker", "completed", 0)


def test_widget_follows_a_sagemaker_job(aws, shell, capsys, monkeypatch):
    import comm

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: comm.DummyComm(*a, **k))
    from jupyter_trainer.view.job_widget import JobWidget

    fit(shell, capsys, remote("watched", "--metric 'loss=loss: ([0-9.]+)'"))
    job_name = get_job("watched").record.runtime["training_job_name"]
    aws.set_status(job_name, "InProgress", "Training")
    now = int(time.time() * 1000)
    put_events(job_name, "algo-1-1", [(now + i, f"epoch {i} loss: {1 / (i + 1):.3f}") for i in range(5)])
    view = JobWidget(Job.load("watched"))
    # a check due at each poll; SageMaker is asked on a thread of its own, and a view being opened
    # waits a moment for its answer, which a loaded machine's may outlast: it comes at a later poll
    polls = iter(range(10, 10**6, 10))
    wait_for(lambda: view.poll(now=next(polls)) and "running" in view.header.value, timeout=30, what="the view to see it run")
    assert "epoch 4 loss: 0.200" in view.log.value and "<svg" in view.plot.value
    aws.set_status(job_name, "Failed", failure_reason="ClientError: out of capacity")
    wait_for(lambda: view.poll(now=next(polls)) is False, timeout=30, what="the view to see the end")
    assert "failed" in view.header.value and "out of capacity" in view.header.value


def store_snapshot(home):
    return sorted(os.path.join(r, n) for r, _, names in os.walk(home) for n in names if n != "record.lock")


@pytest.mark.parametrize(
    "line, env, words",
    [
        (remote("r1").replace(f"--role {ROLE}", ""), {}, "no execution role given"),
        (remote("r2").replace(ROLE, "my-role"), {}, "is not an IAM role ARN"),
        (remote("c1", "--input train"), {}, "--input expects KEY=VALUE"),
        (remote("c2", "--input train=http://example.com/x"), {}, "is not a s3:// URI"),
        (remote("c3", "--input code=s3://b/x"), {}, "reserved for the script"),
        (remote("c4", "--input 'bad name=s3://bucket/x'"), {}, "bad channel name"),
        (remote("i1").replace("ml.g5.xlarge", "ml.gigantic"), {}, "unknown instance type"),
        (remote("o1").replace(f"s3://{BUCKET}/out", "file:///tmp/out"), {}, "is not a s3:// URI"),
        (remote("w1", "--max-wait 10"), {}, "--max-wait applies to spot training only"),
        (remote("n1"), {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}, "no AWS credentials found"),
        (remote("n2"), {"AWS_DEFAULT_REGION": None}, "no AWS region configured"),
        (remote("f1", "--framework pytorch --framework-version 2.1"), {}, "--image-uri and --framework both name the image"),
        (remote("f2").replace("--image-uri 123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1", "--framework keras --framework-version 3"), {}, "is not one this knows"),
        (remote("f3").replace("--image-uri 123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1", "--framework pytorch"), {}, "needs --framework-version"),
        (remote("f4", "--py-version py310"), {}, "go with --framework"),
        (remote("v1", "--volume-size 0"), {}, "--volume-size must be between 1 and 16384 GB"),
        (remote("v2", "--keep-alive-period 7200"), {}, "--keep-alive-period must be between 1 and 3600 seconds"),
        (remote("v3", "--subnet subnet-0123456789abcdef0"), {}, "a VPC needs both --subnet and --security-group-id"),
        (remote("v4", "--subnet subnet-0123456789abcdef0 --security-group-id default"), {}, "is not an id"),
        (remote("t1", "--tag aws:owner=me"), {}, "--tag: bad key"),
        (remote("t2", "--tag novalue"), {}, "--tag expects KEY=VALUE"),
        (remote("e1", "--env 'BAD KEY=secret-value'"), {}, "--env expects KEY=VALUE"),
    ],
)
def test_bad_sagemaker_input_is_one_line(aws, shell, capsys, monkeypatch, home, line, env, words):
    for key in env:
        monkeypatch.delenv(key, raising=False)
    before = store_snapshot(home)
    result, out = fit(shell, capsys, line)
    assert not result.success and words in out and out.count("\n") == 1 and "Traceback" not in out, out
    assert "secret-value" not in out
    assert store_snapshot(home) == before
    assert not aws.create_requests


def test_sagemaker_not_installed_is_one_line(home):
    code = (
        "import sys; sys.modules['sagemaker'] = None\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance(); ip.run_line_magic('load_ext', 'jupyter_trainer')\n"
        f"ip.run_cell('''%%sagemaker_fit {remote('nosdk')}\\nprint(1)''')\n"
    )
    result = run_python(code)
    out = result.stdout + result.stderr
    assert "the sagemaker package is not installed: pip install 'jupyter_trainer[sagemaker]'" in out, out
    assert out.strip().count("\n") == 0 and not os.path.exists(home / "jobs" / "nosdk")


# -- local mode on the real Docker engine ------------------------------------------


def test_local_mode_end_to_end_outlives_the_kernel(docker_client, docker_image, home, tmp_path, monkeypatch, local_containers):
    from conftest import ipython_submitting

    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    train = tmp_path / "train"
    train.mkdir()
    (train / "data.csv").write_text("1,2,3\n")
    output = tmp_path / "output"
    output.mkdir()
    script = (
        "import json, os, time\n"
        "rows = open('/opt/ml/input/data/train/data.csv').read().split(',')\n"
        "hp = json.load(open('/opt/ml/input/config/hyperparameters.json'))\n"
        "for epoch in range(6):\n"
        "    print(f'epoch {epoch} loss: {1 / (epoch + 1):.3f}', flush=True)\n"
        "    time.sleep(0.5)\n"
        "os.makedirs('/opt/ml/model', exist_ok=True)\n"
        "json.dump({'rows': len(rows), 'lr': hp['lr']}, open('/opt/ml/model/model.json', 'w'))\n"
    )
    from test_notify import TOKEN, Receiver

    receiver = Receiver()
    line = (
        f"--name local-e2e --image-uri {TEST_IMAGE} --role {ROLE} --instance-type local "
        f"--input train=file://{train} --output-path file://{output} --hyperparameter lr=0.5 --no-widget "
        f"--notify {receiver.url}"
    )
    kernel = ipython_submitting(line, script, magic="sagemaker_fit")
    kernel.kill()  # the kernel dies while the training container runs
    kernel.wait()
    job = Job.load("local-e2e")
    assert job.wait(timeout=240) is Status.COMPLETED, job.logs()
    try:  # told by the runner's supervisor, with no kernel left
        wait_for(lambda: receiver.received, timeout=60, what="the notification")
    finally:
        receiver.close()
    message = receiver.received[0][2]
    assert (message["name"], message["backend"], message["status"]) == ("local-e2e", "sagemaker", "completed")
    assert not any(TOKEN.encode() in path.read_bytes() for path in home.rglob("*") if path.is_file())
    log = job.logs()
    assert "epoch 5 loss: 0.167" in log
    import tarfile

    with tarfile.open(output / "model.tar.gz") as archive:
        model = json.load(archive.extractfile("model.json"))
    assert model == {"rows": 3, "lr": "0.5"}
    # nothing is left behind: no training container, no working files with credentials in them
    assert local_containers(docker_client, all=True) == []
    assert list(local_containers.root.iterdir()) == []  # the compose project's directory removed too
    assert not list((home / "jobs" / "local-e2e").rglob("docker-compose.yaml"))


def test_local_mode_failure_and_stop(docker_client, docker_image, home, tmp_path, monkeypatch, local_containers):
    from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    output = tmp_path / "output"
    output.mkdir()

    def local(script):
        return build_sagemaker_spec(script, image_uri=TEST_IMAGE, role=ROLE, instance_type="local", output_path=f"file://{output}")

    failing = submit_detached(local("raise SystemExit(3)\n"), name="local-fail").job
    assert failing.wait(timeout=240) is Status.FAILED and failing.exit_code == 3
    stopped = submit_detached(local("import time\nprint('step one of many', flush=True)\ntime.sleep(600)\n"), name="local-stop").job
    wait_for(lambda: "step one of many" in stopped.logs(), timeout=120, what="the training container to start")
    assert len(local_containers(docker_client)) == 1
    stopped.stop()
    assert stopped.wait(timeout=120) is Status.STOPPED
    wait_for(lambda: not local_containers(docker_client), timeout=60, what="the container to go")


# -- local mode with local data hands the training container no AWS credentials -----
#
# Each case puts fake credentials (every key, secret and token contains CANARY) where one link
# of botocore's credential chain finds them. A control first shows boto3 really resolves them in
# that environment; then a local-mode job with file:// channels prints its environment and waits
# while the test reads the container's environment and the runner's working files (the compose
# file among them). CANARY must show up nowhere: not there, not in the job's log or store, and no
# credential endpoint may even be asked.

CREDENTIAL_SOURCES = [
    "environment",
    "shared-credentials-file",
    "config-file",
    "profile-variable",
    "credential-process",
    "assume-role",
    "web-identity",
    "sso",
    "ec2-credentials-file",
    "boto-config",
    "container-full-uri",
    "container-relative-uri",
    "instance-metadata",
]
CONTAINER_CREDENTIALS_HOST = "169.254.170.2"  # where botocore asks for AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
PROBE_SCRIPT = (
    "import json, os, time\n"
    "print('ENVIRON', json.dumps(dict(os.environ), sort_keys=True), flush=True)\n"
    "deadline = time.time() + 120\n"  # until the test has looked at everything
    "while not os.path.exists('/opt/ml/input/data/train/release') and time.time() < deadline:\n"
    "    time.sleep(0.2)\n"
)
# Runs where the fake credential endpoints are reachable (for the relative container URI, inside
# a network namespace of its own): starts them, runs the control, submits the job, then serves
# until its stdin closes and reports which endpoints the job's processes asked.
LEAK_SUBMITTER = r"""
import json, os, subprocess, sys
tests, host, port, secret, image, role, train, output, script = sys.argv[1:]
sys.path.insert(0, tests)
if host != "127.0.0.1":
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", host + "/32", "dev", "lo"], check=True)
from moto_sagemaker import FakeCredentialServer
from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec
from jupyter_trainer.jobs.submit import submit_detached

server = FakeCredentialServer(secret, host, int(port))
for name, value in list(os.environ.items()):
    os.environ[name] = value.replace("@ENDPOINT@", server.endpoint)
control = subprocess.run(
    [sys.executable, "-c", "import boto3; print(boto3.Session().get_credentials().secret_key)"],
    capture_output=True, text=True,
)
print("CONTROL", (control.stdout + control.stderr).strip().replace("\n", " ")[-300:], flush=True)
from jupyter_trainer.backends.sagemaker.sdk import sdk_major

sdk_major()  # the SDK resolves credentials as it is imported: here, in the kernel, before the job's count
asked = len(server.requests)
spec = build_sagemaker_spec(script, image_uri=image, role=role, instance_type="local",
                            inputs=[f"train=file://{train}"], output_path=f"file://{output}")
submit_detached(spec, name="leak-probe")
print("SUBMITTED", flush=True)
sys.stdin.read()
print("ASKED", json.dumps(server.requests[asked:]), flush=True)
"""


def arrange_credentials(source: str, fake_home, secret: str) -> dict:
    """Put fake credentials where `source` finds them; return the environment it needs (@ENDPOINT@:
    the fake credential endpoints)."""
    aws = fake_home / ".aws"
    aws.mkdir()
    key = "AKIACANARY" + source.upper().replace("-", "")[:10]
    keys = f"aws_access_key_id = {key}\naws_secret_access_key = {secret}\n"
    role = "arn:aws:iam::123456789012:role/leaky"
    if source == "environment":
        return {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_SESSION_TOKEN": secret + "Token"}
    if source == "shared-credentials-file":
        (aws / "credentials").write_text("[default]\n" + keys)
    elif source == "config-file":
        (aws / "config").write_text("[default]\n" + keys)
    elif source == "profile-variable":
        (aws / "config").write_text("[profile leaky]\n" + keys)
        return {"AWS_DEFAULT_PROFILE": "leaky"}
    elif source == "credential-process":
        helper = fake_home / "credentials.py"
        helper.write_text(f"import json\nprint(json.dumps({{'Version': 1, 'AccessKeyId': {key!r}, 'SecretAccessKey': {secret!r}}}))\n")
        (aws / "config").write_text(f"[default]\ncredential_process = {sys.executable} {helper}\n")
    elif source == "assume-role":
        (aws / "config").write_text(f"[default]\nrole_arn = {role}\nsource_profile = base\n[profile base]\n{keys}")
        return {"AWS_ENDPOINT_URL_STS": "@ENDPOINT@"}
    elif source == "web-identity":
        (fake_home / "token").write_text("CANARYWebIdentityToken")
        return {"AWS_WEB_IDENTITY_TOKEN_FILE": str(fake_home / "token"), "AWS_ROLE_ARN": role, "AWS_ENDPOINT_URL_STS": "@ENDPOINT@"}
    elif source == "sso":
        import hashlib

        start_url = "https://leaky.awsapps.com/start"
        (aws / "config").write_text(
            f"[default]\nsso_start_url = {start_url}\nsso_region = {REGION}\nsso_account_id = 123456789012\nsso_role_name = leaky\n"
        )
        cache = aws / "sso" / "cache"
        cache.mkdir(parents=True)
        token = {"startUrl": start_url, "region": REGION, "accessToken": "CANARYSsoToken", "expiresAt": "2100-01-01T00:00:00Z"}
        (cache / f"{hashlib.sha1(start_url.encode()).hexdigest()}.json").write_text(json.dumps(token))
        return {"AWS_ENDPOINT_URL_SSO": "@ENDPOINT@"}
    elif source == "ec2-credentials-file":
        (fake_home / "ec2-credentials").write_text(f"AWSAccessKeyId={key}\nAWSSecretKey={secret}\n")
        return {"AWS_CREDENTIAL_FILE": str(fake_home / "ec2-credentials")}
    elif source == "boto-config":
        (fake_home / ".boto").write_text("[Credentials]\n" + keys)
    elif source == "container-full-uri":
        return {"AWS_CONTAINER_CREDENTIALS_FULL_URI": "@ENDPOINT@/credentials"}
    elif source == "container-relative-uri":
        return {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/leaky"}
    elif source == "instance-metadata":
        return {"AWS_EC2_METADATA_SERVICE_ENDPOINT": "@ENDPOINT@/"}
    return {}


def read_all(root) -> dict:
    return {str(p): p.read_bytes().decode(errors="replace") for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("source", CREDENTIAL_SOURCES)
def test_local_mode_with_local_data_gets_no_credentials(source, docker_client, docker_image, home, tmp_path, monkeypatch, local_containers):
    from pathlib import Path

    # only this case's source has credentials: no AWS variables from outside, HOME a fresh directory
    for name in list(os.environ):
        if (name.startswith("AWS_") and name != "AWS_CA_BUNDLE") or name == "BOTO_CONFIG":
            monkeypatch.delenv(name)
    fake_home = tmp_path / "fake-home"
    fake_home.mkdir()
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    scratch = local_containers.root  # the runner's temporary files, its container_root among them
    secret = f"CANARY{source.title().replace('-', '')}Secret"
    env = arrange_credentials(source, fake_home, secret)
    train, output = tmp_path / "train", tmp_path / "output"
    train.mkdir()
    output.mkdir()

    command = [sys.executable, "-c", LEAK_SUBMITTER]
    host, port = "127.0.0.1", "0"
    if source == "container-relative-uri":  # botocore asks 169.254.170.2:80: give it one in a namespace of its own
        try:
            problem = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True).stderr.strip()
        except OSError as exc:
            problem = str(exc)
        if problem:
            reason = f"no network namespace for the container-credentials address: {problem}"
            pytest.fail(reason) if IN_CI else pytest.skip(reason)
        command = ["unshare", "--net", *command]
        host, port = CONTAINER_CREDENTIALS_HOST, "80"
    args = [str(Path(__file__).parent), host, port, secret, TEST_IMAGE, ROLE, str(train), str(output), PROBE_SCRIPT]
    submitter = subprocess.Popen(
        [*command, *args], env={**os.environ, **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )
    try:
        control = submitter.stdout.readline()
        assert secret in control, f"botocore does not find the {source} credentials: {control}"
        submitted = submitter.stdout.readline()
        assert submitted.startswith("SUBMITTED"), submitted + submitter.stdout.read()
        job = Job.load("leak-probe")
        wait_for(lambda: "ENVIRON" in job.logs() or job.status.is_final, timeout=180, what="the training container")
        containers = local_containers(docker_client)
        assert len(containers) == 1, containers
        seen = {"container environment": json.dumps([c.attrs["Config"]["Env"] for c in containers])}
        seen.update(read_all(scratch))  # while the job runs: the compose file, the config files
        assert any(path.endswith("docker-compose.yaml") for path in seen), sorted(seen)
        (train / "release").write_text("")
        assert job.wait(timeout=180) is Status.COMPLETED, job.logs()
        assert "ENVIRON" in job.logs()
    finally:
        (train / "release").write_text("")
        try:
            rest, _ = submitter.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            submitter.kill()
            raise
    seen.update(read_all(home))  # the job's store: its log, its record
    leaks = [where for where, text in seen.items() if "CANARY" in text]
    assert not leaks, f"{source} credentials reached: {leaks}"
    asked = json.loads(rest.split("ASKED", 1)[1])
    assert asked == [], f"the job asked for {source} credentials: {asked}"


def test_local_session_has_credentials_only_when_something_is_on_s3(tmp_path):
    config = tmp_path / "config"  # credentials in the config file, one place botocore looks
    config.write_text("[default]\naws_access_key_id = AKIACANARY\naws_secret_access_key = CANARYSecret\n")
    code = (
        "import os\n"
        "for name in [n for n in os.environ if n.startswith('AWS_')]: del os.environ[name]\n"
        f"os.environ['AWS_CONFIG_FILE'] = {str(config)!r}\n"
        "from jupyter_trainer.backends.sagemaker.local import session_for\n"
        "from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec\n"
        f"spec = lambda out: build_sagemaker_spec('print(1)', image_uri='img:1', role={ROLE!r}, instance_type='local', output_path=out)\n"
        "print(session_for(spec('s3://bucket/out')).get_credentials().secret_key)\n"  # S3 needs them: kept
        "print(session_for(spec('file:///tmp')).get_credentials())\n"
    )
    result = run_python(code)
    assert result.stdout.splitlines() == ["CANARYSecret", "None"], result.stdout + result.stderr


def test_local_mode_with_local_data_does_not_log_in_to_ecr(docker_client, home, tmp_path, monkeypatch):
    from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIACANARY")  # there, but not for this job
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "CANARYSecret")
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/not-pulled:1"  # pulling it would need an ECR login
    spec = build_sagemaker_spec("print(1)\n", image_uri=image, role=ROLE, instance_type="local", output_path=f"file://{tmp_path}")
    job = submit_detached(spec, name="local-ecr").job
    assert job.wait(timeout=120) is Status.FAILED
    log = job.logs()
    assert f"pulling {image} needs AWS credentials" in log and "Traceback" not in log and "CANARY" not in log, log


# -- script mode: SageMaker's examples as users paste them, unchanged -----------------------

# In the style of SageMaker's scikit-learn script-mode example: hyperparameters and the SM_*
# directories through argparse, the data from the train channel, the model to SM_MODEL_DIR.
SKLEARN_EXAMPLE = """
import argparse
import json
import os

import joblib
import numpy as np
from sklearn.linear_model import LogisticRegression

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-iter", type=int, default=10)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--output-data-dir", type=str, default=os.environ["SM_OUTPUT_DATA_DIR"])
    parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
    parser.add_argument("--train", type=str, default=os.environ["SM_CHANNEL_TRAIN"])
    args, _ = parser.parse_known_args()

    data = np.loadtxt(os.path.join(args.train, "train.csv"), delimiter=",")
    model = LogisticRegression(max_iter=args.max_iter, tol=args.tol).fit(data[:, 1:], data[:, 0])
    print(f"train accuracy: {model.score(data[:, 1:], data[:, 0]):.3f}", flush=True)
    print("hosts", os.environ["SM_HOSTS"], "current", os.environ["SM_CURRENT_HOST"], "epochs", args.epochs)
    joblib.dump(model, os.path.join(args.model_dir, "model.joblib"))
    with open(os.path.join(args.output_data_dir, "args.json"), "w") as handle:
        json.dump(vars(args), handle)
"""


def local_line(name, output, extra=""):
    return f"--name {name} --role {ROLE} --instance-type local --output-path file://{output} --no-widget {extra}"


def test_sagemakers_sklearn_example_runs_unchanged_in_local_mode(docker_client, sklearn_image, home, tmp_path, monkeypatch):
    from conftest import ipython_submitting

    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    train = tmp_path / "train"
    train.mkdir()
    rows = [f"{i % 2},{i % 2 + 0.1 * (i % 3)},{1 - i % 2}" for i in range(40)]
    (train / "train.csv").write_text("\n".join(rows) + "\n")
    output = tmp_path / "output"
    output.mkdir()
    line = local_line("sk-example", output, f"--image-uri {sklearn_image} --input train=file://{train} "
                      "--hyperparameter max-iter=50 --hyperparameter tol=0.001 -- --epochs 7")  # fmt: skip
    kernel = ipython_submitting(line, SKLEARN_EXAMPLE, magic="sagemaker_fit")
    kernel.kill()  # the notebook goes; the job does not
    kernel.wait()
    job = Job.load("sk-example")
    assert job.wait(timeout=300) is Status.COMPLETED, job.logs()
    log = job.logs()
    assert "train accuracy: 1.000" in log and 'hosts ["algo-1' in log and "epochs 7" in log
    assert " | " not in log.split("Attaching to")[-1] and "\r" not in log  # compose's prefixes and the tty's CRs are gone
    import tarfile

    with tarfile.open(output / "model.tar.gz") as archive:
        assert "model.joblib" in archive.getnames()
    with tarfile.open(output / "output.tar.gz") as archive:
        member = next(name for name in archive.getnames() if name.endswith("args.json"))
        seen = json.load(archive.extractfile(member))
    assert (seen["max_iter"], seen["tol"], seen["epochs"], seen["train"]) == (50, 0.001, 7, "/opt/ml/input/data/train")


def write_wheel(path, name, version, files):
    """A pure-Python wheel, written as the format says (no build tool needed)."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-{version}.dist-info"
    contents = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}  # fmt: skip
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in contents.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{member},sha256={digest},{len(data)}")
            wheel.writestr(member, data)
        wheel.writestr(f"{info}/RECORD", "\n".join(record + [f"{info}/RECORD,,"]) + "\n")


def test_local_mode_failure_reason_requirements_and_env(docker_client, docker_image, home, tmp_path, monkeypatch):
    """A source dir whose requirements.txt names a wheel shipped beside it (no index is reachable
    from the container), installed under Debian's PEP 668 python3; --env reaches the script and no
    file; an uncaught exception is the job's reason."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    source = tmp_path / "src"
    (source / "wheels").mkdir(parents=True)
    write_wheel(source / "wheels" / "tinydep-1.0-py3-none-any.whl", "tinydep", "1.0", {"tinydep/__init__.py": "ANSWER = 42\n"})
    (source / "requirements.txt").write_text("--no-index\n--find-links wheels\ntinydep==1.0\n")
    script = (
        "import os, tinydep\n"
        "print('answer', tinydep.ANSWER, 'token of', len(os.environ.get('API_TOKEN', '')), 'characters', flush=True)\n"
        "def train(lr):\n    raise ValueError(f'learning rate {lr} is too high')\n"
        "train(float(os.environ['SM_HP_LR']))\n"
    )
    output = tmp_path / "output"
    output.mkdir()
    line = local_line("sm-fails", output, f"--image-uri {docker_image} --source-dir {source} --hyperparameter lr=0.5 --env API_TOKEN=hunter2")
    shell_result = subprocess.run(
        [sys.executable, "-m", "IPython", "--quick", "--no-banner", "-c",
         f"%load_ext jupyter_trainer\nget_ipython().run_cell_magic('sagemaker_fit', {line!r}, {script!r})"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shell_result.returncode == 0, shell_result.stderr
    job = Job.load("sm-fails")
    assert job.wait(timeout=300) is Status.FAILED, job.logs()
    log = job.logs()
    assert "answer 42 token of 7 characters" in log, log
    assert job.record.reason.startswith('AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: learning rate 0.5 is too high')
    status = subprocess.run([sys.executable, "-m", "jupyter_trainer", "status", "sm-fails"], capture_output=True, text=True)
    assert "ValueError: learning rate 0.5 is too high" in status.stdout, status.stdout
    from jupyter_trainer.view import summary
    from jupyter_trainer.view.monitor import JobMonitor

    assert job.record.headline == "ValueError: learning rate 0.5 is too high"  # read once, as the backend learned the reason
    assert summary.one_line(job.record, DEFAULT).endswith("exit code 1: the script raised an error · ValueError: learning rate 0.5 is too high")
    assert JobMonitor(job).snapshot(now=time.time()).outcome == "exit code 1: the script raised an error · ValueError: learning rate 0.5 is too high"
    assert not [p for p in home.rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()]


def test_two_hosts_in_local_mode_each_get_their_own_host_and_say_so(docker_client, docker_image, home, tmp_path, monkeypatch):
    from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    output = tmp_path / "output"
    output.mkdir()
    script = (  # v2 names hosts algo-1-abcde, v3 algo-1
        "import os, re, time\n"
        "print('I am', re.match(r'algo-[0-9]+', os.environ['SM_CURRENT_HOST']).group(), 'of', os.environ['SM_HOSTS'].count('algo'), flush=True)\n"
        "time.sleep(2)\n"
    )
    spec = build_sagemaker_spec(script, image_uri=TEST_IMAGE, role=ROLE, instance_type="local", instance_count=2, output_path=f"file://{output}")
    job = submit_detached(spec, name="two-hosts").job
    assert job.wait(timeout=300) is Status.COMPLETED, job.logs()
    lines = job.logs().splitlines()
    assert "[algo-1] I am algo-1 of 2" in lines and "[algo-2] I am algo-2 of 2" in lines, lines


def test_a_local_mode_submission_leaves_the_sdk_to_its_runner(docker_client, docker_image, home, tmp_path, monkeypatch, local_containers):
    """The kernel that submits a local-mode job never imports the SDK (seconds of a cell's time,
    every first cell of a kernel): the runner, a process of its own, does."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    code = (
        "import sys\n"
        "from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec\n"
        "from jupyter_trainer.jobs.submit import submit_detached\n"
        f"spec = build_sagemaker_spec('print(42)', image_uri={TEST_IMAGE!r}, role={ROLE!r}, instance_type='local', output_path='file://{tmp_path}')\n"
        "submit_detached(spec, name='sdk-elsewhere')\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'sagemaker'))\n"
    )
    submitted = run_python(code)
    assert submitted.returncode == 0 and submitted.stdout.strip() == "[]", submitted.stdout + submitted.stderr
    job = Job.load("sdk-elsewhere")
    assert job.wait(timeout=240) is Status.COMPLETED, job.logs()
    from jupyter_trainer.backends.sagemaker.sdk import sdk_major

    assert "42" in job.logs() and job.record.runtime["sdk"] == sdk_major()  # the generation the runner ran


def test_stop_ends_every_host_in_local_mode(docker_client, docker_image, home, tmp_path, monkeypatch, local_containers):
    from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    output = tmp_path / "output"
    output.mkdir()
    script = "import os, time\nprint('up', os.environ['SM_CURRENT_HOST'], flush=True)\ntime.sleep(600)\n"
    spec = build_sagemaker_spec(script, image_uri=TEST_IMAGE, role=ROLE, instance_type="local", instance_count=2, output_path=f"file://{output}")
    job = submit_detached(spec, name="two-stop").job
    wait_for(lambda: job.logs().count("up algo-") == 2, timeout=120, what="both hosts to start")
    hosts = local_containers(docker_client)
    assert len(hosts) == 2
    job.stop()
    assert job.wait(timeout=120) is Status.STOPPED
    wait_for(lambda: not [c for c in docker_client.containers.list(all=True) if c.id in {h.id for h in hosts}], timeout=60, what="both hosts to go")


# In the style of SageMaker's PyTorch MNIST example: one process per host, its rank from SM_HOSTS,
# env:// initialization with the master address the container provides.
TORCH_DDP = """
import argparse
import json
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--backend", type=str, default=None)
parser.add_argument("--hosts", type=list, default=json.loads(os.environ["SM_HOSTS"]))
parser.add_argument("--current-host", type=str, default=os.environ["SM_CURRENT_HOST"])
args = parser.parse_args()

world_size = len(args.hosts)
os.environ["WORLD_SIZE"] = str(world_size)
host_rank = args.hosts.index(args.current_host)
dist.init_process_group(backend=args.backend, rank=host_rank, world_size=world_size)
total = torch.tensor([host_rank + 1.0])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {total.item():.0f}", flush=True)
dist.barrier()
"""


def test_pytorch_ddp_across_two_hosts_in_local_mode(docker_client, torch_image, home, tmp_path, monkeypatch):
    from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    output = tmp_path / "output"
    output.mkdir()
    spec = build_sagemaker_spec(TORCH_DDP, image_uri=torch_image, role=ROLE, instance_type="local", instance_count=2,
                                output_path=f"file://{output}", hyperparameters=["backend=gloo"])  # fmt: skip
    job = submit_detached(spec, name="ddp").job
    assert job.wait(timeout=300) is Status.COMPLETED, job.logs()
    lines = job.logs().splitlines()
    assert "[algo-1] rank 0 of 2: sum 3" in lines and "[algo-2] rank 1 of 2: sum 3" in lines, lines
    assert not [line for line in lines if "\x1b[" in line]  # compose's colours are gone


# -- the line forms: an image's own train, an existing file as the entry script ------------------

BYOC_DIR = Path(__file__).resolve().parent.parent / "example_notebooks" / "byoc_image"


def fit_line(shell, capsys, line):
    result = shell.run_cell(f"%sagemaker_fit --no-widget {line}")
    return result, "".join(capsys.readouterr())


def test_the_images_own_train_is_asked_for_with_the_image_alone(aws, shell, capsys):
    """`%sagemaker_fit` with no script: as Estimator(image_uri=...).fit({"training": uri}) asks."""
    result, out = fit_line(shell, capsys, remote("own-train", f"--input training=s3://{BUCKET}/data --hyperparameter epochs=3 --hyperparameter learning_rate=0.1 --spot --max-wait 7200 --max-run 3600"))
    assert result.success, out
    (request,) = aws.create_requests
    assert request["AlgorithmSpecification"] == {"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1", "TrainingInputMode": "File"}
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == ["training"]  # no channel of ours
    assert request["HyperParameters"] == {"epochs": "3", "learning_rate": "0.1"}
    assert request["EnableManagedSpotTraining"] is True and request["StoppingCondition"]["MaxWaitTimeInSeconds"] == 7200
    import boto3

    assert "Contents" not in boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"out/{request['TrainingJobName']}/")  # nothing uploaded
    assert get_job("own-train").record.options["image_train"] is True


def test_an_existing_file_is_the_entry_script_relative_to_its_source_dir(aws, shell, capsys, tmp_path, monkeypatch):
    source = tmp_path / "project"
    (source / "src").mkdir(parents=True)
    text = "import helpers\nprint('epoch 1 loss:', helpers.VALUE)\n"
    (source / "src" / "train.py").write_text(text)
    (source / "src" / "helpers.py").write_text("VALUE = 42\n")
    monkeypatch.chdir(tmp_path)  # SCRIPT is --source-dir's, not the current directory's
    result, out = fit_line(shell, capsys, remote("from-file", f"src/train.py --source-dir {source} -- --epochs 2"))
    assert result.success, out
    (request,) = aws.create_requests
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == ["python3", "/opt/ml/input/data/code/_jupyter_trainer_launch.py"]
    import boto3

    s3, prefix = boto3.client("s3"), f"out/{request['TrainingJobName']}/code/"
    assert s3.get_object(Bucket=BUCKET, Key=prefix + "src/train.py")["Body"].read() == text.encode()  # as it is: no line added
    launch = json.loads(s3.get_object(Bucket=BUCKET, Key=prefix + "_jupyter_trainer.json")["Body"].read())
    assert launch["script"] == "src/train.py" and launch["args"] == ["--epochs", "2"]
    record = get_job("from-file").record
    assert record.options["script_path"] == str(source / "src" / "train.py")
    assert record.options["script_sha256"] == __import__("hashlib").sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(
    "extra, words",
    [
        ("--interpreter 'python3 -u'", "--interpreter means nothing without a script: the image's own train runs"),
        ("--source-dir {tmp}", "--source-dir means nothing without a script"),
        ("-- --epochs 3", "words after -- means nothing without a script"),
        ("missing.py", "cannot read the script"),
    ],
)
def test_what_means_nothing_without_a_script_is_one_line(aws, shell, capsys, tmp_path, home, extra, words):
    result, out = fit_line(shell, capsys, remote("refused", extra.format(tmp=tmp_path)))
    assert not result.success and words in out and out.count("\n") == 1, out
    assert aws.create_requests == [] and not (home / "jobs").exists() or not list((home / "jobs").iterdir())


@pytest.fixture(scope="module")
def byoc_image(docker_client):
    """example_notebooks/byoc_image built on the test image (no registry is reachable)."""
    tag = "jupyter-trainer-byoc:test"
    docker_client.images.build(path=str(BYOC_DIR), tag=tag, buildargs={"BASE_IMAGE": TEST_IMAGE}, rm=True, network_mode="none")
    yield tag
    docker_client.images.remove(tag, force=True)


def test_a_bring_your_own_container_image_trains_in_local_mode_and_says_why_it_failed(docker_client, byoc_image, home, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    data, empty, output = tmp_path / "data", tmp_path / "empty", tmp_path / "output"
    for folder in (data, empty, output):
        folder.mkdir()
    (data / "points.csv").write_text("".join(f"{x},{2 * x + 1}\n" for x in range(5)))
    for name, channel in (("byoc-ok", data), ("byoc-empty", empty)):
        line = local_line(name, output / name, f"--image-uri {byoc_image} --input training=file://{channel} --hyperparameter epochs=40")
        (output / name).mkdir()
        done = subprocess.run(
            [sys.executable, "-m", "IPython", "--quick", "--no-banner", "-c", f"%load_ext jupyter_trainer\n%sagemaker_fit {line}"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0 and f"{name}: " in done.stdout, done.stdout + done.stderr
    trained = Job.load("byoc-ok")
    assert trained.wait(timeout=300) is Status.COMPLETED, trained.logs()
    assert "epoch 40 loss" in trained.logs() and "saved the model" in trained.logs()
    assert "loss" in trained.metrics()  # parsed from the image's own log, as for any job
    import tarfile

    with tarfile.open(output / "byoc-ok" / "model.tar.gz") as archive:
        model = json.load(archive.extractfile("model.json"))
    assert model["rows"] == 5 and model["epochs"] == 40
    failed = Job.load("byoc-empty")
    assert failed.wait(timeout=300) is Status.FAILED, failed.logs()
    assert failed.record.reason == "no training data: no x,y rows in /opt/ml/input/data/training/*.csv", failed.logs()


def test_an_entry_script_outside_its_source_dir_and_a_spaced_default_interpreter(aws, shell, capsys, tmp_path, home):
    """The SDK's entry_point is one of source_dir's files: one outside is refused, not dropped
    beside them; `--interpreter 'python3 '` is the default said with a space, not a script's."""
    (tmp_path / "src").mkdir()
    (tmp_path / "outside.py").write_text("print(1)\n")
    result, out = fit_line(shell, capsys, remote("outside", f"{tmp_path}/outside.py --source-dir {tmp_path}/src"))
    assert not result.success and f"{tmp_path}/outside.py is not inside --source-dir {tmp_path}/src" in out and out.count("\n") == 1, out
    result, out = fit_line(shell, capsys, remote("spaced", "--interpreter 'python3 '"))
    assert result.success, out
    assert [request["TrainingJobName"].split("-")[0] for request in aws.create_requests] == ["spaced"]
