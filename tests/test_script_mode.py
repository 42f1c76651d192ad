"""The SageMaker launcher gives a script what SageMaker's training toolkit gives a script-mode script.

The launcher is run here as a training container runs it, on this machine, with
SAGEMAKER_BASE_DIR standing for /opt/ml (as the toolkit allows); the local-mode
tests in test_sagemaker.py run it in real containers.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_trainer.backends.sagemaker import launcher
from jupyter_trainer.backends.sagemaker.local import ComposeLogCleaner

PROBE = r"""
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "files": sorted(os.listdir(".")),
                  "env": {k: v for k, v in os.environ.items() if k.startswith("SM_")}}))
"""


def container(tmp_path, script, hyperparameters=None, hosts=("algo-1",), current="algo-1", channels=("train",), args=(), interpreter=("python3",)):
    """An /opt/ml tree as SageMaker lays it out, with the launcher in the code channel."""
    base = tmp_path / "opt-ml"
    config = base / "input" / "config"
    code = base / "input" / "data" / "code"
    config.mkdir(parents=True)
    code.mkdir(parents=True)
    for channel in channels:
        (base / "input" / "data" / channel).mkdir()
    (code / "train_script.py").write_text(script)
    (code / "_jupyter_trainer_launch.py").write_text(Path(launcher.__file__).read_text())
    launch = {"script": "train_script.py", "interpreter": list(interpreter), "args": list(args), "job_name": "job-1"}
    (code / launcher.CONFIG_NAME).write_text(json.dumps(launch))
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters or {}))
    resources = {"current_host": current, "hosts": list(hosts), "network_interface_name": "eth0",
                 "current_instance_type": "ml.m5.xlarge", "current_group_name": "homogeneousCluster",
                 "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.m5.xlarge", "hosts": list(hosts)}]}  # fmt: skip
    (config / "resourceconfig.json").write_text(json.dumps(resources))
    inputs = {c: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"} for c in (*channels, "code")}
    (config / "inputdataconfig.json").write_text(json.dumps(inputs))
    return base


def launch(base, **kwargs):
    env = {key: value for key, value in os.environ.items() if not key.startswith("SM_")}
    return subprocess.run(
        [sys.executable, str(base / "input" / "data" / "code" / "_jupyter_trainer_launch.py")],
        env={**env, "SAGEMAKER_BASE_DIR": str(base)}, capture_output=True, text=True, timeout=60, **kwargs,
    )  # fmt: skip


def probe(tmp_path, **kwargs):
    base = container(tmp_path, PROBE, **kwargs)
    result = launch(base)
    assert result.returncode == 0, result.stderr
    return base, json.loads(result.stdout.splitlines()[-1])


def test_hyperparameters_reach_argv_as_the_toolkit_passes_them(tmp_path):
    # SageMaker keeps every hyperparameter as a string; the toolkit JSON-decodes each, sorts by key,
    # and writes `--key value` (`-k` for one letter, a dict as k=v pairs); framework ones are not passed
    hps = {"lr": "0.01", "epochs": "3", "b": "64", "use-cuda": "true", "name": "resnet 50", "sched": '{"step": 5, "gamma": 0.5}',
           "sagemaker_program": "train.py", "sagemaker_mpi_enabled": "true", "_tuning_objective_metric": "validation:accuracy"}  # fmt: skip
    _, seen = probe(tmp_path, hyperparameters=hps, args=["--extra", "two words"])
    assert seen["argv"] == ["-b", "64", "--epochs", "3", "--lr", "0.01", "--name", "resnet 50", "--sched", "gamma=0.5,step=5",
                            "--use-cuda", "True", "--extra", "two words"]  # fmt: skip
    env = seen["env"]
    assert json.loads(env["SM_HPS"]) == {"lr": 0.01, "epochs": 3, "b": 64, "use-cuda": True, "name": "resnet 50", "sched": {"step": 5, "gamma": 0.5}}
    assert env["SM_HP_LR"] == "0.01" and env["SM_HP_EPOCHS"] == "3" and env["SM_HP_NAME"] == "resnet 50"
    assert env["SM_HP_USE-CUDA"] == "true" and json.loads(env["SM_HP_SCHED"]) == {"gamma": 0.5, "step": 5}
    assert json.loads(env["SM_USER_ARGS"]) == seen["argv"][:-2]  # the hyperparameters' arguments
    # what the SDK and the tuner add for the toolkit is not the script's; framework flags are kept aside
    assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {"sagemaker_mpi_enabled": True}


def test_the_sm_environment_is_computed_on_each_host(tmp_path):
    hosts = ("algo-1", "algo-2")
    base, seen = probe(tmp_path, hosts=hosts, current="algo-2", channels=("train", "validation"))
    env = seen["env"]
    root = str(base)
    expected = {
        "SM_MODEL_DIR": f"{root}/model", "SM_OUTPUT_DATA_DIR": f"{root}/output/data", "SM_OUTPUT_DIR": f"{root}/output",
        "SM_OUTPUT_INTERMEDIATE_DIR": f"{root}/output/intermediate", "SM_INPUT_DIR": f"{root}/input",
        "SM_INPUT_CONFIG_DIR": f"{root}/input/config", "SM_CHANNEL_TRAIN": f"{root}/input/data/train",
        "SM_CHANNEL_VALIDATION": f"{root}/input/data/validation", "SM_CURRENT_HOST": "algo-2",
        "SM_CURRENT_INSTANCE_TYPE": "ml.m5.xlarge", "SM_NETWORK_INTERFACE_NAME": "eth0", "SM_NUM_GPUS": "0",
        "SM_NUM_CPUS": str(os.cpu_count()), "SM_USER_ENTRY_POINT": "train_script.py", "SM_MODULE_NAME": "train_script",
        "SM_MODULE_DIR": f"{root}/code", "SM_LOG_LEVEL": "20", "SM_CURRENT_INSTANCE_GROUP": "homogeneousCluster",
    }  # fmt: skip
    assert {key: env.get(key) for key in expected} == expected
    assert json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2"] and json.loads(env["SM_CHANNELS"]) == ["train", "validation"]
    assert json.loads(env["SM_RESOURCE_CONFIG"])["current_host"] == "algo-2"
    assert "MASTER_ADDR" not in env  # (only SM_* are probed; MASTER_* are checked below)
    assert set(json.loads(env["SM_INPUT_DATA_CONFIG"])) == {"train", "validation"}
    training = json.loads(env["SM_TRAINING_ENV"])
    assert training["current_host"] == "algo-2" and training["master_hostname"] == "algo-1" and training["is_master"] is False
    assert training["channel_input_dirs"]["train"] == f"{root}/input/data/train" and training["job_name"] == "job-1"
    # the script runs in /opt/ml/code, which holds it (and --source-dir's files), not the launcher's
    assert seen["cwd"] == f"{root}/code" and seen["files"] == ["train_script.py"]


def test_source_dir_files_are_beside_the_script_and_importable(tmp_path):
    base = container(tmp_path, "import helpers, pkg.mod\nprint(helpers.VALUE, pkg.mod.NAME)\n")
    code = base / "input" / "data" / "code"
    (code / "helpers.py").write_text("VALUE = 42\n")
    (code / "pkg").mkdir()
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "mod.py").write_text("NAME = 'nested'\n")
    result = launch(base)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "42 nested"


def test_an_uncaught_exception_becomes_the_failure_reason(tmp_path):
    script = "import sys\ndef train(lr):\n    raise ValueError(f'learning rate {lr} is too high')\nprint('starting')\ntrain(0.5)\n"
    base = container(tmp_path, script, hyperparameters={"lr": "0.5"})
    result = launch(base)
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr  # the log keeps the whole traceback
    failure = (base / "output" / "failure").read_text()
    assert failure.startswith('AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: learning rate 0.5 is too high')
    assert f'File "{base}/code/train_script.py", line 3, in train' in failure
    assert 'Command "python3 train_script.py --lr 0.5"' in failure
    marker = [line for line in result.stderr.splitlines() if line.startswith(launcher.FAILURE_MARKER)]
    assert [json.loads(line[len(launcher.FAILURE_MARKER) :]) for line in marker] == [failure]


def test_exit_codes_pass_through_and_a_clean_exit_writes_no_failure(tmp_path):
    base = container(tmp_path, "raise SystemExit(3)\n")
    assert launch(base).returncode == 3
    assert "ExitCode 3" in (base / "output" / "failure").read_text()
    clean = container(tmp_path / "clean", "print('ok')\n")
    assert launch(clean).returncode == 0 and not (clean / "output" / "failure").exists()


def test_a_missing_interpreter_is_a_failure_reason_not_a_crash(tmp_path):
    base = container(tmp_path, "print(1)\n", interpreter=("no-such-python",))
    result = launch(base)
    assert result.returncode == 127 and "cannot run no-such-python" in (base / "output" / "failure").read_text()


def test_term_reaches_the_script_and_a_stopped_job_is_no_failure(tmp_path):
    script = (
        "import signal, sys, time\n"
        "def stop(*_):\n    print('saving checkpoint', flush=True)\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\nprint('training', flush=True)\ntime.sleep(60)\n"
    )
    base = container(tmp_path, script)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SM_")}
    process = subprocess.Popen(
        [sys.executable, str(base / "input" / "data" / "code" / "_jupyter_trainer_launch.py")],
        env={**env, "SAGEMAKER_BASE_DIR": str(base)}, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout.readline().strip() == "training"
    process.send_signal(signal.SIGTERM)  # SageMaker's StopTrainingJob
    assert process.wait(timeout=30) == 0
    assert process.stdout.read().strip() == "saving checkpoint"
    assert not (base / "output" / "failure").exists()


def test_a_huge_stderr_keeps_only_its_end_for_the_reason(tmp_path):
    script = "import sys\nfor i in range(200000):\n    sys.stderr.write('noise %d\\n' % i)\nraise RuntimeError('the real cause')\n"
    base = container(tmp_path, script)
    started = time.monotonic()
    result = launch(base)
    assert result.returncode == 1 and time.monotonic() - started < 60
    failure = (base / "output" / "failure").read_text()
    assert 'ErrorMessage "RuntimeError: the real cause' in failure and len(failure) <= 4 * launcher.FAILURE_LIMIT


class Lines:
    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass


@pytest.mark.parametrize(
    "raw, one_host, two_hosts",
    [
        ("6ev5m743i1-algo-1-gg6zp | epoch 1 loss: 0.5\r", "epoch 1 loss: 0.5", "[algo-1] epoch 1 loss: 0.5"),
        ("tmpabc_algo-2-x7k2q_1  | step 3\r", "step 3", "[algo-2] step 3"),
        ("algo-2_1  | from SDK v3\r", "from SDK v3", "[algo-2] from SDK v3"),
        ("\x1b[36mproj-algo-1-abcde |\x1b[0m coloured prefix", "coloured prefix", "[algo-1] coloured prefix"),
        ("proj-algo-1-abcde | \x1b[1mthe script's own colours stay\x1b[0m", "\x1b[1mthe script's own colours stay\x1b[0m",
         "[algo-1] \x1b[1mthe script's own colours stay\x1b[0m"),
        ("proj-algo-1-abcde | 10%|#  | 1/10\r 20%|## | 2/10\r", "10%|#  | 1/10\r 20%|## | 2/10", "[algo-1] 10%|#  | 1/10\r 20%|## | 2/10"),
        ("INFO:sagemaker.local.image:docker command: docker-compose up", "INFO:sagemaker.local.image:docker command: docker-compose up",
         "INFO:sagemaker.local.image:docker command: docker-compose up"),
        ("Attaching to proj-algo-1-abcde", "Attaching to proj-algo-1-abcde", "Attaching to proj-algo-1-abcde"),
        ("\x1b[36mproj-algo-2-abcde exited with code 1", "proj-algo-2-abcde exited with code 1", "proj-algo-2-abcde exited with code 1"),
        ("\x1b[0mAborting on container exit...", "Aborting on container exit...", "Aborting on container exit..."),
    ],
)  # fmt: skip
def test_local_mode_lines_read_as_cloudwatch_would(raw, one_host, two_hosts):
    for hosts, expected in ((1, one_host), (2, two_hosts)):
        out = Lines()
        cleaner = ComposeLogCleaner(out, hosts)
        for piece in (raw[:7], raw[7:], "\n"):  # lines arrive in pieces
            cleaner.write(piece)
        assert out.text == expected + "\n"


def test_the_cleaner_finds_the_first_failure_reason_and_ends_an_unended_line():
    out = Lines()
    cleaner = ComposeLogCleaner(out, 2)
    reason = 'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: x"'
    cleaner.write(f"p-algo-2-abcde | {launcher.FAILURE_MARKER}{json.dumps(reason)}\r\n")
    cleaner.write(f"p-algo-1-abcde | {launcher.FAILURE_MARKER}{json.dumps('second')}\r\n")
    cleaner.write(f"p-algo-1-abcde | {launcher.FAILURE_MARKER}not json\r\n")
    cleaner.write("p-algo-1-abcde | no newline at the end")
    cleaner.close_line()
    assert cleaner.failure == reason
    assert out.text.endswith("[algo-1] no newline at the end\n")


def test_requirements_that_cannot_be_installed_are_the_failure_reason(tmp_path):
    # requirements.txt that cannot be installed: one line in the failure reason, the script never runs
    base = container(tmp_path, "print('must not run')\n")
    (base / "input" / "data" / "code" / "requirements.txt").write_text("--no-index\nno-such-package-anywhere==1.0\n")
    result = launch(base)
    assert result.returncode == 1 and "must not run" not in result.stdout
    assert (base / "output" / "failure").read_text().startswith("InstallRequirementsError:")


def fake_torchrun(tmp_path):
    """A `torchrun` on PATH that prints the words it was given, then runs the script."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torchrun = bin_dir / "torchrun"
    torchrun.write_text(f"#!{sys.executable}\nimport json, subprocess, sys\nprint('TORCHRUN', json.dumps(sys.argv[1:]), flush=True)\n")
    torchrun.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("current, rank", [("algo-1", "0"), ("algo-3", "2")])
