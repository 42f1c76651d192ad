"""Runs the cell's script in a SageMaker training container as script mode would.

This file is shipped in the job's code channel and is the container's
entrypoint (`python3 /opt/ml/input/data/code/<this file>`). It stands alone:
the standard library only, Python 3.6 or later, nothing from jupyter_trainer,
so any image with python3 runs it. On each host it gives the script what
SageMaker's training toolkit gives a script-mode script:

* the `SM_*` environment, computed here from `/opt/ml/input/config/*.json`, so
  each host of a multi-instance job gets its own `SM_CURRENT_HOST`;
* the hyperparameters as `--key value` arguments (sorted, JSON-decoded), then
  the words given after `--` on the magic's line;
* `/opt/ml/code` as working directory, holding the script and `--source-dir`,
  whose `requirements.txt` is installed first;
* on failure, the error in `/opt/ml/output/failure`, which SageMaker reports as
  the job's FailureReason.
"""

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import sysconfig

CONFIG_NAME = "_jupyter_trainer.json"  # written beside this file: the script, interpreter and arguments
BASE_DIR = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")  # as the toolkit, for running outside SageMaker
ERROR_TAIL_BYTES = 64 * 1024  # the end of the script's stderr kept for the failure reason
FAILURE_LIMIT = 1024  # SageMaker keeps this much of the failure file as FailureReason
LOG_LEVEL_INFO = 20
FAILURE_MARKER = "jupyter_trainer: failure reason: "  # then the reason as JSON, one line: local mode reads it from the log


def path(*parts):
    return os.path.join(BASE_DIR, *parts)


