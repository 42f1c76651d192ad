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

import codecs
import json
import multiprocessing
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import time

CONFIG_NAME = "_jupyter_trainer.json"  # written beside this file: the script, interpreter and arguments
BASE_DIR = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")  # as the toolkit, for running outside SageMaker
ERROR_TAIL_BYTES = 64 * 1024  # the end of the script's stderr kept for the failure reason
FAILURE_LIMIT = 1024  # SageMaker keeps this much of the failure file as FailureReason
LOG_LEVEL_INFO = 20
DISTRIBUTION_FLAGS = ("sagemaker_mpi_enabled", "sagemaker_parameter_server_enabled",
                      "sagemaker_distributed_dataparallel_enabled", "sagemaker_pytorch_ddp_enabled",
                      "sagemaker_pytorch_xla_multi_worker_enabled",
                      "sagemaker_multi_worker_mirrored_strategy_enabled")  # fmt: skip
DRAIN_SECONDS = 1.0  # after the script exits, how long what it left running may still hold its output
# Hyperparameters SageMaker's SDK and tuner add for the toolkit, not for the script (params.py)
RESERVED_HYPERPARAMETERS = {
    "sagemaker_program", "sagemaker_submit_directory", "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_container_log_level", "sagemaker_job_name", "sagemaker_region", "sagemaker_s3_output",
    "_tuning_objective_metric", "default_user_module_name",
}  # fmt: skip
# then the reason as JSON, one line: local mode reads it from the log
FAILURE_MARKER = "jupyter_trainer: failure reason: "


def path(*parts):
    return os.path.join(BASE_DIR, *parts)


class LaunchError(Exception):
    """Something the launcher itself cannot do: the job fails with this as its reason."""


def read_json(name, default):
    """A config file SageMaker writes (a JSON object); a missing one is `default`, an unreadable one an error."""
    try:
        with open(path("input", "config", name)) as handle:
            value = json.load(handle)
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as error:
        raise LaunchError("cannot read %s (%s)" % (name, error))
    if not isinstance(value, dict):
        raise LaunchError("%s holds a %s, not a dict" % (name, type(value).__name__))
    return value


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
    """`--key value` per hyperparameter, sorted by key (`-k` for a one-letter key, nothing for an empty one)."""
    args = []
    for key in sorted(hyperparameters):
        name = "--" + key if len(key) > 1 else "-" + key if key else ""
        args += [name, as_argument(hyperparameters[key])]
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


