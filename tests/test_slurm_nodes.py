"""--slurm --nodes 2 on a two-node cluster in containers (tests/slurm_nodes.py): the interpreter
runs once per node through srun, with MASTER_ADDR, MASTER_PORT, NODE_RANK and WORLD_SIZE set, a
gloo DDP script on Debian's python3-torch sums over both nodes, real torchrun makes one group of both nodes, and
every line of the merged log says its node."""


import pytest
import slurm_cluster
import slurm_nodes
from slurm_cluster import submit

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.submit import submit_detached

pytestmark = pytest.mark.slurm

DDP = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print("rank", dist.get_rank(), "of", dist.get_world_size(), "node_rank", os.environ["NODE_RANK"],
      "master", os.environ["MASTER_ADDR"], "sum", total.item(), flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    shared = tmp_path_factory.getbasetemp()
    yield from slurm_cluster.for_the_session(tmp_path_factory, kind=slurm_nodes.SlurmNodes, shared=str(shared))


@pytest.fixture
def slurm(nodes, monkeypatch, home):
    yield from slurm_cluster.following(nodes, monkeypatch)


def test_a_gloo_ddp_job_on_two_nodes(slurm, workdir):
    job = submit(DDP, workdir, "ddp", nodes=2)
    assert job.wait(timeout=180) is Status.COMPLETED, job.logs()
    lines = sorted(job.logs().splitlines())
    assert lines == [
        "[jtn1] rank 0 of 2 node_rank 0 master jtn1 sum 3.0",
        "[jtn2] rank 1 of 2 node_rank 1 master jtn1 sum 3.0",
    ]
    assert job.record.runtime["node_list"] == "jtn[1-2]"


TORCHRUN_DDP = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
print("rank", dist.get_rank(), "of", dist.get_world_size(), "sum", total.item(), flush=True)
dist.destroy_process_group()
"""


def test_real_torchrun_on_two_nodes_two_processes_each(slurm, workdir):
    """Debian's torchrun itself, two processes per node: the node flags it is given make one group of
    four. (Debian bookworm's torch 1.13 on Python 3.11 needs --redirects and --tee set: their
    defaults fail before a process starts.)"""
    interpreter = "torchrun --redirects 1 --tee 1 --nproc_per_node 2"
    job = submit(TORCHRUN_DDP, workdir, "torchrun-ddp", nodes=2, interpreter=interpreter, sbatch_args=["--mem=1500M"])
    assert job.wait(timeout=240) is Status.COMPLETED, job.logs()
    ranks = sorted(line.rsplit(":", 1)[-1] for line in job.logs().splitlines() if " sum " in line)
    assert ranks == [f"rank {rank} of 4 sum 6.0" for rank in range(4)], job.logs()
    nodes = {line.split("]", 1)[0] for line in job.logs().splitlines() if " sum " in line}
    assert nodes == {"[jtn1", "[jtn2"}  # every line says its node


def test_torchrun_gets_the_nodes_flags_filled_in(slurm, workdir):
    """Debian bookworm's torchrun (torch 1.13 on Python 3.11) fails on its own before it starts a
    process (AttributeError in torch.distributed.elastic's to_map), so a program of that name in
    the working directory stands in for it: it shows the arguments it was given, on each node."""
    stand_in = workdir / "torchrun"
    stand_in.write_text("#!/usr/bin/env python3\nimport os, sys\nprint('torchrun', ' '.join(sys.argv[1:3]), os.environ['NODE_RANK'], flush=True)\nprint('args', ' '.join(sys.argv[1:5]))\n")
    stand_in.chmod(0o755)
    job = submit("print('never run by the stand-in')\n", workdir, "ddp-torchrun", nodes=2, interpreter=f"{stand_in} --nproc_per_node 4")
    assert job.wait(timeout=120) is Status.COMPLETED, job.logs()
    lines = sorted(line for line in job.logs().splitlines() if " args " in line)
    port = 20000 + int(job.record.runtime["job_id"]) % 20000
    assert lines == [
        f"[jtn1] args --nnodes=2 --node_rank=0 --master_addr=jtn1 --master_port={port}",
        f"[jtn2] args --nnodes=2 --node_rank=1 --master_addr=jtn1 --master_port={port}",
    ]


def test_a_failure_on_one_node_fails_the_job(slurm, workdir):
    script = "import os, sys, time\nif os.environ['NODE_RANK'] == '1':\n    sys.exit(5)\ntime.sleep(600)\n"
    job = submit(script, workdir, "one-fails", nodes=2)
    assert job.wait(timeout=120) is Status.FAILED and job.exit_code != 0


def test_a_store_the_nodes_cannot_see_ends_the_job_lost_saying_what_to_set(slurm, workdir, tmp_path_factory, monkeypatch):
    import shutil
    import tempfile

    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.jobs.job import Job

    private = tempfile.mkdtemp(prefix="jt-not-shared-")  # outside what the nodes mount
    try:
        store = JobStore(private)
        spec = build_spec("print('never')\n", workdir=str(workdir), slurm=True)
        job = submit_detached(spec, name="unshared", store=store).job
        assert Job.load("unshared", store).wait(timeout=60) is Status.LOST
        reason = Job.load("unshared", store).reason
        assert "cannot write to the job store" in reason and "JUPYTER_TRAINER_HOME" in reason, reason
        assert job.record.runtime["job_id"] in reason
    finally:
        shutil.rmtree(private, ignore_errors=True)
