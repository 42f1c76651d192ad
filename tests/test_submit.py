import os

import pytest

from jupyter_trainer.core.record import Status
from jupyter_trainer.errors import NameInUse, TrainerError
from jupyter_trainer.jobs.job import Job, get_job, list_jobs
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.spec.job_spec import DetachedSpec


def fake_spec(script="print(1)", env=None):
    return DetachedSpec(script=script, backend="fake", workdir=os.getcwd(), env=env or {})


def snapshot(store):
    """Every file in the store with its content (the store 'as it was')."""
    files = {}
    for root, _, names in os.walk(store.home):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                files[path] = handle.read()
    return files


def test_same_cell_attaches_and_starts_nothing(store, fake_backend, backends):
    first = submit_detached(fake_spec(), name="exp", store=store, backends=backends)
    assert not first.attached and fake_backend.launched == ["exp"]
    again = submit_detached(fake_spec(), name="exp", store=store, backends=backends)
    assert again.attached and "attached" in again.message and fake_backend.launched == ["exp"]
    fake_backend.finish("exp", 0)
    assert submit_detached(fake_spec(), name="exp", store=store, backends=backends).attached  # finished: still attaches
    assert fake_backend.launched == ["exp"]


def test_different_cell_under_a_running_name_is_refused(store, fake_backend, backends):
    submit_detached(fake_spec(), name="exp", store=store, backends=backends)
    get_job("exp", store, backends)  # settle the observed status, which a refresh records
    before = snapshot(store)
    with pytest.raises(NameInUse, match="running with a different cell"):
        submit_detached(fake_spec("print(2)"), name="exp", store=store, backends=backends)
    with pytest.raises(NameInUse):  # --rerun does not replace a running job
        submit_detached(fake_spec("print(2)"), name="exp", store=store, rerun=True, backends=backends)
    assert snapshot(store) == before


def test_different_cell_under_a_finished_name_needs_rerun(store, fake_backend, backends):
    submit_detached(fake_spec(), name="exp", store=store, backends=backends)
    fake_backend.finish("exp", 1)
    get_job("exp", store, backends)
    before = snapshot(store)
    with pytest.raises(NameInUse, match="--rerun"):
        submit_detached(fake_spec("print(2)"), name="exp", store=store, backends=backends)
    assert snapshot(store) == before
    rerun = submit_detached(fake_spec("print(2)"), name="exp", store=store, rerun=True, backends=backends)
    assert rerun.job.run == 2 and not rerun.attached
    assert store.runs("exp") == [1, 2] and store.load("exp", 1).status is Status.FAILED  # history kept
    assert submit_detached(fake_spec("print(2)"), name="exp", store=store, rerun=True, backends=backends).attached


def test_env_value_is_part_of_the_cell_but_never_stored(store, fake_backend, backends):
    submit_detached(fake_spec(env={"TOKEN": "hunter2"}), name="exp", store=store, backends=backends)
    with pytest.raises(NameInUse):
        submit_detached(fake_spec(env={"TOKEN": "other"}), name="exp", store=store, backends=backends)
    assert not any(b"hunter2" in content for content in snapshot(store).values())


def test_unnamed_cells_get_a_name_per_cell(store, fake_backend, backends):
    a = submit_detached(fake_spec(), store=store, backends=backends)
    assert submit_detached(fake_spec(), store=store, backends=backends).job.name == a.job.name
    b = submit_detached(fake_spec("print(2)"), store=store, backends=backends)
    assert b.job.name != a.job.name and fake_backend.launched == [a.job.name, b.job.name]


def test_failed_launch_leaves_the_store_as_it_was(store, fake_backend, backends):
    submit_detached(fake_spec(), name="other", store=store, backends=backends)
    before = snapshot(store)
    fake_backend.fail_launch = TrainerError("image 'x' is not on this machine")
    with pytest.raises(TrainerError):
        submit_detached(fake_spec(), name="exp", store=store, backends=backends)
    assert snapshot(store) == before and store.names() == ["other"]


def test_stop_marks_the_job_stopped(store, fake_backend, backends):
    job = submit_detached(fake_spec(), name="exp", store=store, backends=backends).job
    assert job.status is Status.RUNNING
    job.stop()
    assert fake_backend.stopped == [("exp", False)]
    assert get_job("exp", store, backends).status is Status.STOPPED and job.exit_code == 143


def test_vanished_process_is_lost_with_its_reason(store, fake_backend, backends):
    submit_detached(fake_spec(), name="exp", store=store, backends=backends)
    fake_backend.vanish("exp", "container c was removed while the job ran")
    job = get_job("exp", store, backends)
    assert job.status is Status.LOST and job.reason == "container c was removed while the job ran"
    fake_backend.finish("exp", 0)  # final states stay final
    assert Job.load("exp", store, backends).status is Status.LOST


def test_list_jobs(store, fake_backend, backends):
    for name in ("b", "a"):
        submit_detached(fake_spec(name), name=name, store=store, backends=backends)
    assert [job.name for job in list_jobs(store, backends=backends)] == ["b", "a"]


def test_rerun_skips_a_run_abandoned_half_created(store, fake_backend, backends):
    submit_detached(fake_spec(), name="exp", store=store, backends=backends)
    fake_backend.finish("exp", 0)
    store.run_dir("exp", 2).mkdir()  # claimed, never recorded
    assert get_job("exp", store, backends).run == 1
    assert submit_detached(fake_spec("print(2)"), name="exp", store=store, rerun=True, backends=backends).job.run == 3


def test_a_stop_asked_while_launching_is_carried_out(store, fake_backend, backends):
    original = fake_backend.launch

    def slow_launch(record, run_dir, spec):
        Job.load(record.name, store, backends).stop()  # another kernel stops it before the launch is recorded
        return original(record, run_dir, spec)

    fake_backend.launch = slow_launch
    submit_detached(fake_spec(), name="exp", store=store, backends=backends)
    assert fake_backend.stopped == [("exp", False)] and get_job("exp", store, backends).status is Status.STOPPED
