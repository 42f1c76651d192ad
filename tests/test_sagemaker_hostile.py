"""%%sagemaker_fit against hostile values: secrets that change, shell metacharacters, a hostile failure reason.

The fingerprint tests are pure; the API tests run against moto on 127.0.0.1 (as in
test_sagemaker.py, whose fixtures they share), and the local-mode ones on the real Docker engine.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import IN_CI, TEST_IMAGE

# outside CI a machine without the SDK or moto skips these; in CI their absence is a failure
for module in ("sagemaker", "moto"):
    __import__(module) if IN_CI else pytest.importorskip(module)

from test_sagemaker import aws, fit, moto_server, remote, shell  # noqa: E402, F401  (fixtures shared)

from jupyter_trainer.backends import build_spec  # noqa: E402
from jupyter_trainer.backends.sagemaker.spec import build_sagemaker_spec  # noqa: E402
from jupyter_trainer.jobs.job import get_job  # noqa: E402
from jupyter_trainer.spec.job_spec import cell_fingerprint  # noqa: E402

KEY = b"k" * 32
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def sagemaker(**options):
    values = dict(image_uri="img:1", role=ROLE, instance_type="ml.m5.xlarge", output_path="s3://bucket/out")
    return build_sagemaker_spec("print(1)\n", **{**values, **options})


def detached(**options):
    return build_spec("print(1)\n", host=True, image=None, container=None, workdir=None, gpus=None, **options)


# -- 1. a cell's secrets are part of what makes it the same cell ----------------------


@pytest.mark.parametrize("build", [sagemaker, detached], ids=["sagemaker", "detached"])
def test_a_changed_secret_value_is_another_cell(build):
    base = build(env=["WANDB_API_KEY=one"], notify="https://hooks.example.com/T0KEN-1")
    assert build(env=["WANDB_API_KEY=one"], notify="https://hooks.example.com/T0KEN-1").fingerprint(KEY) == base.fingerprint(KEY)
    for other in (
        build(env=["WANDB_API_KEY=two"], notify="https://hooks.example.com/T0KEN-1"),  # the same key, another value
        build(env=["WANDB_API_KEY=one"], notify="https://hooks.example.com/T0KEN-2"),  # the same host, another token
    ):
        assert other.public_options() == base.public_options()  # nothing stored tells them apart...
        assert other.fingerprint(KEY) != base.fingerprint(KEY)  # ...but the HMAC does


def test_both_specs_fingerprint_their_secrets_alike_and_old_cells_keep_their_fingerprints():
    """One rule for both: every secret field in the HMAC, one added later only when set. So a
    detached cell's fingerprint is what it always was, and a %%sagemaker_fit cell without --env
    or --notify too (it had no secrets in its fingerprint)."""

    def as_before(spec, **secrets):
        return cell_fingerprint(KEY, spec.script, spec.backend, spec.public_options(), False, **secrets)

    plain_detached = detached()
    assert plain_detached.fingerprint(KEY) == as_before(plain_detached, env={})
    told = detached(env=["A=1"], notify="https://hooks.example.com/x")
    assert told.fingerprint(KEY) == as_before(told, env={"A": "1"}, notify="https://hooks.example.com/x")
    plain = sagemaker()
    assert plain.fingerprint(KEY) == as_before(plain)
    secret = sagemaker(env=["A=1"], notify="https://hooks.example.com/x")
    assert secret.fingerprint(KEY) == as_before(secret, env={"A": "1"}, notify="https://hooks.example.com/x")
    assert "hunter2" not in json.dumps(sagemaker(env=["A=hunter2"]).public_options())


# the same, end to end against moto


def test_a_sagemaker_cell_whose_env_value_changed_trains_anew_or_is_refused(aws, shell, capsys):
    result, out = fit(shell, capsys, remote("envy", "--env WANDB_API_KEY=one"))
    assert result.success, out
    result, out = fit(shell, capsys, remote("envy", "--env WANDB_API_KEY=one"))  # the same cell: attached
    assert result.success and "attach" in out.lower() and len(aws.create_requests) == 1, out
    result, out = fit(shell, capsys, remote("envy", "--env WANDB_API_KEY=two"))  # another value: another cell
    assert not result.success and "job 'envy' is pending with a different cell" in out and "two" not in out, out
    assert len(aws.create_requests) == 1 and get_job("envy").run == 1
    # unnamed, the cell's name comes from its fingerprint: another value is another job
    line = remote("x").replace("--name x ", "")
    fit(shell, capsys, f"{line} --env WANDB_API_KEY=one")
    fit(shell, capsys, f"{line} --env WANDB_API_KEY=two")
    assert [r["Environment"] for r in aws.create_requests[1:]] == [{"WANDB_API_KEY": "one"}, {"WANDB_API_KEY": "two"}]


# -- 2. hyperparameters and script arguments reach the script exactly, through no shell ----

PROBE = r"""
import glob, json, os, sys
seen = {"argv": sys.argv[1:], "hps": json.loads(os.environ["SM_HPS"]),
        "hp_env": {k: v for k, v in os.environ.items() if k.startswith("SM_HP_")},
        "env": os.environ.get("HOSTILE_ENV"), "pwned": glob.glob("/tmp/pwned-*")}
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w", encoding="utf-8") as handle:
    json.dump(seen, handle)
