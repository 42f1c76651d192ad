"""The live jobs table (`%train_jobs` in a notebook), on real host jobs, with a recording comm."""

import re

import pytest
from conftest import wait_for

from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.record import Status
from jupyter_trainer.jobs.job import get_job
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.view import summary
from jupyter_trainer.view.jobs_table import JobsTable

pytestmark = pytest.mark.usefixtures("quiet_comm")  # see conftest


def host_job(name, script, workdir):
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    return submit_detached(spec, name=name).job


def text_of(html):
    return re.sub(r"<[^>]+>", "", html)


def rows_of(table):
    """What each shown row says, in order: its cells by their column (fields.ROW_COLUMNS)."""
    from jupyter_trainer.view.fields import ROW_COLUMNS

    shown = []
    for box in table.body.children:
        row = next(row for row in table.rows.values() if row.box is box)
        shown.append({key: text_of(cell.value) for (key, _title), cell in zip(ROW_COLUMNS, row.cells, strict=True)})
    return shown


def rescan(table):
    table.last_scan = float("-inf")
    for row in table.rows.values():
        row.checked_at = float("-inf")
    table.poll(0)


LOSSES = "import time\nfor step in range(3):\n    print(f'step {step} loss: {1 / (step + 1):.3f} lr: 0.1', flush=True)\n"


def test_rows_newest_first_with_status_where_elapsed_and_main_metric(home, workdir):
    host_job("first", LOSSES, workdir).wait(timeout=30)
    host_job("second", LOSSES + "time.sleep(600)\n", workdir)
    wait_for(lambda: "loss: 0.333" in get_job("second").logs(), what="the second job's losses")
    table = JobsTable()
    rows = rows_of(table)
    assert [row["name"] for row in rows] == ["second", "first"]
    assert rows[0]["status"] == "running" and rows[1]["status"] == "completed" and rows[1]["exit_code"] == "0"
    assert rows[0]["backend"] == "host" and rows[1]["metric"] == "loss 0.333"
    assert rows[0]["metric"] == "loss 0.333" and re.fullmatch(r"\d+s", rows[0]["duration"])
    # the same columns as the text table's
    assert tuple(rows[1].values()) == summary.record_row(get_job("first").record, table.backends, "loss 0.333")
    assert "1 completed" in text_of(table.counts.value) and "1 running" in text_of(table.counts.value)
    # the filter shows one status
    table.filter.value = "running"
    assert [row["name"] for row in rows_of(table)] == ["second"]
    table.filter.value = "completed"
    assert [row["name"] for row in rows_of(table)] == ["first"]
    # a stop from its row: the row says so at the next scans, and leaves the filtered view
    table.filter.value = "running"
    second = table.rows[("second", 1)]
    second.buttons[2].click()
    assert second.buttons[2].disabled
    wait_for(lambda: (rescan(table), get_job("second").status is Status.STOPPED)[1], what="the stop")
    rescan(table)
    assert rows_of(table) == []
    table.filter.value = "all"
    assert (rows_of(table)[0]["name"], rows_of(table)[0]["status"]) == ("second", "stopped")


def test_new_removed_and_unreadable_jobs_show_at_the_next_scan(home, workdir, capsys):
    table = JobsTable()
    assert rows_of(table) == [] and "no jobs yet" in table.counts.value
    host_job("later", "print('hello from later')\n", workdir).wait(timeout=30)
    host_job("broken", "print(1)\n", workdir).wait(timeout=30)
    rescan(table)
    assert [(row["name"], row["status"]) for row in rows_of(table)] == [("broken", "completed"), ("later", "completed")]
    (home / "jobs" / "broken" / "1" / "record.json").write_text("{not json")
    rescan(table)
    assert [row["name"] for row in rows_of(table)] == ["later"] and "broken" in text_of(table.notes.value)
    # the log of a row, below the table
    table.rows[("later", 1)].buttons[1].click()
    assert "hello from later" in capsys.readouterr().out + "".join(o.get("text", "") for o in table.detail.outputs)
    from jupyter_trainer.jobs.housekeeping import remove_runs

    remove_runs("later")
    rescan(table)
    assert rows_of(table) == []


