"""The Slurm backend's pure logic, without a cluster: its option checks, the reading of squeue's and
sacct's answers, what Slurm's states and the supervisor's files say together, torchrun's flags."""

import importlib.util
from pathlib import Path

import pytest

from jupyter_trainer.backends.base import SupervisorFacts
from jupyter_trainer.backends.slurm import states
from jupyter_trainer.backends.slurm.queue import SlurmJob, parse_sacct, parse_squeue
from jupyter_trainer.backends.slurm.spec import parse_sbatch_args, parse_time
from jupyter_trainer.errors import InvalidOption
from jupyter_trainer.jobs import Status
from jupyter_trainer.spec import build_spec

ENDED = SupervisorFacts(supervisor_pid=10, job_pid=11, exit_code=0, stopped=False)
TERMED = SupervisorFacts(supervisor_pid=10, job_pid=11, exit_code=143, stopped=True)
NEVER_STARTED = SupervisorFacts()


def test_slurm_options_reach_the_spec_as_the_backends_own(tmp_path):
    spec = build_spec("print(1)\n", workdir=str(tmp_path), slurm=True, partition="gpu", time="1-00:00:00", nodes=2, requeue=True,
                      sbatch_args=["--mem=8G", "--constraint=a100"], gpus="2")  # fmt: skip
    assert spec.backend == "slurm" and spec.gpus == "2"
    assert spec.backend_options == {"partition": "gpu", "time": "1-00:00:00", "nodes": 2, "requeue": True, "sbatch_args": ("--mem=8G", "--constraint=a100")}
    with pytest.raises(InvalidOption, match="--partition is an option of --slurm"):
        build_spec("print(1)\n", workdir=str(tmp_path), host=True, partition="gpu")
    with pytest.raises(InvalidOption, match="cannot be given together"):
        build_spec("print(1)\n", workdir=str(tmp_path), host=True, slurm=True)


@pytest.mark.parametrize("arg", ["--job-name=x", "-Jx", "--output=/tmp/x", "--wrap=ls", "--array=1-3", "--export=ALL,X=1", "-p", "--chdir=/"])
def test_sbatch_options_the_backend_sets_are_refused(arg):
    with pytest.raises(InvalidOption, match="not allowed"):
        parse_sbatch_args([arg])


def test_sbatch_args_are_options_one_each():
    assert parse_sbatch_args(["--mem=8G", "-c4", "--exclusive"]) == ("--mem=8G", "-c4", "--exclusive")
    for bad in ("mem=8G", "--comment=a\nb", ""):
        with pytest.raises(InvalidOption):
            parse_sbatch_args([bad])
    assert parse_time("2:00:00") == "2:00:00" and parse_time("3-12") == "3-12"
    with pytest.raises(InvalidOption):
        parse_time("1h")


def test_squeue_and_sacct_answers_are_read_field_by_field():
    jobs = parse_squeue(
        "12|PENDING|Priority||gpu|2026-01-02T03:04:05|0|1:00:00|train|\n"
        "13|RUNNING|None|n[1-2]|gpu|2026-01-02T03:04:05|2|UNLIMITED|a|b|c|\n"
        "garbage\n"
    )
    assert jobs["12"].waiting and jobs["12"].reason == "Priority" and jobs["12"].name == "train"
    assert jobs["13"].node_list == "n[1-2]" and jobs["13"].restarts == 2 and jobs["13"].name == "a|b|c"
    ended = parse_sacct("7|REQUEUED|None|n1|gpu|2026-01-02T03:04:05|0:15|1:00|x\n7|CANCELLED by 0|None|n1|gpu|2026-01-02T03:09:05|0:15|1:00|x\n")
    assert ended["7"].state == "CANCELLED" and ended["7"].cancelled_by == "0" and ended["7"].restarts == 1


def test_a_reused_job_id_is_not_the_job():
    job = SlurmJob("5", "RUNNING", name="mine", submitted_at=1000.0)
    assert job.is_the_job("mine", 1000.5)
    assert not job.is_the_job("other", 1000.0)
    assert not job.is_the_job("mine", 5000.0)  # submitted long before this job was


def test_states_and_the_supervisors_files_make_the_outcome():
    waiting = states.observe(SlurmJob("1", "PENDING", "Resources"), NEVER_STARTED, stop_requested=False, job_id="1")
    assert waiting.alive and not waiting.started and waiting.reason == "Resources"
    requeueing = states.observe(SlurmJob("1", "COMPLETING", node_list="n1"), TERMED, stop_requested=False, job_id="1")
    assert requeueing.alive and requeueing.started  # a requeue completes first: not the job's end
    done = states.observe(SlurmJob("1", "COMPLETED"), ENDED, stop_requested=False, job_id="1")
    assert done.exit_code == 0 and done.final is None and done.alive is False
    timeout = states.observe(SlurmJob("1", "TIMEOUT", time_limit="1:00"), TERMED, stop_requested=False, job_id="1")
    assert timeout.final is Status.FAILED and "time limit reached (1:00)" in timeout.reason
    oom = states.observe(SlurmJob("1", "FAILED"), NEVER_STARTED, stop_requested=False, job_id="1", log_tail=b"slurmstepd: error: Exceeded job memory limit\n")
    assert oom.final is Status.FAILED and "out of memory" in oom.reason
    ours = states.observe(SlurmJob("1", "CANCELLED"), TERMED, stop_requested=True, job_id="1")
    assert ours.final is None and ours.stopped is True
    theirs = states.observe(SlurmJob("1", "CANCELLED", cancelled_by="0"), TERMED, stop_requested=False, job_id="1")
    assert theirs.final is Status.STOPPED and theirs.reason == "cancelled by root"
    node = states.observe(SlurmJob("1", "NODE_FAIL", node_list="n3"), NEVER_STARTED, stop_requested=False, job_id="1")
    assert node.final is Status.LOST and "n3" in node.reason
    unshared = states.observe(SlurmJob("1", "FAILED", node_list="n3"), NEVER_STARTED, stop_requested=False, job_id="1")
    assert unshared.alive is False and "JUPYTER_TRAINER_HOME" in unshared.why_gone
    forgotten = states.observe(None, TERMED, stop_requested=False, job_id="1")
    assert forgotten.final is Status.STOPPED and "outside jupyter_trainer" in forgotten.reason
    gone = states.observe(None, NEVER_STARTED, stop_requested=False, job_id="1")
    assert gone.alive is False and "no longer knows job 1" in gone.why_gone


def _node_module():
    path = Path(__file__).resolve().parent.parent / "jupyter_trainer" / "backends" / "slurm" / "node.py"
    spec = importlib.util.spec_from_file_location("slurm_node", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torchrun_gets_the_flags_it_lacks():
    node = _node_module()
    filled = node.with_torchrun_flags(["torchrun", "--nproc_per_node", "4", "launch.py"], "2", "1", "n1", "20001")
    assert filled == ["torchrun", "--nnodes=2", "--node_rank=1", "--master_addr=n1", "--master_port=20001", "--nproc_per_node", "4", "launch.py"]
    given = node.with_torchrun_flags(["python3", "-m", "torch.distributed.run", "--nnodes=1", "x.py"], "2", "0", "n1", "1")
    assert "--nnodes=2" not in given and given[:4] == ["python3", "-m", "torch.distributed.run", "--node_rank=0"]
    assert node.with_torchrun_flags(["python3", "x.py"], "2", "0", "n1", "1") == ["python3", "x.py"]
