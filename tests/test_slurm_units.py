"""The Slurm backend's pure logic, without a cluster: its option checks, the reading of squeue's and
sacct's answers, what Slurm's states and the supervisor's files say together, torchrun's flags."""

import dataclasses
import importlib.util
import os
from pathlib import Path

import pytest

from jupyter_trainer.backends import build_spec
from jupyter_trainer.backends.base import SupervisorFacts
from jupyter_trainer.backends.slurm import commands, states
from jupyter_trainer.backends.slurm.backend import SlurmBackend
from jupyter_trainer.backends.slurm.commands import (
    SlurmCommandFailed,
    UnusableAnswer,
    query_environment,
    refused,
    sbatch_environment,
)
from jupyter_trainer.backends.slurm.declared import SlurmOptions
from jupyter_trainer.backends.slurm.queue import (
    JobIdentity,
    SlurmJob,
    newest_of,
    parse_sacct,
    parse_scontrol,
    parse_squeue,
    the_runs,
)
from jupyter_trainer.backends.slurm.spec import parse_sbatch_args, parse_time
from jupyter_trainer.core.record import Status
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.errors import BackendUnavailable, InvalidOption, TrainerError, Unreachable

ENDED = SupervisorFacts(supervisor_pid=10, job_pid=11, exit_code=0, stopped=False)
TERMED = SupervisorFacts(supervisor_pid=10, job_pid=11, exit_code=143, stopped=True)
NEVER_STARTED = SupervisorFacts()


def test_slurm_options_reach_the_spec_as_the_backends_own(tmp_path):
    spec = build_spec("print(1)\n", workdir=str(tmp_path), slurm=True, partition="gpu", time="1-00:00:00", nodes=2, requeue=True,
                      sbatch_args=["--mem=8G", "--constraint=a100"], gpus="2")  # fmt: skip
    assert spec.backend == "slurm" and spec.gpus == "2"
    assert spec.options == SlurmOptions(partition="gpu", time="1-00:00:00", nodes=2, requeue=True, sbatch_args=("--mem=8G", "--constraint=a100"))
    assert spec.public_options()["backend_options"] == {  # stored as when they were a dict: the given ones
        "partition": "gpu", "time": "1-00:00:00", "nodes": 2, "requeue": True, "sbatch_args": ["--mem=8G", "--constraint=a100"],
    }  # fmt: skip
    with pytest.raises(InvalidOption, match="--partition is an option of --slurm"):
        build_spec("print(1)\n", workdir=str(tmp_path), host=True, partition="gpu")
    with pytest.raises(InvalidOption, match="cannot be given together"):
        build_spec("print(1)\n", workdir=str(tmp_path), host=True, slurm=True)


@pytest.mark.parametrize("arg", ["--job-name=x", "-Jx", "--output=/tmp/x", "--wrap=ls", "--array=1-3", "--export=ALL,X=1", "-p", "--chdir=/"])
def test_sbatch_options_the_backend_sets_are_refused(arg):
    with pytest.raises(InvalidOption, match="not allowed"):
        parse_sbatch_args([arg])


# sbatch takes any unambiguous start of a long option for it, and clusters short ones
@pytest.mark.parametrize("arg", ["--job-n=renamed", "--chd=/tmp/x", "--arr=0-1", "--outp=/tmp/x", "--requ", "--no-req", "--ti=5", "--wai",
                                 "-vJrenamed", "-Ho/tmp/x", "-HW", "-vvpdebug"])  # fmt: skip
def test_abbreviated_or_clustered_forms_of_the_backends_options_are_refused(arg):
    with pytest.raises(InvalidOption, match="not allowed"):
        parse_sbatch_args([arg])


def test_options_that_merely_look_like_the_backends_are_kept():
    given = ["--gpus=2", "--time-min=5", "--wait-all-nodes=1", "--nodelist=n1", "-c4Jx", "-H", "--hold", "--mem=8G", "-k"]
    assert parse_sbatch_args(given) == tuple(given)