"""


def hostile_values(token: str, canary) -> dict:
    """Values a shell would run (each touches /tmp/pwned-TOKEN-*, or removes `canary`), or mangle."""
    pwn = f"/tmp/pwned-{token}"
    return {
        "evil": f"x=$(touch {pwn}-a); `touch {pwn}-b` | rm -rf {canary} \"q\" \\'s\\' \\n newline && touch {pwn}-c > {pwn}-d",
        "unicode": "ünïcødé 日本語 🎉 \u202e reversed \u00a0 nbsp",
        "dashes": "--lr=9 -- --not-a-flag",
        "newline": f"one\ntwo\n$(touch {pwn}-e)\n",
        "dollars": f"$HOME ${{HOME}} $$ $1 ${{x:-$(touch {pwn}-f)}} %s %(x)s {{x}} \\$ ;",
        "long": (f"$(touch {pwn}-g);`touch {pwn}-h`|&<>*?[]!#~" * 600)[:20000],
    }


def secret_env(values: dict, token: str) -> str:
    return f"{values['dollars']}\n{values['evil']} envsecret-{token}"


def run_hostile_local_job(tmp_path, monkeypatch, name):
    """A local-mode job given every hostile value: what its script saw, and the canaries."""
    from jupyter_trainer.backends.sagemaker.spec import sagemaker_spec
    from jupyter_trainer.core.record import Status
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    token = os.urandom(4).hex()
    canary = tmp_path / "canary"
    (canary / "keep").mkdir(parents=True)
    values = hostile_values(token, canary)
    args = [values["evil"], "--", values["dashes"], values["unicode"], values["newline"], values["dollars"], ""]
    output = tmp_path / "output"
    output.mkdir()
    given = {"name": name, "image_uri": TEST_IMAGE, "role": ROLE, "instance_type": "local", "output_path": f"file://{output}",
             "hyperparameters": [f"{key}={value}" for key, value in values.items()], "env": [f"HOSTILE_ENV={secret_env(values, token)}"]}  # fmt: skip
    job = submit_detached(sagemaker_spec(PROBE, given, {}, args=args), name=name).job
    assert job.wait(timeout=300) is Status.COMPLETED, job.logs()
    import tarfile

    with tarfile.open(output / "model.tar.gz") as archive:
        seen = json.loads(archive.extractfile("seen.json").read().decode("utf-8"))
    return values, args, seen, token, canary, job


@pytest.mark.parametrize("sdk", ["v2", "v3"])
def test_hostile_hyperparameters_and_arguments_reach_a_local_job_exactly_and_run_nowhere(sdk, docker_client, docker_image, home, tmp_path, monkeypatch):
    from jupyter_trainer.backends.sagemaker.sdk import sdk_major

    if (sdk_major() >= 3) != (sdk == "v3"):
        pytest.skip(f"this environment has SDK v{sdk_major()} (the other venv runs the {sdk} case)")
    values, args, seen, token, canary, job = run_hostile_local_job(tmp_path, monkeypatch, f"hostile-{sdk}")
    hyperparameter_args = [word for key in sorted(values) for word in (f"--{key}", values[key])]
    assert seen["argv"] == hyperparameter_args + args  # every word as given, in the order script mode gives them
    assert seen["hps"] == values and seen["hp_env"]["SM_HP_EVIL"] == values["evil"] and seen["hp_env"]["SM_HP_LONG"] == values["long"]
    assert seen["env"] == secret_env(values, token)  # no $-interpolation on the way (docker-compose does it to its file)
    assert f"envsecret-{token}" not in job.logs()  # nor shown: v3's ModelTrainer logged the whole environment
    assert seen["pwned"] == [] and not list(Path("/tmp").glob(f"pwned-{token}*"))
    assert (canary / "keep").is_dir()


def test_the_magic_line_hands_hostile_values_to_the_request_exactly(aws, shell, capsys):
    """A value full of shell syntax, typed on the magic's line (shell-quoted, as users write it);
    should anything run it, it removes nothing that exists."""
    import shlex

    import boto3

    value = f"x=$(touch /tmp/pwned-{os.urandom(4).hex()}); `id` | rm -rf ~/.no-such-dir-{os.urandom(4).hex()} \"q\" 's' \\n newline -- ünï"
    words = ["--hyperparameter", f"evil={value}", "--hyperparameter", "dashes=--lr=9 --", "--", value, "--", "--flag=--"]
    result, out = fit(shell, capsys, remote("typed") + " " + " ".join(shlex.quote(word) for word in words))
    assert result.success, out
    (request,) = aws.create_requests
    assert request["HyperParameters"] == {"evil": value, "dashes": "--lr=9 --"}
    prefix = f"out/{request['TrainingJobName']}/code/"
    launch = json.loads(boto3.client("s3").get_object(Bucket="trainer-bucket", Key=prefix + "_jupyter_trainer.json")["Body"].read())
    assert launch["args"] == [value, "--", "--flag=--"]


def test_a_local_path_docker_compose_would_rewrite_is_one_line_not_another_directory(tmp_path, monkeypatch):
    """docker-compose substitutes `$NAME` in its file: /data$HOME would mount /data/root (made
    empty by Docker) in the data's place, and the job would train on nothing."""
    from jupyter_trainer.errors import InvalidOption

    data = tmp_path / "data$HOME"
    data.mkdir()
    with pytest.raises(InvalidOption, match=r"would read the '\$' in .* as a variable"):
        sagemaker(instance_type="local", output_path=f"file://{tmp_path}", inputs=[f"train=file://{data}"])


