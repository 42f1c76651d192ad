import time

import pytest

from jupyter_trainer.core.record import (
    JobRecord,
    Observation,
    Status,
    describe_exit_code,
    resolve,
    validate_name,
)
from jupyter_trainer.errors import InvalidName


@pytest.mark.parametrize("name", ["a", "exp1", "A-b_c.d", "9" * 63, "run.2026-11-29"])
def test_valid_names(name):
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "../x", "a/b", "-a", ".a", "_a", "a b", "x" * 64, "a\nb", "ä", None])
def test_invalid_names(name):
    with pytest.raises(InvalidName) as info:
        validate_name(name)
    assert "\n" not in str(info.value)


def record(status=Status.RUNNING, stop_requested=False):
    return JobRecord(name="j", backend="host", status=status, stop_requested=stop_requested)


@pytest.mark.parametrize(
    "status, stop, seen, expected",
    [
        (Status.RUNNING, False, Observation(exit_code=0), Status.COMPLETED),
        (Status.RUNNING, False, Observation(exit_code=2), Status.FAILED),
        (Status.RUNNING, True, Observation(exit_code=143), Status.STOPPED),
        (Status.RUNNING, True, Observation(exit_code=0), Status.STOPPED),
        (Status.PENDING, False, Observation(alive=True, started=False), Status.PENDING),
        (Status.PENDING, False, Observation(alive=True, started=True), Status.RUNNING),
        (Status.RUNNING, False, Observation(alive=False), Status.LOST),
        (Status.RUNNING, True, Observation(alive=False), Status.STOPPED),
        (Status.RUNNING, False, Observation(alive=None), Status.RUNNING),
        (Status.COMPLETED, False, Observation(alive=False), Status.COMPLETED),
        (Status.LOST, False, Observation(exit_code=0), Status.LOST),
    ],
)
def test_resolve(status, stop, seen, expected):
    assert resolve(record(status, stop), seen).status is expected


def test_lost_says_why():
    outcome = resolve(record(), Observation(alive=False, why_gone="container x was removed"))
    assert outcome.status is Status.LOST and outcome.reason == "container x was removed"
    outcome = resolve(record(), Observation(alive=False))
    assert "without recording an exit code" in outcome.reason


def test_a_job_is_never_running_once_its_process_is_gone():
    for status in (Status.PENDING, Status.RUNNING):
        assert resolve(record(status), Observation(alive=False)).status.is_final


@pytest.mark.parametrize(
    "code, words", [(137, "out of memory"), (139, "segmentation fault"), (143, "SIGTERM"), (130, "signal 2"), (3, "3")]
)
def test_exit_code_diagnosis(code, words):
    assert words in describe_exit_code(code)


def test_record_round_trip():
    original = JobRecord(name="j", backend="docker", status=Status.FAILED, exit_code=1, options={"a": 1})
    copy = JobRecord.from_dict(original.to_dict())
    assert copy == original and copy.status is Status.FAILED


def test_a_reported_end_time_is_kept_between_the_start_and_now():
    from jupyter_trainer.jobs.job import _end_time

    record = JobRecord(name="t", backend="host", started_at=1000.5)
    assert _end_time(record, 1003.0) == 1003.0
    assert _end_time(record, 1000.0) == 1000.5  # a file time cut to whole seconds
    assert _end_time(record, time.time() + 3600) <= time.time()  # another machine's clock
    assert abs(_end_time(record, None) - time.time()) < 5
    # a reader whose clock is behind the job's start (set back a day): the job's report is kept
    later = JobRecord(name="t", backend="host", started_at=time.time() + 86400)
    assert _end_time(later, later.started_at + 6) == later.started_at + 6
    assert _end_time(later, None) == later.started_at  # never before its start


def test_a_failure_says_what_went_wrong_in_one_line():
    from jupyter_trainer.backends.sagemaker.reasons import headline
    from jupyter_trainer.core.record import Status, describe_outcome

    sagemaker = 'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: lr too high\nFile "train.py", line 3"\nCommand "python3 train.py"'
    assert headline(sagemaker) == "ValueError: lr too high"  # the backend reads it, once, as it learns the reason
    assert describe_outcome(Status.FAILED, 1, sagemaker, headline(sagemaker)) == "exit code 1: the script raised an error · ValueError: lr too high"
    assert describe_outcome(Status.FAILED, None, sagemaker, headline(sagemaker)) == "ValueError: lr too high"  # remote jobs have no exit code
    assert describe_outcome(Status.FAILED, None, sagemaker) == "AlgorithmError: ExecuteUserScriptError:"  # no headline: the first line
    assert describe_outcome(Status.FAILED, 1, "exit code 1: the script raised an error") == "exit code 1: the script raised an error"
    assert describe_outcome(Status.FAILED, None, "CapacityError: not enough capacity") == "CapacityError: not enough capacity"
    assert describe_outcome(Status.STOPPED, 143, "stopped by the user") == "exit code 143: terminated (SIGTERM)"
    assert describe_outcome(Status.COMPLETED, 0, "") == "exit code 0"
    assert describe_outcome(Status.LOST, None, "the job's process vanished") == "the job's process vanished"