def test_sbatch_never_gets_the_settings_that_make_a_job_it_cannot_follow():
    env = sbatch_environment({"SBATCH_WAIT": "1", "SBATCH_ARRAY_INX": "0-2", "SBATCH_ERROR": "/tmp/e", "SBATCH_INPUT": "/tmp/i",
                              "SBATCH_PARTITION": "gpu", "PATH": "/bin"})  # fmt: skip
    assert env == {"SBATCH_PARTITION": "gpu", "PATH": "/bin"}  # a default partition is the user's to keep
    queried = query_environment({"SQUEUE_PARTITION": "other", "SQUEUE_FORMAT2": "x", "SLURM_TIME_FORMAT": "relative", "SACCT_FORMAT": "x",
                                 "SLURM_CONF": "/etc/slurm.conf"})  # fmt: skip
    assert queried == {"SLURM_CONF": "/etc/slurm.conf"}


def test_sbatch_args_are_options_one_each():
    assert parse_sbatch_args(["--mem=8G", "-c4", "--exclusive"]) == ("--mem=8G", "-c4", "--exclusive")
    for bad in ("mem=8G", "--comment=a\nb", ""):
        with pytest.raises(InvalidOption):
            parse_sbatch_args([bad])
    assert parse_time("2:00:00") == "2:00:00" and parse_time("3-12") == "3-12"
    with pytest.raises(InvalidOption):
        parse_time("1h")


SEP = "|0123456789abcdef|"


def squeue_line(*fields):
    """A line as squeue prints it with SEP after each field."""
    return "".join(f"{field}{SEP}" for field in fields) + "\n"


def test_squeue_and_sacct_answers_are_read_field_by_field():
    jobs = parse_squeue(
        squeue_line("12", "PENDING", "Priority", "", "gpu", "2026-01-02T03:04:05", "0", "1:00:00", "0", "/h/jobs/train/1/output.log", "/h/jobs/train/1/slurm_batch.sh /h/jobs/train/1 0123 1", "train")
        + squeue_line("13", "RUNNING", "None", "n[1-2]", "gpu", "2026-01-02T03:04:05", "2", "UNLIMITED", "0", "(null)", "(null)", "a|b\nc")
        + squeue_line("14_[1-3%2]", "PENDING", "None", "", "gpu", "2026-01-02T03:04:05", "0", "UNLIMITED", "1000", "x", "x", "theirs"),
        SEP,
        "0",
    )
    assert jobs["12"].waiting and jobs["12"].reason == "Priority" and jobs["12"].name == "train" and jobs["12"].log == "/h/jobs/train/1/output.log"
    assert jobs["13"].node_list == "n[1-2]" and jobs["13"].restarts == 2 and jobs["13"].name == "a|b\nc"
    assert "14_[1-3%2]" not in jobs  # another user's
    assert parse_squeue("", SEP) == {}  # no job at all: a good answer
    ended = parse_sacct("7|REQUEUED|None|n1|gpu|2026-01-02T03:04:05|0:15|1:00|x\n7|CANCELLED by 0|None|n1|gpu|2026-01-02T03:09:05|0:15|1:00|x\n")
    assert ended["7"].state == "CANCELLED" and ended["7"].cancelled_by == "0" and ended["7"].restarts == 1


GOOD = squeue_line("36", "RUNNING", "None", "n1", "debug", "2026-01-02T03:04:05", "0", "UNLIMITED", "0", "/log", "/batch.sh", "target")


@pytest.mark.parametrize(
    "answer",
    [
        "lorem ipsum\n",  # garbage
        "|||||||||||\n",
        GOOD[:20] + "\n",  # cut short
        GOOD + GOOD[:40],
        GOOD.replace("RUNNING", "RUNN\ufffdING"),  # not UTF-8, read with replacement
        GOOD.replace("\n", ""),  # no line end where the format puts it
        GOOD + GOOD,  # a job twice
        GOOD.replace("36", "x36", 1),
        squeue_line("36", "RUNNING", "None", "n1", "debug", "2026-01-02T03:04:05", "0", "UNLIMITED", "root", "/log", "/batch.sh", "target"),
    ],
)
def test_an_squeue_answer_not_of_the_format_asked_for_is_unusable_whole(answer):
    with pytest.raises(UnusableAnswer):
        parse_squeue(answer, SEP)