def training_environment(config, code_dir, code_channel):
    """The toolkit's environment, by its names (lower case, without `SM_`)."""
    everything = {str(key): decoded(value) for key, value in read_json("hyperparameters.json", {}).items()}
    toolkit = {
        key: value
        for key, value in everything.items()
        if key.startswith("sagemaker_") or key in RESERVED_HYPERPARAMETERS
    }
    framework = {key: value for key, value in toolkit.items() if key not in RESERVED_HYPERPARAMETERS}
    hyperparameters = {key: value for key, value in everything.items() if key not in toolkit}
    resources = read_json("resourceconfig.json", {})
    hosts = resources.get("hosts") or ["algo-1"]
    current_host = resources.get("current_host") or hosts[0]
    if not isinstance(hosts, list) or not all(isinstance(host, str) for host in hosts) or current_host not in hosts:
        raise LaunchError("resourceconfig.json names no current host among its hosts")
    groups = resources.get("instance_groups") or []
    current_group = resources.get("current_group_name", "homogeneousCluster")
    # the code channel is how the script arrived, not data (script mode ships code another way)
    inputs = {name: value for name, value in read_json("inputdataconfig.json", {}).items() if name != code_channel}
    channels = {name: path("input", "data", name) for name in inputs}
    # the hosts a distribution strategy spans: the current group's when one is asked for; without
    # instance groups (local mode) every host; the master is the first of them
    distributed = any(framework.get(flag) for flag in DISTRIBUTION_FLAGS)
    distribution_groups = [current_group] if groups and distributed else []
    if groups:
        distribution_hosts = [
            host for g in groups if g.get("instance_group_name") in distribution_groups for host in g.get("hosts", [])
        ]
    else:
        distribution_hosts = list(hosts)
    master = (distribution_hosts or hosts)[0]
    env = {
        "additional_framework_parameters": framework,
        "channel_input_dirs": channels,
        "current_host": current_host,
        "current_instance_group": current_group,
        "current_instance_group_hosts": next(
            (g["hosts"] for g in groups if g.get("instance_group_name") == current_group), []
        ),
        "current_instance_type": resources.get("current_instance_type", "local"),
        "distribution_hosts": distribution_hosts,
        "distribution_instance_groups": distribution_groups,
        "framework_module": None,
        "hosts": hosts,
        "hyperparameters": hyperparameters,
        "input_config_dir": path("input", "config"),
        "input_data_config": inputs,
        "input_dir": path("input"),
        "instance_groups": [g.get("instance_group_name") for g in groups],
        "instance_groups_dict": {g.get("instance_group_name"): g for g in groups},
        "is_hetero": len(groups) > 1,
        "is_master": current_host == master,
        "is_modelparallel_enabled": None,
        "job_name": os.environ.get("TRAINING_JOB_NAME") or config.get("job_name"),
        "log_level": framework.get("sagemaker_container_log_level", LOG_LEVEL_INFO),
        "master_hostname": master,
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


def python_of(interpreter):
    """The Python a requirements.txt is for: the interpreter's, when it is one; else the launcher's."""
    first = interpreter[0] if interpreter else ""
    return first if os.path.basename(first).startswith("python") else sys.executable


def install_requirements(code_dir, python, runner):
    """`pip install -r requirements.txt`, as the toolkit does, into the Python that runs the script.
    Debian's python3 refuses that outside a venv (PEP 668); this container is the job's own and is
    thrown away after it, so the refusal is overridden."""
    requirements = os.path.join(code_dir, "requirements.txt")
    if not os.path.isfile(requirements):
        return None
    command = [python, "-m", "pip", "install", "--disable-pip-version-check", "-r", requirements]
    if externally_managed(python):
        command.append("--break-system-packages")
    runner.say("jupyter_trainer: installing requirements.txt: " + " ".join(command))
    env = dict(os.environ, PIP_ROOT_USER_ACTION="ignore")
    try:
        code, tail = runner.run(command, env, code_dir)
    except OSError as error:
        return "InstallRequirementsError: cannot run %s (%s)" % (python, error)
    if code != 0 and not runner.stopping:
        return 'InstallRequirementsError:\nExitCode %d\nErrorMessage "%s"\nCommand "%s"' % (
            shown_code(code), error_message(tail), " ".join(command))  # fmt: skip
    return None


def externally_managed(python):
    """Whether that Python refuses pip installs outside a venv (PEP 668's marker file)."""
    if python == sys.executable:
        stdlib = sysconfig.get_path("stdlib")
    else:
        try:
            stdlib = (
                subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"])
                .decode()
                .strip()
            )
        except (OSError, subprocess.CalledProcessError):
            return False
    return os.path.exists(os.path.join(stdlib, "EXTERNALLY-MANAGED"))


def error_message(stderr_tail):
    """What went wrong, from the end of stderr: the exception of the last Python traceback (with its
    whole message and the frames that raised it), passing over a launcher's own (torchrun's
    ChildFailedError); without a traceback, the last lines."""
    lines = stderr_tail.decode("utf-8", "replace").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return "\n".join([line for line in lines if line.strip()][-5:])
    found = []
    for start in starts:
        i, frames = start + 1, []
        while i < len(lines) and lines[i][:1] in (" ", "\t"):
            if lines[i].lstrip().startswith('File "'):
                frames.append(lines[i].strip())
            i += 1
        message = []
        while (
            i < len(lines)
            and lines[i].strip()
            and not lines[i].startswith(("Traceback (", "During handling", "The above exception"))
        ):
            message.append(lines[i])
            i += 1
        if message:
            found.append(message[:5] + frames[-3:])
    ours = [block for block in found if "ChildFailedError" not in block[0]]
    chosen = (ours or found or [[lines[-1]]])[-1]
    return "\n".join(chosen)


def shown_code(code):
    return code if code >= 0 else 128 - code  # killed by a signal: as a shell reports it


def failure_of(code, message, command):
    if code == -signal.SIGKILL and not message:
        message = "OutOfMemory: Process killed by SIGKILL (signal 9), most often by the kernel for want of memory"
    return 'AlgorithmError: ExecuteUserScriptError:\nExitCode %d\nErrorMessage "%s"\nCommand "%s"' % (
        shown_code(code), message, " ".join(command))  # fmt: skip


MASTER_PORT = "29500"  # torchrun's own default
TOOLKIT_MASTER_PORT = "7777"  # what SageMaker's PyTorch containers set for a script's own init_process_group


def interpreter_for(interpreter, env):
    """The interpreter's words; torchrun on a job of several hosts gets the node count, this host's
    rank and the first host as master (unless the user gave them or set up a rendezvous of their
    own), so a multi-node DDP script runs unchanged."""
    words = list(interpreter)
    module = words[1:3] == ["-m", "torch.distributed.run"]
    is_torchrun = os.path.basename(words[0]) == "torchrun" or module
    hosts = env["hosts"]
    if not is_torchrun or len(hosts) < 2:
        return words
    given = {word.split("=", 1)[0].lstrip("-").replace("-", "_") for word in words if word.startswith("--")}
    if given & {"standalone", "rdzv_endpoint", "rdzv_backend", "rdzv_conf", "rdzv_id"}:
        return words  # the user set up the rendezvous
    fill = [("nnodes", str(len(hosts))), ("node_rank", str(hosts.index(env["current_host"]))),
            ("master_addr", env["master_hostname"]), ("master_port", MASTER_PORT)]  # fmt: skip
    added = [word for name, value in fill if name not in given for word in ("--" + name, value)]
    at = 3 if module else 1
    return words[:at] + added + words[at:]


class Runner:
    """Runs the launcher's commands (pip, the script) one at a time, each in a process group of its
    own. Their output is passed through as valid UTF-8 (local mode's SDK reads it strictly and
    stops at the first bad byte); a command is waited for itself, not for what it left running in
    the background. TERM and INT, at any moment, are passed on to the running command, and the
    launcher starts nothing new after one (SageMaker stops a job with TERM to this process)."""

    def __init__(self):
        self.signals = []
        self.child = None
        self.line_open = False  # the last byte passed through did not end a line
        signal.signal(signal.SIGTERM, self._signal)
        signal.signal(signal.SIGINT, self._signal)

    @property
    def stopping(self):
        return bool(self.signals)

    def _signal(self, signum, frame):
        self.signals.append(signum)
        if self.child is not None and self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signum)
            except OSError:
                pass

    def say(self, text, stream=1):
        """A line of the launcher's own, at the start of a line."""
        self._write(stream, ("\n" if self.line_open else "") + text + "\n")

    def _write(self, stream, text):
        data = text.encode("utf-8")
        while data:
            try:
                data = data[os.write(stream, data) :]
            except InterruptedError:
                continue
            except OSError:
                return  # nobody reads it any more
        if text:
            self.line_open = not text.endswith("\n")

    def run(self, command, env, cwd):
        """Run `command`; its exit code (negative: the signal that killed it) and the end of its stderr."""
        if self.stopping:
            return -self.signals[0], b""
        child = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        self.child = child
        if self.stopping:  # a signal between the check and the start
            self._signal(self.signals[-1], None)
        streams = {child.stdout.fileno(): [1, codecs.getincrementaldecoder("utf-8")("replace")],
                   child.stderr.fileno(): [2, codecs.getincrementaldecoder("utf-8")("replace")]}  # fmt: skip
        tail, exited_at = b"", None
        while streams:
            if exited_at is None and child.poll() is not None:
                exited_at = time.monotonic()
            if exited_at is not None and time.monotonic() - exited_at > DRAIN_SECONDS:
                break  # what the script left running holds the pipes: not waited for
            for fd in select.select(list(streams), [], [], 0.2)[0]:
                chunk = os.read(fd, 65536)
                out, decoder = streams[fd]
                self._write(out, decoder.decode(chunk, final=not chunk))
                if not chunk:
                    del streams[fd]
                elif out == 2:
                    tail = (tail + chunk)[-ERROR_TAIL_BYTES:]
        for handle in (child.stdout, child.stderr):
            handle.close()
        self.child = None
        return child.wait(), tail