def test_a_reason_is_never_read_for_words_of_a_runtime_that_did_not_write_it(store, fake_backend, backends):
    """The core takes a reason as it is: a script's exception that happens to hold SageMaker's words
    is said whole, and only a backend's own headline stands for its reason."""
    from jupyter_trainer.core.record import describe_outcome
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.view import summary

    said = 'RuntimeError: the API answered ErrorMessage "quota exceeded" and closed'
    assert describe_outcome(Status.FAILED, 1, said) == f"exit code 1: the script raised an error · {said}"
    assert describe_outcome(Status.FAILED, None, said) == said
    job = submit_detached(DetachedSpec(script="print(1)", backend="fake", workdir=str(store.home)), name="quota", store=store, backends=backends).job
    (job.run_dir / "output.log").write_text(f"Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n{said}\n")
    fake_backend.finish("quota", 1)
    job = Job.load("quota", store, backends).refresh()
    assert (job.record.status, job.record.reason, job.record.headline) == (Status.FAILED, said, "")
    assert summary.one_line(job.record, backends).endswith(f"| exit code 1: the script raised an error · {said}")


def test_the_exit_codes_words_are_replaced_by_what_the_script_raised_as_typed_state_says():
    """A failure whose reason is only its exit code's words says so (`reason_is_exit_code`), and
    only then does what the script raised take its place: the same words from a runtime that
    reported the failure itself are that runtime's, and kept."""
    by_code = resolve(record(), Observation(exit_code=1, alive=False, started=True))
    assert by_code.reason == describe_exit_code(1) and by_code.reason_is_exit_code
    reported = resolve(record(), Observation(final=Status.FAILED, exit_code=1, reason=describe_exit_code(1), alive=False))
    assert reported.reason == describe_exit_code(1) and not reported.reason_is_exit_code
    sagemaker = resolve(record(), Observation(final=Status.FAILED, reason='AlgorithmError:\nErrorMessage "ValueError: x"', headline="ValueError: x\x1b[2J"))
    assert sagemaker.headline == "ValueError: x" and not sagemaker.reason_is_exit_code  # readable, as the reason is
    ended = JobRecord(name="j", backend="host", status=Status.FAILED, exit_code=1, reason="r", headline="h")
    assert resolve(ended, Observation(exit_code=1)).headline == "h"
    assert JobRecord.from_dict(ended.to_dict()) == ended
    assert JobRecord.from_dict({k: v for k, v in ended.to_dict().items() if k != "headline"}).headline == ""  # an older record


def test_a_stop_that_never_reached_the_job_does_not_make_it_stopped():
    asked = JobRecord(name="j", backend="host", status=Status.RUNNING, stop_requested=True, stop_sent=False)
    vanished = resolve(asked, Observation(alive=False, why_gone="the container was removed"))
    assert vanished.status is Status.LOST
    assert vanished.reason.startswith("the container was removed; a stop had been asked for but never reached it")
    assert resolve(asked, Observation(exit_code=0)).status is Status.COMPLETED  # ended on its own
    assert resolve(asked, Observation(exit_code=143, stopped=True)).status is Status.STOPPED  # the supervisor did stop it
    sent = JobRecord(name="j", backend="host", status=Status.RUNNING, stop_requested=True, stop_sent=True)
    assert resolve(sent, Observation(alive=False)).status is Status.STOPPED
    older = JobRecord(name="j", backend="host", status=Status.RUNNING, stop_requested=True)  # before stop_sent was kept
    assert resolve(older, Observation(alive=False)).status is Status.STOPPED
    assert JobRecord.from_dict(asked.to_dict()) == asked


def test_an_unreachable_host_is_kept_as_typed_state_since_the_first_failed_look():
    from jupyter_trainer.backends import Backends
    from jupyter_trainer.view import summary

    running = JobRecord(name="j", backend="docker", status=Status.RUNNING, reason="cannot reach the Docker engine at unix:///x")
    first = resolve(running, Observation(alive=None, why_gone="cannot reach the Docker engine on gpu1", unreachable_host="gpu1"), now=1000.0)
    assert (first.status, first.unreachable_since, first.unreachable_host) == (Status.RUNNING, 1000.0, "gpu1")
    assert first.reason.startswith("cannot reach gpu1 since ")
    running.unreachable_since, running.unreachable_host, running.reason = first.unreachable_since, first.unreachable_host, first.reason
    later = resolve(running, Observation(alive=None, unreachable_host="gpu1"), now=2000.0)
    assert later.unreachable_since == 1000.0 and later.reason == first.reason  # since the first failure
    answered = resolve(running, Observation(alive=True, started=True))
    assert answered.unreachable_since is None and answered.status is Status.RUNNING
    # the host column reads the typed state, never the reason: a local engine that is down is no host's
    down = JobRecord(name="j", backend="docker", status=Status.RUNNING, reason="cannot reach the Docker engine at unix:///var/run/docker.sock")
    host_cell = lambda record: summary.record_row(record, Backends())[2]  # noqa: E731
    assert host_cell(down) == "local"
    assert host_cell(running).startswith("local (unreachable since ")
    assert JobRecord.from_dict(running.to_dict()) == running


def test_a_refresh_reads_the_record_again_only_once_it_has_changed(store, fake_backend, backends, monkeypatch):
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.jobs.submit import submit_detached
    from jupyter_trainer.spec.job_spec import DetachedSpec

    spec = DetachedSpec(script="x", backend="fake", workdir="/")
    job = submit_detached(spec, name="r", store=store, backends=backends).job
    job.refresh()
    job.refresh()  # what the first one recorded is read once
    loads = []
    load = store.load
    monkeypatch.setattr(store, "load", lambda *a, **k: (loads.append(a), load(*a, **k))[1])
    job.refresh()
    job.refresh()
    assert loads == []  # unchanged on disk: one lstat each, no read, no parse
    other = Job.load("r", store, backends)
    other.record = store.update("r", other.run, lambda record: record.runtime.update(note="changed elsewhere"))
    loads.clear()
    job.refresh()
    assert len(loads) == 1 and job.record.runtime["note"] == "changed elsewhere"