def test_a_name_with_newlines_cannot_forge_a_line():
    forged = "x\n" + "".join(f"{field}|" for field in ("36", "COMPLETED", "None", "n1", "debug", "2026-01-02T03:04:05", "0", "UNLIMITED", "0", "/log", "/batch.sh", "target"))
    jobs = parse_squeue(GOOD + squeue_line("38", "PENDING", "JobHeldUser", "", "second", "2026-01-02T03:04:05", "0", "UNLIMITED", "0", "/dev/null", "(null)", forged), SEP)
    assert jobs["36"].state == "RUNNING" and jobs["38"].name == forged


def test_scontrol_is_read_only_for_the_job_it_names():
    identity = JobIdentity("train", 1000.0)
    line = (
        f"JobId=5 JobName=train UserId=x({os.getuid()}) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None "
        "Restarts=0 ExitCode=0:0 TimeLimit=UNLIMITED SubmitTime=2026-01-02T03:04:05 Partition=debug NodeList=n1 StdErr=/x JobState=COMPLETED\n"
    )
    job = parse_scontrol(line, "5", identity)
    assert job.state == "RUNNING" and job.active and job.node_list == "n1" and job.source == "scontrol"
    assert parse_scontrol(line.replace("JobName=train", "JobName=other"), "5", identity) is None  # the id is another job's now
    with pytest.raises(UnusableAnswer):
        parse_scontrol("garbage\n", "5", identity)


def test_a_reused_job_id_is_not_the_job():
    job = SlurmJob("5", "RUNNING", name="mine", submitted_at=1000.0, log="/h/jobs/mine/1/output.log")
    assert job.is_the_job(JobIdentity("mine", 1000.5, "/h/jobs/mine/1/output.log"))
    assert not job.is_the_job(JobIdentity("other", 1000.0))
    assert not job.is_the_job(JobIdentity("mine", 5000.0))  # submitted long before this job was
    assert not job.is_the_job(JobIdentity("mine", 1000.0, "/other/jobs/mine/1/output.log"))  # the same name in another store


LOG = "/h/jobs/again/1/output.log"


def again(job_id, submitted_at, token, state="RUNNING"):
    """An entry of job "again" run 1, submitted with `token` in its batch command."""
    return SlurmJob(job_id, state, name="again", submitted_at=submitted_at, log=LOG, command=f"/h/jobs/again/1/slurm_batch.sh /h/jobs/again/1 {token} 1 0 10 python3 x.py")


def test_a_run_submitted_again_is_told_from_the_earlier_ones_job_by_its_token():
    earlier, ours = again("7", 1000.0, "a" * 32, "CANCELLED"), again("8", 1002.0, "b" * 32)
    identity = JobIdentity("again", 1002.0, LOG, "b" * 32)
    assert ours.is_the_job(identity) and not earlier.is_the_job(identity)
    assert newest_of([ours, earlier], identity) is ours and newest_of([earlier], identity) is None
    # submitted before there were tokens: of the entries of its name and log, the newest
    untokened = JobIdentity("again", 1002.0, LOG)
    assert newest_of([earlier, ours], untokened) is ours and newest_of([ours, earlier], untokened) is ours
    same_second = again("9", 1002.0, "b" * 32)
    assert newest_of([same_second, ours], identity) is same_second  # then the later id
    # accounting shows no command: there the name and the time decide, as before
    assert SlurmJob("7", "COMPLETED", name="again", submitted_at=1002.0, source="sacct").is_the_job(identity)


def test_the_entry_with_the_records_id_and_token_is_the_runs_whatever_was_submitted_since():
    earlier, ours = again("7", 1000.0, "a" * 32, "CANCELLED"), again("8", 1002.0, "b" * 32)
    decoy = again("9", 1005.0, "b" * 32, "COMPLETED")  # submitted by the job, with its token
    identity = JobIdentity("again", 1002.0, LOG, "b" * 32)
    assert the_runs(ours, [earlier, ours, decoy], identity) is ours
    # the record's id rewritten to the earlier run's: the newest holding the token
    assert the_runs(earlier, [earlier, ours], identity) is ours
    # the record's token rewritten: the entry with the record's id, of the run's name and log
    forged = JobIdentity("again", 1002.0, LOG, "0" * 32)
    assert the_runs(ours, [earlier, ours], forged) is ours
    assert the_runs(SlurmJob("8", "RUNNING", name="again", submitted_at=1002.0, log="/other/output.log", command="x"), [], forged) is None
    # a record of a version without tokens: the newest of its name and log
    assert the_runs(earlier, [earlier, ours], JobIdentity("again", 1000.0, LOG)) is ours