def test_torchrun_on_several_hosts_gets_nodes_rank_and_master(tmp_path, current, rank):
    base = container(tmp_path, "print(1)\n", hosts=("algo-1", "algo-2", "algo-3"), current=current,
                     interpreter=("torchrun", "--nproc_per_node", "2"), hyperparameters={"epochs": "2"})  # fmt: skip
    result = launch_with(base, fake_torchrun(tmp_path))
    argv = json.loads(result.stdout.split("TORCHRUN ", 1)[1].splitlines()[0])
    assert argv == ["--nnodes", "3", "--node_rank", rank, "--master_addr", "algo-1", "--master_port", "29500",
                    "--nproc_per_node", "2", "train_script.py", "--epochs", "2"]  # fmt: skip


def test_torchrun_keeps_what_the_user_set_and_one_host_gets_nothing(tmp_path):
    base = container(tmp_path, "print(1)\n", hosts=("algo-1", "algo-2"), current="algo-2", interpreter=("torchrun", "--master_port=1234", "--nnodes", "2"))
    argv = json.loads(launch_with(base, fake_torchrun(tmp_path)).stdout.split("TORCHRUN ", 1)[1].splitlines()[0])
    assert argv == ["--node_rank", "1", "--master_addr", "algo-1", "--master_port=1234", "--nnodes", "2", "train_script.py"]
    single = container(tmp_path / "one", "print(1)\n", interpreter=("torchrun", "--nproc_per_node", "2"))
    argv = json.loads(launch_with(single, fake_torchrun(tmp_path / "one")).stdout.split("TORCHRUN ", 1)[1].splitlines()[0])
    assert argv == ["--nproc_per_node", "2", "train_script.py"]