def test_a_store_whose_path_docker_compose_would_rewrite_fails_the_job_in_one_line(tmp_path, monkeypatch):
    from jupyter_trainer.core.record import Status
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("JUPYTER_TRAINER_HOME", str(tmp_path / "store$HOME"))
    spec = sagemaker(image_uri=TEST_IMAGE, instance_type="local", output_path=f"file://{tmp_path}")
    job = submit_detached(spec, name="dollar-store").job
    assert job.wait(timeout=120) is Status.FAILED
    assert "docker-compose would read the '$' in" in job.logs() and "Traceback" not in job.logs()


# -- 3. a huge or binary failure reason stays bounded and printable ------------------------

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal acts on (tab and newline aside)
HOSTILE_REASON = (
    "AlgorithmError: \x1b]0;pwned title\x07\x1b[2J\x1b[31mred\x1b[0m \x00NUL\x00 \x9b31m C1 \r\x08 bidi\u202e "
    "ünïcødé\nsecond line\n"
)


def assert_kept(reason: str, starts: str, cut: str | None) -> None:
    """A few KB at most, nothing a terminal acts on, and a note where it was cut (`cut`: its start)."""
    assert len(reason) <= 4096 and not CONTROL.search(reason), repr(reason[:200])
    assert reason.startswith(starts), repr(reason[:80])
    assert (cut is not None and cut in reason[-80:]) or (cut is None and "(cut" not in reason), repr(reason[-80:])