def test_scontrol_shows_the_token_in_the_command():
    identity = JobIdentity("again", 1000.0, LOG, "b" * 32)
    line = (
        f"JobId=8 JobName=again UserId=x({os.getuid()}) JobState=RUNNING Reason=None SubmitTime=2026-01-02T03:04:05 Partition=debug NodeList=n1 "
        "Command=/h/jobs/again/1/slurm_batch.sh /h/jobs/again/1 {token} 1 0 10 python3 x.py WorkDir=/w Comment=(null) StdErr=/x\n"
    )
    assert parse_scontrol(line.format(token="b" * 32), "8", identity).command.split()[2] == "b" * 32
    assert parse_scontrol(line.format(token="a" * 32), "8", identity) is None  # the earlier run's


def test_scontrol_names_an_array_task_by_its_own_id_and_its_arrays():
    identity = JobIdentity("grid", 1000.0, "/h/sweeps/grid.d/array-x/%a/output.log", "c" * 32)
    line = (
        "JobId={own} ArrayJobId={array} ArrayTaskId={task} ArrayTaskThrottle=2 JobName=grid UserId=x({uid}) JobState=PENDING "
        "Reason=JobArrayTaskLimit SubmitTime=2026-01-02T03:04:05 Partition=debug NodeList= Command=/h/sweeps/grid.d/array-x/slurm_array.sh "
        "/h/sweeps/grid.d/array-x {token} 1 0 10 WorkDir=/w StdErr=/x\n"
    )
    shown = {"own": 12, "array": 10, "task": 2, "uid": os.getuid(), "token": "c" * 32}
    job = parse_scontrol(line.format(**shown), "10_2", identity)
    assert job.job_id == "10_2" and job.waiting and job.reason == "JobArrayTaskLimit"
    assert parse_scontrol(line.format(**{**shown, "token": "d" * 32}), "10_2", identity) is None  # another sweep's array
    with pytest.raises(UnusableAnswer):  # an answer for another task is no answer for this one
        parse_scontrol(line.format(**{**shown, "task": 3}), "10_2", identity)


def test_an_array_is_asked_for_as_a_range_or_a_list_with_its_bound():
    from jupyter_trainer.backends.slurm.array import array_spec, arrays_of

    assert array_spec([0, 1, 2, 3], 2) == "0-3%2" and array_spec([0, 1, 2], None) == "0-2"
    assert array_spec([4], 1) == "4%1" and array_spec([5, 1, 3], 2) == "1,3,5%2"  # what a re-run cell still lacks
    assert arrays_of(["10_0", "10_3", "11_0", "12"]) == ["10", "11"]


def test_a_slurm_command_that_fails_is_one_line_for_the_user():
    error = SlurmCommandFailed("squeue", "squeue: error: slurm_load_jobs error: Protocol authentication error")
    assert isinstance(error, TrainerError) and isinstance(error, BackendUnavailable)
    assert "\n" not in str(error) and "Protocol authentication error" in str(error)
    broken = refused(SlurmCommandFailed("sbatch", "sbatch: fatal: Unable to process configuration file"), "job 'x'")
    assert str(broken).startswith("sbatch cannot submit job 'x': Unable to process configuration file") and "--slurm options" not in str(broken)
    assert "check the --slurm options" in str(refused(SlurmCommandFailed("sbatch", "sbatch: error: Invalid partition name specified"), "job 'x'"))