def launch_with(base, env):
    env = {key: value for key, value in env.items() if not key.startswith("SM_")}
    return subprocess.run(
        [sys.executable, str(base / "input" / "data" / "code" / "_jupyter_trainer_launch.py")],
        env={**env, "SAGEMAKER_BASE_DIR": str(base)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_several_hosts_get_the_master_address_as_sagemakers_pytorch_containers_set_it(tmp_path):
    script = "import os\nprint(os.environ.get('MASTER_ADDR'), os.environ.get('MASTER_PORT'))\n"
    two = container(tmp_path, script, hosts=("algo-1", "algo-2"), current="algo-2")
    assert launch(two).stdout.strip() == "algo-1 7777"
    one = container(tmp_path / "one", script)
    assert launch(one).stdout.strip() == "None None"


# -- what a hostile job or an unlucky user does to the launcher --------------------------------


def test_what_the_script_leaves_running_does_not_keep_the_job_alive(tmp_path):
    # a background server holding stdout and stderr open: the job ends when the script does
    script = "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\nprint('done', flush=True)\n"
    base = container(tmp_path, script)
    started = time.monotonic()
    result = launch(base)
    assert result.returncode == 0 and result.stdout.strip() == "done"
    assert time.monotonic() - started < 20


def test_output_leaves_the_container_as_valid_utf8(tmp_path):
    # local mode's SDK decodes the container's output strictly: one bad byte would end its reading
    script = "import os, sys\nos.write(1, b'out \\xff\\xfe end\\n')\nos.write(2, b'err \\xc3 end\\n')\nprint('caf\\u00e9')\n"
    base = container(tmp_path, script)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SM_")}
    result = subprocess.run([sys.executable, str(base / "input" / "data" / "code" / "_jupyter_trainer_launch.py")],
                            env={**env, "SAGEMAKER_BASE_DIR": str(base)}, capture_output=True, timeout=60)  # fmt: skip
    assert result.returncode == 0
    assert result.stdout.decode("utf-8") == "out \ufffd\ufffd end\ncafé\n"
    assert result.stderr.decode("utf-8") == "err \ufffd end\n"


def test_the_failure_marker_starts_its_own_line(tmp_path):
    base = container(tmp_path, "import sys\nsys.stderr.write('no newline at the end')\nsys.stderr.flush()\nraise SystemExit(2)\n")
    result = launch(base)
    assert result.returncode == 2
    assert "no newline at the end\n" + launcher.FAILURE_MARKER in result.stderr


TORCHRUN_STDERR = """Traceback (most recent call last):
  File "/opt/ml/code/train_script.py", line 9, in <module>
    main()
  File "/opt/ml/code/train_script.py", line 6, in main
    raise ValueError("bad batch size 0:\\nit must be positive")
ValueError: bad batch size 0:
it must be positive
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 7)
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 33, in <module>
    sys.exit(load_entry_point('torch', 'console_scripts', 'torchrun')())
  File "/usr/lib/python3/dist-packages/torch/distributed/run.py", line 753, in run
    elastic_launch(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train_script.py FAILED
------------------------------------------------------------
wandb: Synced 5 runs
"""


def test_the_reason_is_the_scripts_exception_not_torchruns_or_the_last_line():
    message = launcher.error_message(TORCHRUN_STDERR.encode())
    assert message.splitlines()[:2] == ["ValueError: bad batch size 0:", "it must be positive"]
    assert 'File "/opt/ml/code/train_script.py", line 6, in main' in message and "ChildFailedError" not in message


@pytest.mark.parametrize(
    "interpreter", [("torchrun", "--standalone", "--nproc_per_node", "2"), ("torchrun", "--rdzv-endpoint=algo-1:29400", "--rdzv-backend", "c10d"),
                    ("torchrun", "--rdzv_endpoint", "algo-1:29400")],
)  # fmt: skip
def test_torchrun_with_a_rendezvous_of_its_own_is_left_alone(tmp_path, interpreter):
    base = container(tmp_path, "print(1)\n", hosts=("algo-1", "algo-2"), current="algo-2", interpreter=interpreter)
    argv = json.loads(launch_with(base, fake_torchrun(tmp_path)).stdout.split("TORCHRUN ", 1)[1].splitlines()[0])
    assert argv == [*interpreter[1:], "train_script.py"]


def fake_python(tmp_path, pip_seconds=0):
    """A `python3-fake` interpreter: as pip it says so (and takes its time); else it runs the script."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    python = bin_dir / "python3-fake"
    python.write_text(
        f"#!/bin/sh\nif [ \"$1\" = -m ] && [ \"$2\" = pip ]; then echo \"PIP $0\"; sleep {pip_seconds}; exit 0; fi\n"
        f"if [ \"$1\" = -c ]; then exit 1; fi\nexec {sys.executable} \"$@\"\n"
    )
    python.chmod(0o755)
    return str(python)


def test_requirements_go_to_the_python_that_runs_the_script(tmp_path):
    python = fake_python(tmp_path)
    base = container(tmp_path, "print('script ran')\n", interpreter=(python,))
    (base / "input" / "data" / "code" / "requirements.txt").write_text("anything\n")
    result = launch(base)
    assert result.returncode == 0 and f"PIP {python}" in result.stdout and "script ran" in result.stdout


def test_a_stop_while_requirements_install_ends_the_job_before_the_script(tmp_path):
    python = fake_python(tmp_path, pip_seconds=30)
    base = container(tmp_path, "print('script ran')\n", interpreter=(python,))
    (base / "input" / "data" / "code" / "requirements.txt").write_text("anything\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SM_")}
    process = subprocess.Popen([sys.executable, str(base / "input" / "data" / "code" / "_jupyter_trainer_launch.py")],
                               env={**env, "SAGEMAKER_BASE_DIR": str(base)}, stdout=subprocess.PIPE, text=True)  # fmt: skip
    while "PIP" not in process.stdout.readline():
        pass
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 143 and time.monotonic() - started < 10
    assert "script ran" not in process.stdout.read() and not (base / "output" / "failure").exists()


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda base: (base / "input" / "config" / "hyperparameters.json").write_text("{not json"), "cannot read hyperparameters.json"),
        (lambda base: (base / "input" / "config" / "resourceconfig.json").write_text('["algo-1"]'), "resourceconfig.json holds a list"),
        (lambda base: (base / "input" / "config" / "resourceconfig.json").write_text('{"hosts": ["algo-1"], "current_host": "algo-9"}'),
         "names no current host"),
        (lambda base: (base / "input" / "data" / "code" / launcher.CONFIG_NAME).write_text("[]"), "is not what this launcher wrote"),
        (lambda base: (base / "code").write_text("not a directory"), "Error: [Errno"),  # /opt/ml/code cannot be made
    ],
)  # fmt: skip
def test_the_launchers_own_trouble_is_the_failure_reason_not_a_traceback(tmp_path, damage, says):
    base = container(tmp_path, "print('must not run')\n")
    damage(base)
    result = launch(base)
    assert result.returncode == 1 and "must not run" not in result.stdout and "Traceback" not in result.stderr
    failure = (base / "output" / "failure").read_text()
    assert failure.startswith("AlgorithmError: jupyter_trainer launcher: ") and says in failure


def test_a_killed_script_is_said_to_be_out_of_memory_most_likely(tmp_path):
    base = container(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert launch(base).returncode == 137
    assert 'ExitCode 137\nErrorMessage "OutOfMemory: Process killed by SIGKILL' in (base / "output" / "failure").read_text()


def test_pips_own_error_is_in_the_reason(tmp_path):
    base = container(tmp_path, "print('must not run')\n")
    (base / "input" / "data" / "code" / "requirements.txt").write_text("--no-index\nno-such-package-anywhere==1.0\n")
    assert launch(base).returncode == 1
    failure = (base / "output" / "failure").read_text()
    assert failure.startswith("InstallRequirementsError:") and "no-such-package-anywhere" in failure.split("ErrorMessage", 1)[1]


def test_a_script_cannot_forge_the_reason_its_launcher_gives():
    out = Lines()
    cleaner = ComposeLogCleaner(out, 1)
    cleaner.write(f'p-algo-1-abcde | {launcher.FAILURE_MARKER}"everything is fine"\r\n')
    cleaner.write(f"p-algo-1-abcde | {launcher.FAILURE_MARKER}{json.dumps('ValueError: the real one')}\r\n")
    assert cleaner.failure == "ValueError: the real one"


def test_a_long_line_in_many_pieces_is_joined_once():
    out = Lines()
    cleaner = ComposeLogCleaner(out, 1)
    started = time.monotonic()
    for _ in range(200_000):
        cleaner.write("x" * 50)
    cleaner.write("\n")
    assert len(out.text) == 10_000_001 and time.monotonic() - started < 30


def test_the_distribution_hosts_and_the_master_follow_the_toolkits_rules(tmp_path):
    hosts = ("algo-1", "algo-2")
    _, plain = probe(tmp_path, hosts=hosts, current="algo-2")
    training = json.loads(plain["env"]["SM_TRAINING_ENV"])
    assert (training["distribution_hosts"], training["distribution_instance_groups"], training["master_hostname"]) == ([], [], "algo-1")
    _, ddp = probe(tmp_path / "ddp", hosts=hosts, current="algo-2", hyperparameters={"sagemaker_pytorch_ddp_enabled": "true"})
    training = json.loads(ddp["env"]["SM_TRAINING_ENV"])
    assert training["distribution_hosts"] == ["algo-1", "algo-2"] and training["distribution_instance_groups"] == ["homogeneousCluster"]


def test_the_toolkits_plain_variables_are_exported_too(tmp_path):
    base = container(tmp_path, "import os\nprint(os.environ['CURRENT_HOST'], os.environ['SAGEMAKER_JOB_NAME'])\n", hosts=("algo-1", "algo-2"), current="algo-2")
    assert launch(base).stdout.strip() == "algo-2 job-1"