def test_a_closed_table_is_no_longer_polled(home):
    table = JobsTable()
    assert table.poll(0) is True
    table.box.close()
    assert table.poll(0) is False


def test_only_the_rows_shown_have_widgets(store, fake_backend, backends):
    import os

    from jupyter_trainer.core.record import Observation
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.view.jobs_table import MAX_ROWS

    for index in range(MAX_ROWS + 20):
        submit_detached(DetachedSpec(script=f"print({index})", backend="fake", workdir=os.getcwd()), name=f"many-{index}", store=store, backends=backends)
        fake_backend.observations[f"many-{index}"] = Observation(alive=False, exit_code=index % 2)
    table = JobsTable(store, backends=backends)
    assert len(table.body.children) == MAX_ROWS and "20 older jobs not shown" in table.notes.value
    assert sum(row.box is not None for row in table.rows.values()) == MAX_ROWS
    table.filter.value = "failed"  # the older failed ones come into view now, and only then get widgets
    assert len(table.body.children) == (MAX_ROWS + 20) // 2
    assert sum(row.box is not None for row in table.rows.values()) == MAX_ROWS + 10


def test_every_button_of_an_earlier_runs_row_acts_on_that_run(home, workdir, capsys):
    """With --all, an earlier run has a row of its own: its Attach opens that run's view (whose
    Stop cannot reach the newest run), its Log shows that run's log."""
    from jupyter_trainer.backends import build_spec

    host_job("twice", "print('the first run')\n", workdir).wait(timeout=30)
    spec = build_spec("print('the second run')\nimport time\ntime.sleep(600)\n", host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    second = submit_detached(spec, name="twice", rerun=True).job
    wait_for(lambda: "the second run" in second.logs(), what="the second run's output")
    table = JobsTable(all_runs=True)
    first_row = table.rows[("twice", 1)]
    first_row.buttons[0].click()  # Attach
    view = table.attached
    assert view is not None and view.job.record.run == 1
    assert view.job.record.status is Status.COMPLETED
    view.job.stop()  # what its Stop button does: a finished run, so nothing is stopped
    assert get_job("twice").status is Status.RUNNING
    first_row.buttons[1].click()  # Log
    shown = capsys.readouterr().out + "".join(o.get("text", "") for o in table.detail.outputs)
    assert "the first run" in shown and "the second run" not in shown and "--- twice: the last" in shown
    second.stop()


def test_a_sweep_is_one_row_and_its_runs_rows_come_with_all(home, workdir, quiet_comm):
    """The jobs table shows a sweep as one row (its progress in its status), as `list` does; with
    --all its runs have rows of their own; its Stop stops every run."""
    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.jobs.sweeps import submit_sweep

    spec = build_spec("import time\nprint('loss 0.5', flush=True)\ntime.sleep(60)\n", host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    sweep = submit_sweep(spec, ["lr=1,2,3"], name="grid", max_running=1)
    assert [each.job.name for each in sweep.submissions] == ["grid-1", "grid-2", "grid-3"]
    table = JobsTable(JobStore(home))
    wait_for(lambda: (rescan_sweeps(table) or True) and "1 running" in text_of(table.sweep_rows["grid"].cells[3].value), what="the sweep's row to say one runs")
    assert len(table.body.children) == 1 and table.body.children[0] is table.sweep_rows["grid"].box
    assert "running sweep: 0 of 3 done, 1 running, 2 waiting" in text_of(table.sweep_rows["grid"].cells[3].value)
    everything = JobsTable(JobStore(home), all_runs=True)
    assert len(everything.body.children) == 3 and not everything.sweep_rows
    table.sweep_rows["grid"].buttons[2].click()
    wait_for(lambda: all(get_job(f"grid-{index}").status is Status.STOPPED for index in (1, 2, 3)), timeout=60, what="every run to stop")
    assert get_job("grid-3").record.started_at is None  # stopped while it waited: never started


def rescan_sweeps(table):
    table.last_scan = float("-inf")
    table.poll(table.clock())