@pytest.mark.parametrize(
    "said, meaning",
    [
        ("scancel: error: Kill job error on job id 12: Invalid job id specified", "unknown_job"),
        ("slurm_load_jobs error: Invalid job id specified", "unknown_job"),
        ("scancel: error: Kill job error on job id 12: Job/step already completing or completed", "job_ending"),
        ("sacct: error: Slurm accounting storage is disabled", "no_accounting"),
        ("sacct: error: slurmdbd: Getting response to message type: DBD_GET_JOBS_COND", "no_accounting accounting_down"),
        ("sbatch: fatal: Unable to process configuration file", "broken_here"),
        ("squeue: error: Munge decode failed: Expired credential", "broken_here"),
        ("sbatch: error: Invalid partition name specified", ""),
    ],
)
def test_what_slurms_refusals_mean_is_read_from_its_words_in_one_place(said, meaning):
    """Slurm's commands have no error codes: their words are read once, by the error that holds them."""
    error = SlurmCommandFailed("x", said)
    meanings = ("unknown_job", "job_ending", "no_accounting", "accounting_down", "broken_here")
    assert {name for name in meanings if getattr(error, name)} == set(meaning.split())


def fake_command(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_what_a_failed_command_printed_is_a_field_of_its_error(tmp_path, monkeypatch):
    """sbatch may print a job id and then fail (the controller lost on the way back) or hang: what
    it printed comes with its error, typed, for the submission to cancel that job."""
    fake_command(tmp_path, "sbatch", "echo 'Submitted batch job 41'\necho 'sbatch: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1")
    fake_command(tmp_path, "squeue", "echo 'squeue: error: Invalid user' >&2\nexit 1")
    fake_command(tmp_path, "scontrol", "echo '42'\nexec sleep 30")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")  # these first; sleep after them
    with pytest.raises(commands.ControllerUnreachable) as lost:
        commands.run("sbatch", "x.sh")
    assert isinstance(lost.value, Unreachable) and lost.value.host == commands.CONTROLLER
    assert lost.value.output == "Submitted batch job 41\n" and commands.printed_before(lost.value) == "Submitted batch job 41\n"
    assert str(lost.value) == "cannot reach the Slurm controller (sbatch: error: Unable to contact slurm controller (connect failure)): check the cluster's status with sinfo; the jobs go on meanwhile"
    with pytest.raises(commands.ControllerUnreachable) as hung:
        commands.run("scontrol", "show", timeout=1)
    assert hung.value.output == "42\n" and str(hung.value) == "`scontrol` got no answer in 1 s: the Slurm controller cannot be reached"
    with pytest.raises(SlurmCommandFailed) as refused_here:
        commands.run("squeue")
    assert refused_here.value.output == "" and refused_here.value.said == "squeue: error: Invalid user"
    assert commands.printed_before(KeyboardInterrupt()) == "" and commands.printed_before(SlurmCommandFailed("sbatch", "no", "Submitted batch job 7\n")) == "Submitted batch job 7\n"


def test_a_store_path_with_a_backslash_is_refused_before_anything_is_written(tmp_path):
    spec = build_spec("print(1)\n", workdir=str(tmp_path), slurm=True)
    home = tmp_path / "h\\back"
    with pytest.raises(InvalidOption, match="backslash"):
        SlurmBackend().preflight(spec, JobStore(home))
    assert not home.exists()


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


def test_while_slurm_cannot_be_asked_the_supervisors_exit_code_is_the_outcome_of_a_script_that_ended_on_its_own():
    exited = SupervisorFacts(supervisor_pid=10, job_pid=11, exit_code=3, stopped=False, clock_ended=True)
    assert states.ended_unseen(exited, stop_requested=False).exit_code == 3
    termed = dataclasses.replace(TERMED, clock_ended=True)
    assert states.ended_unseen(termed, stop_requested=True).stopped is True  # our stop
    assert states.ended_unseen(termed, stop_requested=False) is None  # signalled from elsewhere: Slurm says why
    # an exit code the job wrote as the supervisor does, while the supervisor's clock goes on
    assert states.ended_unseen(dataclasses.replace(exited, clock_ended=False), stop_requested=False) is None
    killed = SupervisorFacts(supervisor_pid=10, job_pid=11, exit_code=137, stopped=False, clock_ended=True)
    assert states.ended_unseen(killed, stop_requested=False) is None  # by Slurm for its memory, perhaps
    assert states.ended_unseen(NEVER_STARTED, stop_requested=False) is None
    unreadable = SupervisorFacts(supervisor_pid=10, job_pid=11, exit_code=0, stopped=False, problem="its pid file cannot be read")
    assert states.ended_unseen(unreadable, stop_requested=False) is None


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


def test_an_interpreter_that_starts_with_an_option_is_refused(tmp_path):
    with pytest.raises(InvalidOption, match="starts with an option"):
        build_spec("print(1)\n", workdir=str(tmp_path), slurm=True, interpreter="--foo")
    assert build_spec("print(1)\n", workdir=str(tmp_path), slurm=True, interpreter="python3 -X dev").interpreter == ("python3", "-X", "dev")


def test_a_good_answer_is_read_whatever_else_is_said_and_without_the_users_squeue_settings(tmp_path, monkeypatch):
    fake = tmp_path / "squeue"
    fake.write_text('#!/bin/sh\nenv | grep -c "^SQUEUE_\\|^SLURM_TIME_FORMAT=" || :\necho "note: socket timed out once, retried" >&2\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SQUEUE_PARTITION", "other")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    assert commands.run("squeue").strip() == "0"


def test_an_squeue_answer_with_digits_int_cannot_read_is_unusable():
    from jupyter_trainer.backends.slurm.commands import UnusableAnswer
    from jupyter_trainer.backends.slurm.queue import _squeue_entry

    values = ["12", "RUNNING", "None", "n1", "debug", "2026-12-01T10:00:00", "\u00b2", "1:00:00", "0", "/store/out.log", "/batch.sh", "job"]
    with pytest.raises(UnusableAnswer):
        _squeue_entry(values)
    values[6], values[8] = "0", "\u0661"  # an Arabic-Indic one as the user id
    with pytest.raises(UnusableAnswer):
        _squeue_entry(values)


@pytest.mark.parametrize("submitted_at", [float("nan"), float("inf"), 1e300, -5.0])
def test_a_record_with_a_submit_time_no_job_had_is_one_line_and_never_followed(submitted_at, tmp_path):
    from jupyter_trainer.backends.slurm.backend import SlurmRuntime, _followed
    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.errors import TrainerError

    store = JobStore(tmp_path)
    record = make_slurm_record(store, {"job_id": "12", "submitted_at": submitted_at})
    with pytest.raises(TrainerError, match="submitted_at"):
        SlurmRuntime.of(record)
    assert list(_followed(store)()) == []


def test_a_record_whose_token_no_submission_made_is_one_line(tmp_path):
    from jupyter_trainer.backends.slurm.backend import SlurmRuntime

    record = make_slurm_record(JobStore(tmp_path), {"job_id": "12", "submitted_at": 1000.0, "token": "b 1 0"})
    with pytest.raises(TrainerError, match="token"):
        SlurmRuntime.of(record)


def make_slurm_record(store, runtime):
    """A running Slurm job's record whose runtime says `runtime`, as a job could rewrite it."""
    from jupyter_trainer.core.record import JobRecord

    record = JobRecord(name="forged", backend="slurm")
    store.create(record)

    def forge(changed):
        changed.runtime = runtime
        changed.status = Status.RUNNING

    return store.update("forged", record.run, forge)


@pytest.mark.parametrize(
    "note",
    [
        '{"submitter": {"pid": 2, "start_time": 1}, "host": "h", "job_id": null, "indices": [0], "token": "' + "a" * 32 + '", "submitted_at": 1' + "0" * 400 + "}",
        '{"job_id": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
    ids=["a time too large for a float", "nested past reading"],
)
def test_a_held_note_written_by_a_hostile_job_is_no_note_and_never_a_traceback(note, tmp_path):
    """A held array's note lies in the store, where a job can write: a note no submission could
    have written is not read as one (the sweep's next submission goes on), whatever it holds."""
    from jupyter_trainer.backends.slurm.array import HELD_FILE, resume_held

    store = JobStore(tmp_path / "home")
    directory = store.sweep_files("swept") / "array-0123456789ab"
    directory.mkdir(parents=True)
    (directory / HELD_FILE).write_text(note)
    assert resume_held(store, "swept") == []