def bounded(message, limit=FAILURE_LIMIT):
    """The message in as many characters as SageMaker keeps, saying so where it is cut."""
    if len(message) <= limit:
        return message
    note = "\n... (cut: %d characters in all)" % len(message)
    return message[: limit - len(note)] + note


def write_failure(message, runner):
    """The failure file SageMaker reads, and a line in the log that says the same (local mode reads
    no failure file: it finds the reason there). Whatever the script left in the file's place (a
    huge file, a link, a FIFO) is replaced, not written through."""
    message = bounded(message)
    runner.say(FAILURE_MARKER + json.dumps(message), stream=2)
    directory = path("output")
    failure = os.path.join(directory, "failure")
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory)
        if os.path.lexists(failure):
            os.unlink(failure)
        with open(failure, "w") as handle:
            handle.write(message)
    except OSError as error:
        runner.say("jupyter_trainer: cannot write the failure file (%s)" % error, stream=2)


def launch(runner):
    """Prepare the script's place and environment, install its requirements, run it; its exit code."""
    channel_dir = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(channel_dir, CONFIG_NAME)) as handle:
        config = json.load(handle)
    if not isinstance(config, dict) or not isinstance(config.get("script"), str) or not config.get("interpreter"):
        raise LaunchError("%s is not what this launcher wrote" % CONFIG_NAME)
    code_dir = path("code")
    copy_code(channel_dir, code_dir)
    env = training_environment(config, code_dir, os.path.basename(channel_dir))
    os.environ.update(sm_variables(env))
    # as the toolkit exports them too
    os.environ.update({"CURRENT_HOST": env["current_host"], "SAGEMAKER_JOB_NAME": env["job_name"] or "",
                       "SAGEMAKER_REGION": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                       or ""})  # fmt: skip
    if len(env["hosts"]) > 1:  # as SageMaker's PyTorch containers do, for env:// initialization
        os.environ.setdefault("MASTER_ADDR", env["master_hostname"])
        os.environ.setdefault("MASTER_PORT", TOOLKIT_MASTER_PORT)
    problem = install_requirements(code_dir, python_of(config["interpreter"]), runner)
    if problem:
        write_failure(problem, runner)
        return 1
    command = (
        interpreter_for(config["interpreter"], env)
        + [config["script"]]
        + cmd_args(env["hyperparameters"])
        + list(config.get("args", []))
    )
    child_env = dict(os.environ, PYTHONUNBUFFERED=os.environ.get("PYTHONUNBUFFERED", "1"))
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [code_dir, os.environ.get("PYTHONPATH")]))
    try:
        code, tail = runner.run(command, child_env, code_dir)
    except OSError as error:
        write_failure("ExecuteUserScriptError: cannot run %s (%s)" % (command[0], error), runner)
        return 127
    if code != 0 and not runner.stopping:  # a stopped job is reported as stopped, not failed
        # the exception it ended with; else what it wrote itself, as an image's own train does
        write_failure(failure_of(code, error_message(tail) or script_failure(), command), runner)
    return shown_code(code)


def script_failure():
    """What the script wrote into /opt/ml/output/failure itself ("" if nothing): its start only,
    from a regular file (not a FIFO, not a link), printable."""
    failure = os.path.join(path("output"), "failure")
    try:
        fd = os.open(failure, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        data = os.read(fd, FAILURE_LIMIT)
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace")
    return "".join(char if char.isprintable() or char in "\n\t" else " " for char in text).strip()


def main():
    runner = Runner()  # TERM is passed on from the first moment: this is the container's first process
    try:
        return launch(runner)
    except Exception as error:  # the launcher's own trouble: the job's reason, never a bare traceback
        write_failure("AlgorithmError: jupyter_trainer launcher: %s: %s" % (type(error).__name__, error), runner)
        return 1


if __name__ == "__main__":
    sys.exit(main())
