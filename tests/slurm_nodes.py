"""A two-node Slurm cluster of the tests' own: slurmctld and munged on this machine, one slurmd in
each of two containers of the image .ci/build-slurm-image makes (Debian's slurmd and
python3-torch), on a Docker network of their own.

The cluster's directory (its slurm.conf and the munge socket) and the tests' temporary directory
(the job store, the working directories) are mounted into both containers at the same paths, as a
cluster's shared filesystem is: the nodes' slurmd authenticate through this machine's munged (its
socket, mounted), and a job's run files are the same files on every node.

    cluster = SlurmNodes(shared="/tmp/pytest-of-root")
    cluster.start()   # SLURM_CONF=cluster.conf
    cluster.close()   # removes the containers and the network, stops the daemons
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess

from slurm_cluster import MEMORY_MB, SlurmCluster

IMAGE = os.environ.get("JUPYTER_TRAINER_SLURM_IMAGE", "jupyter-trainer-slurm:bookworm")
NODES = ("jtn1", "jtn2")


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, stdin=subprocess.DEVNULL, timeout=120)


class SlurmNodes(SlurmCluster):
    def __init__(self, shared: str, **options):
        super().__init__(accounting=False, cluster="jtnodes", **options)
        self.shared = str(shared)
        self.tag = os.path.basename(self.root).replace("jt-slurm-", "").lower()
        self.network = f"jt-slurm-{self.tag}"
        self.containers = [f"jt-slurm-{self.tag}-{node}" for node in NODES]
        self.addresses: dict[str, str] = {}

    @staticmethod
    def missing_more() -> str | None:
        if shutil.which("docker") is None:
            return "no docker CLI"
        if _docker("image", "inspect", IMAGE, check=False).returncode != 0:
            return f"no image {IMAGE} (made by .ci/build-slurm-image)"
        return None

    def start(self) -> "SlurmNodes":
        # a network with a subnet of its own, so that the nodes' addresses are known beforehand
        for _ in range(20):
            subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
            made = _docker("network", "create", f"--subnet={subnet}.0/24", f"--gateway={subnet}.1", "--label", "jupyter_trainer.test=slurm", self.network, check=False)
            if made.returncode == 0:
                break
        else:
            raise RuntimeError(f"cannot create a Docker network: {made.stderr.strip()}")
        self.ctld_addr = f"{subnet}.1"
        self.addresses = {node: f"{subnet}.{10 + index}" for index, node in enumerate(NODES)}
        return super().start()

    def node_lines(self) -> str:
        return "\n".join(
            f"NodeName={node} NodeHostname={node} NodeAddr={address} CPUs=1 RealMemory={MEMORY_MB} State=UNKNOWN"
            for node, address in self.addresses.items()
        )

    def start_nodes(self) -> None:
        for node, container in zip(NODES, self.containers):
            _docker(
                "run", "-d", "--name", container, "--hostname", node, "--network", self.network, "--network-alias", node,
                "--ip", self.addresses[node], "--label", "jupyter_trainer.test=slurm", "--init",
                "-v", f"{self.root}:{self.root}", "-v", f"{self.shared}:{self.shared}", "-e", f"SLURM_CONF={self.conf}",
                IMAGE, "slurmd", "-D", "-N", node, "-f", str(self.conf),
            )  # fmt: skip
        for node in NODES:
            self.wait_for_node(node)

    def close(self) -> None:
        for container in self.containers:
            _docker("rm", "-f", container, check=False)
        _docker("network", "rm", self.network, check=False)
        super().close()
