"""Starts a Slurm job's supervisor on the batch node: `python3 -I -S slurm_start.py RUN_DIR NODES REQUEUE GRACE CMD...`
(a task of a sweep's job array gives no CMD: its run's `slurm_command` holds it).

Copied into each run; runs alone on the node's python3 and imports nothing of ours. It

* sets the job's environment from the run's private `slurm_env` file (its values are secrets:
  never in the batch script, sbatch's environment or the record), and feeds the supervisor the
  `--notify` details from `slurm_notify` on its stdin; both files are removed once read, unless
  Slurm may requeue the job (REQUEUE 1) and start it again;
* on a restart (SLURM_RESTART_COUNT), marks it in the log with a line of its own and clears the
  supervisor's pid and exit-code files for the new attempt;
* with NODES > 1, runs CMD once per node through srun, under slurm_node.py, with MASTER_ADDR (the
  first node) and MASTER_PORT set;
* then becomes the supervisor: `sh supervise.sh RUN_DIR GRACE 0 CMD...`, GRACE just under
  Slurm's KillWait.
"""

import json
import os
import stat
import subprocess
import sys
import time

RESERVED = b" " * 64


def _open_own(path, flags):
    """A run file opened without following a link the job may have put in its place."""
    fd = os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError("%s is not a regular file" % path)
    return fd


def _read_secret(path, keep):
    try:
        fd = _open_own(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    if not keep:
        try:
            os.unlink(path)
        except OSError:
            pass
    return b"".join(chunks)


def _log(run_dir, text):
    fd = _open_own(os.path.join(run_dir, "output.log"), os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    finally:
        os.close(fd)


def _restarted(run_dir, count):
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    node = os.environ.get("SLURMD_NODENAME", "")
    _log(
        run_dir,
        "\n----- jupyter_trainer: Slurm restarted the job (restart %d) at %s on %s -----\n" % (count, when, node),
    )
    for name in ("pid", "exit_code"):
        fd = _open_own(os.path.join(run_dir, name), os.O_WRONLY)
        try:
            os.write(fd, RESERVED)
        finally:
            os.close(fd)


def _first_node():
    nodes = os.environ.get("SLURM_JOB_NODELIST", "")
    try:
        names = subprocess.run(
            ["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, timeout=30
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        names = []
    return names[0] if names else os.environ.get("SLURMD_NODENAME", "localhost")


def _grace(given):
    """The supervisor's grace between TERM and KILL: just under Slurm's KillWait, so that a cancel
    or a time limit gives the script all the time Slurm does to checkpoint, and the supervisor
    still records the exit code before Slurm's KILL; `given` where KillWait cannot be read."""
    try:
        config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return given
    for line in config.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "KillWait" and words[2].isdigit():
            return str(max(1, int(words[2]) - 1))
    return given


def main():
    run_dir, nodes, requeue, grace = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", _grace(sys.argv[4])
    command = sys.argv[5:]
    try:
        if not command:  # a task of a sweep's job array: its run's command is in the run
            command = [
                os.fsdecode(word) for word in _read_secret(os.path.join(run_dir, "slurm_command"), True).split(b"\0")
            ]
            if command == [""]:
                raise OSError("its slurm_command is missing or empty")
        env = json.loads(_read_secret(os.path.join(run_dir, "slurm_env"), requeue) or b"{}")
        given = _read_secret(os.path.join(run_dir, "slurm_notify"), requeue)
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        if restarts > 0:
            _restarted(run_dir, restarts)
    except (OSError, ValueError) as exc:
        sys.stderr.write(
            "jupyter_trainer: cannot start the job in %s on %s: %s\n"
            % (run_dir, os.environ.get("SLURMD_NODENAME", "this node"), exc)
        )
        return 70
    os.environ.update({str(key): str(value) for key, value in env.items()})
    os.environ["PYTHONUNBUFFERED"] = "1"
    if nodes > 1:
        job_id = os.environ.get("SLURM_JOB_ID", "0")
        os.environ["MASTER_ADDR"] = _first_node()
        os.environ.setdefault("MASTER_PORT", str(20000 + int(job_id) % 20000 if job_id.isdigit() else 29500))
        os.environ["WORLD_SIZE"] = str(nodes)
        command = [
            "srun", "--nodes=%d" % nodes, "--ntasks=%d" % nodes, "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            "--export=ALL", "python3", "-I", "-S", os.path.join(run_dir, "slurm_node.py"), *command,
        ]  # fmt: skip
    read, write = os.pipe()
    if given:  # a few hundred bytes: the pipe holds them whole
        os.write(write, given)
    os.close(write)
    os.dup2(read, 0)
    os.close(read)
    supervisor = os.path.join(run_dir, "supervise.sh")
    os.execvp("sh", ["sh", supervisor, run_dir, grace, "0", *command])


if __name__ == "__main__":
    sys.exit(main())