def read_json(name, default):
    try:
        with open(path("input", "config", name)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def decoded(value):
    """A hyperparameter as the toolkit reads it: JSON if it parses, else the string itself."""
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def as_argument(value):
    """A decoded hyperparameter as the toolkit writes it into argv."""
    if isinstance(value, dict):
        return ",".join("%s=%s" % (key, item) for key, item in sorted(value.items()))
    return "" if value is None else str(value)


def cmd_args(hyperparameters):
    """`--key value` per hyperparameter, sorted by key (`-k` for a one-letter key)."""
    args = []
    for key in sorted(hyperparameters):
        args += ["--" + key if len(key) > 1 else "-" + key, as_argument(hyperparameters[key])]
    return args


def env_value(value):
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def count_gpus():
    try:
        listing = subprocess.check_output(["nvidia-smi", "--list-gpus"], stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError):
        return 0
    return sum(1 for line in listing.decode(errors="replace").splitlines() if line.startswith("GPU "))


def training_environment(config, code_dir):
    """The toolkit's environment, by its names (lower case, without `SM_`)."""
    everything = {key: decoded(value) for key, value in read_json("hyperparameters.json", {}).items()}
    framework = {key: value for key, value in everything.items() if key.startswith("sagemaker_")}
    hyperparameters = {key: value for key, value in everything.items() if key not in framework}
    resources = read_json("resourceconfig.json", {})
    hosts = resources.get("hosts") or ["algo-1"]
    current_host = resources.get("current_host") or hosts[0]
    groups = resources.get("instance_groups") or []
    current_group = resources.get("current_group_name", "homogeneousCluster")
    inputs = read_json("inputdataconfig.json", {})
    channels = {name: path("input", "data", name) for name in inputs}
    env = {
        "additional_framework_parameters": framework,
        "channel_input_dirs": channels,
        "current_host": current_host,
        "current_instance_group": current_group,
        "current_instance_group_hosts": next((g["hosts"] for g in groups if g.get("instance_group_name") == current_group), []),
        "current_instance_type": resources.get("current_instance_type", "local"),
        "distribution_hosts": list(hosts),
        "distribution_instance_groups": [],
        "framework_module": None,
        "hosts": hosts,
        "hyperparameters": hyperparameters,
        "input_config_dir": path("input", "config"),
        "input_data_config": inputs,
        "input_dir": path("input"),
        "instance_groups": [g.get("instance_group_name") for g in groups],
        "instance_groups_dict": {g.get("instance_group_name"): g for g in groups},
        "is_hetero": len(groups) > 1,
        "is_master": current_host == hosts[0],
        "is_modelparallel_enabled": None,
        "job_name": os.environ.get("TRAINING_JOB_NAME") or config.get("job_name"),
        "log_level": framework.get("sagemaker_container_log_level", LOG_LEVEL_INFO),
        "master_hostname": hosts[0],
        "model_dir": path("model"),
        "module_dir": config.get("module_dir") or code_dir,
        "module_name": config["script"][:-3] if config["script"].endswith(".py") else config["script"],
        "network_interface_name": resources.get("network_interface_name", "eth0"),
        "num_cpus": multiprocessing.cpu_count(),
        "num_gpus": count_gpus(),
        "output_data_dir": path("output", "data"),
        "output_dir": path("output"),
        "output_intermediate_dir": path("output", "intermediate"),
        "resource_config": resources,
        "user_entry_point": config["script"],
    }
    return env


def sm_variables(env):
    """The `SM_*` variables the toolkit sets, from its environment."""
    variables = {
        "hosts": env["hosts"],
        "network_interface_name": env["network_interface_name"],
        "hps": env["hyperparameters"],
        "user_entry_point": env["user_entry_point"],
        "framework_params": env["additional_framework_parameters"],
        "resource_config": env["resource_config"],
        "input_data_config": env["input_data_config"],
        "output_data_dir": env["output_data_dir"],
        "channels": sorted(env["channel_input_dirs"]),
        "current_host": env["current_host"],
        "current_instance_type": env["current_instance_type"],
        "current_instance_group": env["current_instance_group"],
        "current_instance_group_hosts": env["current_instance_group_hosts"],
        "instance_groups": env["instance_groups"],
        "instance_groups_dict": env["instance_groups_dict"],
        "distribution_instance_groups": env["distribution_instance_groups"],
        "is_hetero": env["is_hetero"],
        "module_name": env["module_name"],
        "log_level": env["log_level"],
        "framework_module": env["framework_module"],
        "input_dir": env["input_dir"],
        "input_config_dir": env["input_config_dir"],
        "output_dir": env["output_dir"],
        "num_cpus": env["num_cpus"],
        "num_gpus": env["num_gpus"],
        "model_dir": env["model_dir"],
        "module_dir": env["module_dir"],
        "training_env": env,
        "user_args": cmd_args(env["hyperparameters"]),
        "output_intermediate_dir": env["output_intermediate_dir"],
    }
    for name, directory in env["channel_input_dirs"].items():
        variables["channel_" + name] = directory
    for key, value in env["hyperparameters"].items():
        variables["hp_" + key] = value
    return {"SM_" + key.upper(): env_value(value) for key, value in variables.items()}


def copy_code(channel_dir, code_dir):
    """The code channel's files into /opt/ml/code (which may exist already, from the image)."""
    for root, dirs, files in os.walk(channel_dir):
        target = os.path.join(code_dir, os.path.relpath(root, channel_dir))
        if not os.path.isdir(target):
            os.makedirs(target)
        for name in files:
            if root == channel_dir and name in (os.path.basename(__file__), CONFIG_NAME):
                continue
            shutil.copy2(os.path.join(root, name), os.path.join(target, name))


def install_requirements(code_dir):
    """`pip install -r requirements.txt`, as the toolkit does, into the image's Python. Debian's
    python3 refuses that outside a venv (PEP 668); this container is the job's own and is thrown
    away after it, so the refusal is overridden."""
    requirements = os.path.join(code_dir, "requirements.txt")
    if not os.path.isfile(requirements):
        return None
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-r", requirements]
    if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")):
        command.append("--break-system-packages")
    print("jupyter_trainer: installing requirements.txt: " + " ".join(command[1:]), flush=True)
    env = dict(os.environ, PIP_ROOT_USER_ACTION="ignore")
    try:
        code = subprocess.call(command, cwd=code_dir, env=env)
    except OSError as error:
        return "InstallRequirementsError: cannot run %s (%s)" % (sys.executable, error)
    if code != 0:
        return "InstallRequirementsError:\nExitCode %d\nCommand \"%s\"" % (code, " ".join(command))
    return None


def error_message(stderr_tail):
    """The end of a Python traceback, the exception first: what the failure reason should say."""
    lines = [line for line in stderr_tail.decode("utf-8", "replace").splitlines() if line.strip()]
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=None)
    if start is None:
        return "\n".join(lines[-5:])
    traceback = lines[start:]
    frames = [line.strip() for line in traceback if line.lstrip().startswith('File "')]
    return "\n".join([traceback[-1]] + frames[-3:])