def refuses_nothing(name: str) -> dict:
    """`status`, `status --json` and `list` of the job, each one exit 0 with bounded, printable output."""
    said = {}
    for command in (["status", name], ["status", name, "--json"], ["list", "--all"]):
        result = subprocess.run([sys.executable, "-m", "jupyter_trainer", *command], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert len(result.stdout) < 16_000 and "\x1b" not in result.stdout and "\x00" not in result.stdout, result.stdout[:300]
        said[" ".join(command)] = result.stdout
    return said


def widget_of(name: str, monkeypatch):
    import comm

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: comm.DummyComm(*a, **k))
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.view.job_widget import JobWidget

    view = JobWidget(Job.load(name))
    view.poll(now=time.time())
    return view


@pytest.mark.parametrize("size", [len(HOSTILE_REASON), 50 * 1024 * 1024], ids=["short", "50MB"])
def test_a_hostile_failure_reason_from_the_api_is_kept_bounded_and_printable(size, aws, shell, capsys, home, monkeypatch):
    from jupyter_trainer.core.record import Status

    name = f"reason-{size}"
    result, out = fit(shell, capsys, remote(name))
    assert result.success, out
    reason = (HOSTILE_REASON * (size // len(HOSTILE_REASON) + 1))[:size]
    aws.set_status(get_job(name).record.runtime["training_job_name"], "Failed", failure_reason=reason)
    job = get_job(name)
    assert job.status is Status.FAILED
    cut = "… (cut to its first 2048 characters)" if size > len(HOSTILE_REASON) else None
    assert_kept(job.reason, "AlgorithmError: red NUL ", cut)
    assert_kept(job.record.runtime["failure_reason"], "AlgorithmError: red NUL ", cut)
    assert "second line" in job.reason  # its lines are kept
    assert max(p.stat().st_size for p in home.rglob("*") if p.is_file()) < 64 * 1024  # nothing of the 50 MB is stored
    said = refuses_nothing(name)
    assert "red NUL" in said[f"status {name}"] and json.loads(said[f"status {name} --json"])["reason"] == job.reason
    view = widget_of(name, monkeypatch)
    assert "failed" in view.header.value and "\x1b" not in view.header.value and len(view.header.value) < 16_000


# Writes a 50 MB failure file of every byte value (NULs, ESC, invalid UTF-8), then fails with
# terminal control and invalid UTF-8 on stderr and an exception of 10,000 characters.
HOSTILE_FAILURE_SCRIPT = r"""
import sys
block = bytes(range(256)) * 4096
with open("/opt/ml/output/failure", "wb") as handle:
    for _ in range(50):
        handle.write(block)
sys.stderr.buffer.write(b"\x1b]0;pwned title\x07\x1b[2J\x1b[31mred\x1b[0m \x00NUL\xff\xfe invalid " + b"x" * 200000 + b"\n")
sys.stderr.flush()
raise ValueError("\x1b[2Jcleared \x00\x9b31m " + "y" * 10000)
"""


def test_a_huge_binary_failure_in_local_mode_is_a_bounded_printable_reason(docker_client, docker_image, home, tmp_path, monkeypatch):
    from jupyter_trainer.backends.sagemaker.sdk import sdk_major
    from jupyter_trainer.core.record import Status
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    output = tmp_path / "output"
    output.mkdir()
    name = f"binary-failure-v{sdk_major()}"
    spec = build_sagemaker_spec(HOSTILE_FAILURE_SCRIPT, image_uri=TEST_IMAGE, role=ROLE, instance_type="local", output_path=f"file://{output}")
    job = submit_detached(spec, name=name).job
    assert job.wait(timeout=300) is Status.FAILED and job.exit_code == 1, job.logs(tail=50)
    starts = 'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: cleared  yyyy'
    assert_kept(job.reason, starts, cut="... (cut: ")
    kept = {p.name: p.stat().st_size for p in job.run_dir.rglob("*") if p.is_file() and p.name != "output.log"}
    assert kept["failure"] <= 4096 and max(kept.values()) < 64 * 1024, kept  # nothing of the 50 MB in the store
    said = refuses_nothing(name)
    assert "ValueError: cleared" in said[f"status {name}"] and json.loads(said[f"status {name} --json"])["reason"] == job.reason
    view = widget_of(name, monkeypatch)
    assert "failed" in view.header.value and "ValueError: cleared" in view.header.value
    assert "\x1b" not in view.header.value + view.log.value and "\x00" not in view.log.value


def test_a_huge_failure_file_in_a_run_is_never_read_whole(tmp_path):
    """Local mode's failure file, however it grew: the reason is read from its start alone."""
    import tracemalloc

    from jupyter_trainer.backends.sagemaker.reasons import reason_from_file

    failure = tmp_path / "failure"
    with open(failure, "wb") as handle:
        handle.write(HOSTILE_REASON.encode())
        for _ in range(50):
            handle.write(bytes(range(256)) * 4096)
    tracemalloc.start()
    try:
        reason = reason_from_file(failure)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024, peak
    assert_kept(reason, "AlgorithmError: red NUL ", cut="… (cut to its first 2048 characters)")


def test_a_forged_report_of_megabytes_is_not_decoded_and_the_launchers_own_is_kept(tmp_path):
    import io

    from jupyter_trainer.backends.sagemaker import launcher
    from jupyter_trainer.backends.sagemaker.local import ComposeLogCleaner, keep_failure

    cleaner = ComposeLogCleaner(io.StringIO(), 1)
    cleaner.write(f"p-algo-1-abcde | {launcher.FAILURE_MARKER}{json.dumps('forged ' * 1_000_000)}\r\n")
    assert cleaner.failure is None  # longer than any report the launcher writes: not even decoded
    cleaner.write(f"p-algo-1-abcde | {launcher.FAILURE_MARKER}{json.dumps(launcher.bounded(HOSTILE_REASON * 100))}\r\n")
    keep_failure(cleaner.failure, tmp_path)
    kept = (tmp_path / "failure").read_text()
    assert_kept(kept, "AlgorithmError: red NUL ", cut="... (cut: ")
    assert len(launcher.bounded("x" * 10**6)) == launcher.FAILURE_LIMIT


def test_what_a_failing_script_wrote_into_the_failure_file_is_its_reason(tmp_path, monkeypatch):
    """As a SageMaker image's own train does: the script writes /opt/ml/output/failure and exits
    non-zero without an exception; that text is the job's reason (its start, printable), not an
    empty ErrorMessage. (An exception it ended with comes first: see the huge binary failure test.)"""
    from jupyter_trainer.backends.sagemaker import launcher

    monkeypatch.setattr(launcher, "BASE_DIR", str(tmp_path))
    (tmp_path / "output").mkdir()
    assert launcher.script_failure() == ""
    (tmp_path / "output" / "failure").write_bytes(b"channel 'training' is empty\x1b[2J\n" + b"x" * 10_000)
    said = launcher.script_failure()
    assert said.startswith("channel 'training' is empty") and "\x1b" not in said and len(said) <= launcher.FAILURE_LIMIT
    os.remove(tmp_path / "output" / "failure")
    os.mkfifo(tmp_path / "output" / "failure")  # a FIFO never blocks the launcher
    assert launcher.script_failure() == ""
    reason = launcher.failure_of(3, "channel 'training' is empty", ["python3", "train.py"])
    assert 'ExitCode 3\nErrorMessage "channel \'training\' is empty"' in reason


OWN_FAILURE_SCRIPT = """
import os, sys
os.makedirs("/opt/ml/output", exist_ok=True)
with open("/opt/ml/output/failure", "w") as handle:
    handle.write("channel 'training' is empty: nothing to train on")
sys.exit(3)
"""


def test_a_script_that_writes_its_own_failure_and_exits_has_that_reason_in_local_mode(docker_client, docker_image, home, tmp_path, monkeypatch):
    from jupyter_trainer.backends.sagemaker.sdk import sdk_major
    from jupyter_trainer.core.record import Status
    from jupyter_trainer.jobs.submit import submit_detached

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    output = tmp_path / "output"
    output.mkdir()
    spec = build_sagemaker_spec(OWN_FAILURE_SCRIPT, image_uri=TEST_IMAGE, role=ROLE, instance_type="local", output_path=f"file://{output}")
    job = submit_detached(spec, name=f"own-failure-v{sdk_major()}").job
    assert job.wait(timeout=300) is Status.FAILED and job.exit_code == 3, job.logs(tail=50)
    assert "ExitCode 3\nErrorMessage \"channel 'training' is empty: nothing to train on\"" in job.reason, job.reason
