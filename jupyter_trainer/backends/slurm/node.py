"""Runs a many-node Slurm job's command on one node: `python3 -I -S slurm_node.py CMD...`, once
per node (srun starts it). Copied into each run; imports nothing of ours.

Sets NODE_RANK (and RANK, LOCAL_RANK for one process per node) from SLURM_NODEID, fills in
torchrun's --nnodes, --node_rank, --master_addr and --master_port where they are not given, and
prefixes every line of the command's output with the node's name, so that the merged log says
which node wrote it.
"""

import os
import signal
import subprocess
import sys

TORCHRUN_FLAGS = (
    "--nnodes",
    "--node_rank",
    "--node-rank",
    "--master_addr",
    "--master-addr",
    "--master_port",
    "--master-port",
)


def _torchrun_prefix(command):
    """How many words of `command` start torchrun (0: it is not torchrun)."""
    if command and os.path.basename(command[0]) == "torchrun":
        return 1
    if len(command) >= 3 and command[1] == "-m" and command[2] in ("torch.distributed.run", "torch.distributed.launch"):
        return 3
    return 0


def with_torchrun_flags(command, nnodes, rank, addr, port):
    start = _torchrun_prefix(command)
    if not start:
        return command
    given = {word.split("=", 1)[0] for word in command}
    added = []
    for flag, value in (("--nnodes", nnodes), ("--node_rank", rank), ("--master_addr", addr), ("--master_port", port)):
        if flag not in given and flag.replace("_", "-") not in given:
            added.append("%s=%s" % (flag, value))
    return command[:start] + added + command[start:]


def main():
    command = sys.argv[1:]
    rank = os.environ.get("SLURM_NODEID", "0")
    nnodes = os.environ.get("SLURM_NNODES") or os.environ.get("WORLD_SIZE") or "1"
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    os.environ["NODE_RANK"] = rank
    if _torchrun_prefix(command):
        command = with_torchrun_flags(
            command, nnodes, rank, os.environ.get("MASTER_ADDR", "localhost"), os.environ.get("MASTER_PORT", "29500")
        )
    else:  # one process per node: it is the node's rank in the world of nodes
        os.environ.update({"RANK": rank, "LOCAL_RANK": "0", "WORLD_SIZE": nnodes})
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def forward(signum, frame):
        try:
            child.send_signal(signum)
        except OSError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    prefix = ("[%s] " % node).encode()
    out = sys.stdout.buffer
    pending = b""
    while True:
        try:
            chunk = os.read(child.stdout.fileno(), 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if lines:
            out.write(b"".join(prefix + line + b"\n" for line in lines))
            out.flush()
        if len(pending) > 1 << 16:  # a line that never ends: shown as it comes
            out.write(prefix + pending + b"\n")
            out.flush()
            pending = b""
    if pending:
        out.write(prefix + pending + b"\n")
        out.flush()
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