def write_failure(message):
    """The failure file SageMaker reads, and a line in the log that says the same (local mode reads
    no failure file: it finds the reason there)."""
    print(FAILURE_MARKER + json.dumps(message[:FAILURE_LIMIT]), file=sys.stderr, flush=True)
    directory = path("output")
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory)
        with open(os.path.join(directory, "failure"), "w") as handle:
            handle.write(message[:FAILURE_LIMIT * 4])
    except OSError as error:
        print("jupyter_trainer: cannot write the failure file (%s)" % error, file=sys.stderr, flush=True)


MASTER_PORT = "29500"  # torchrun's own default
TOOLKIT_MASTER_PORT = "7777"  # what SageMaker's PyTorch containers set for a script's own init_process_group


def interpreter_for(interpreter, env):
    """The interpreter's words; torchrun on a job of several hosts gets the node count, this host's
    rank and the first host as master (unless the user gave them), so a multi-node DDP script runs
    unchanged."""
    words = list(interpreter)
    is_torchrun = os.path.basename(words[0]) == "torchrun" or words[1:3] == ["-m", "torch.distributed.run"]
    hosts = env["hosts"]
    if not is_torchrun or len(hosts) < 2:
        return words
    given = {word.split("=", 1)[0].replace("-", "_") for word in words if word.startswith("--")}
    fill = [("--nnodes", str(len(hosts))), ("--node_rank", str(hosts.index(env["current_host"]))),
            ("--master_addr", env["master_hostname"]), ("--master_port", MASTER_PORT)]  # fmt: skip
    at = 3 if words[1:3] == ["-m", "torch.distributed.run"] else 1
    added = [word for flag, value in fill if flag.replace("-", "_") not in given for word in (flag, value)]
    if "--rdzv_endpoint" in given or "--rdzv_backend" in given:
        return words  # the user set up the rendezvous
    return words[:at] + added + words[at:]


def run(command, env, cwd):
    """Run the script, its stderr passed through and its end kept; TERM and INT are passed on
    (SageMaker stops a job with TERM to the entrypoint, which is this process)."""
    child = subprocess.Popen(command, env=env, cwd=cwd, stderr=subprocess.PIPE, start_new_session=True)

    def forward(signum, frame):
        stopped.append(signum)
        try:
            os.killpg(child.pid, signum)
        except OSError:
            pass

    stopped = []
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    tail = b""
    stream = child.stderr.fileno()
    while True:
        try:
            chunk = os.read(stream, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        os.write(2, chunk)
        tail = (tail + chunk)[-ERROR_TAIL_BYTES:]
    return child.wait(), tail, bool(stopped)


def main():
    channel_dir = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(channel_dir, CONFIG_NAME)) as handle:
        config = json.load(handle)
    code_dir = path("code")
    copy_code(channel_dir, code_dir)
    env = training_environment(config, code_dir)
    variables = sm_variables(env)
    os.environ.update(variables)
    if len(env["hosts"]) > 1:  # as SageMaker's PyTorch containers do, for env:// initialization
        os.environ.setdefault("MASTER_ADDR", env["master_hostname"])
        os.environ.setdefault("MASTER_PORT", TOOLKIT_MASTER_PORT)
    problem = install_requirements(code_dir)
    if problem:
        write_failure(problem)
        return 1
    command = interpreter_for(config["interpreter"], env) + [config["script"]] + cmd_args(env["hyperparameters"]) + list(config.get("args", []))
    child_env = dict(os.environ, PYTHONUNBUFFERED=os.environ.get("PYTHONUNBUFFERED", "1"))
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [code_dir, os.environ.get("PYTHONPATH")]))
    try:
        code, tail, stopped = run(command, child_env, code_dir)
    except OSError as error:
        write_failure("ExecuteUserScriptError: cannot run %s (%s)" % (command[0], error))
        return 127
    if code != 0 and not stopped:  # a stopped job is reported as stopped, not failed
        shown = code if code > 0 else 128 - code  # killed by a signal: as a shell reports it
        write_failure(
            'AlgorithmError: ExecuteUserScriptError:\nExitCode %d\nErrorMessage "%s"\nCommand "%s"'
            % (shown, error_message(tail), " ".join(command))
        )
        return shown
    return 0 if code == 0 else 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
