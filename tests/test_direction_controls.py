"""Unicode's direction controls a job writes never reach a reader.

"status: \\u202edeliaf\\u202c ok" reads "status: failed ok" wherever it is shown as written: the
right-to-left override turns what follows it around. Marks, embeddings, overrides and isolates
(U+200E, U+200F, U+061C, U+202A-U+202E, U+2066-U+2069) are dropped wherever job text reaches a
person, as terminal escapes are: logs, the widget, reasons, runtimes' words, notifications.
"""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import TEST_IMAGE

from jupyter_trainer.backends import Backends, build_spec
from jupyter_trainer.backends.sagemaker.reasons import kept_text, reason_from_file
from jupyter_trainer.core.record import JobRecord, Observation, Status, resolve
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.logs.reading import clean_line
from jupyter_trainer.logs.terminal import terminal_lines

DIRECTION_CONTROLS = "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
REVERSED = "status: \u202edeliaf\u202c ok"  # "status: failed ok", where it is shown as written
SHOWN = "status: deliaf ok"


def directed(text: str) -> list[str]:
    """The direction controls in `text`, by code point."""
    return [f"U+{ord(char):04X}" for char in text if char in DIRECTION_CONTROLS]


def cli(*words, timeout=60):
    return subprocess.run([sys.executable, "-m", "jupyter_trainer", *words], capture_output=True, text=True, timeout=timeout)


def widget_of(job, monkeypatch):
    import comm

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: comm.DummyComm(*a, **k))
    from jupyter_trainer.view.job_widget import JobWidget

    view = JobWidget(job)
    view.poll(now=time.time())
    return view


@pytest.mark.parametrize("control", list(DIRECTION_CONTROLS), ids=lambda char: f"U+{ord(char):04X}")
def test_each_direction_control_is_dropped_as_a_terminal_escape_is(control, tmp_path):
    written = f"loss \x1b[31m{control}0.5\x1b[0m done"
    assert terminal_lines(written) == ["loss 0.5 done"]  # a log's lines, as every view shows them
    assert clean_line(written) == "loss 0.5 done"
    assert kept_text(written) == "loss 0.5 done"  # a runtime's failure reason
    (tmp_path / "failure").write_text(written)
    assert reason_from_file(tmp_path / "failure") == "loss 0.5 done"  # local mode's failure file
    from jupyter_trainer.core.wording import readable  # the one place that says what is not shown

    assert readable(written) == "loss 0.5 done"


def test_right_to_left_text_itself_and_what_a_terminal_keeps_are_kept():
    """Only the controls go: Hebrew and Arabic letters, tabs, newlines and joiners are text."""
    from jupyter_trainer.core.wording import readable

    text = "שלום\tمرحبا\nline two\u200d"
    assert readable(text) == text
    assert terminal_lines(text) == ["שלום\tمرحبا", "line two\u200d"]


def test_a_log_that_reverses_its_words_is_shown_in_their_order(home, workdir, monkeypatch, capsys):
    """`logs`, `logs -n`, `logs -f`, %train_logs and the widget's log, of a real job."""
    script = f"print({REVERSED!r})\nprint('epoch 1 \\u2067loss: 0.25\\u2069')\nprint('epoch 2 loss=0.125\\u200f')\n"
    spec = build_spec(script, host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    job = submit_detached(spec, name="reversed").job
    assert job.wait(timeout=60) is Status.COMPLETED
    shown = {}
    for words in (["logs", "reversed"], ["logs", "reversed", "-n", "3"], ["logs", "reversed", "-f"]):
        said = cli(*words)
        assert said.returncode == 0, said.stderr
        shown[" ".join(words)] = said.stdout
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_trainer")
    capsys.readouterr()
    shell.run_line_magic("train_logs", "reversed")
    shown["%train_logs"] = capsys.readouterr().out
    shown["job.logs()"] = job.logs()
    shown["widget"] = widget_of(job, monkeypatch).log.value
    for where, text in shown.items():
        assert directed(text) == [] and SHOWN in text, (where, text)
    # what the log is read for is read as before: its bytes as the job wrote them, values whole
    assert "\u202e".encode() in job.log_source().read(0, 1 << 16)
    assert job.metrics() == {"loss": [(1, 0.25), (2, 0.125)]}


def test_a_runtime_reason_that_reverses_its_words_is_recorded_and_shown_readable(store, fake_backend, backends, monkeypatch, capsys):
    """A failure reason from the job's side (SageMaker's failure file, a runtime's words) in the
    record, `status`, `status --json`, `list`, the widget's header and the jobs table."""
    from jupyter_trainer.jobs.job import Job
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.surfaces import cli as command_line
    from jupyter_trainer.view.jobs_table import row_html

    spec = DetachedSpec(script="x", backend="fake", workdir=os.getcwd())
    job = submit_detached(spec, name="said", store=store, backends=backends).job
    fake_backend.observations["said"] = Observation(final=Status.FAILED, reason=f"AlgorithmError: {REVERSED}", alive=False, started=True)
    assert job.refresh().status is Status.FAILED
    assert job.reason == f"AlgorithmError: {SHOWN}"  # kept as it is shown
    # a record an older version wrote has the words as they came: they are shown readable all the same
    store.update("said", 1, lambda record: setattr(record, "reason", f"AlgorithmError: {REVERSED}"))
    job = Job.load("said", store, backends)
    shown = {}
    capsys.readouterr()
    for words in (["status", "said"], ["status", "said", "--json"], ["list", "--all"]):
        assert command_line.run(words, store, backends) == 0
        shown[" ".join(words)] = capsys.readouterr().out
    assert json.loads(shown["status said --json"])["reason"] == f"AlgorithmError: {SHOWN}"
    shown["widget"] = widget_of(job, monkeypatch).header.value
    shown["jobs table"] = "".join(row_html(job.record, backends))
    for where, text in shown.items():
        assert directed(text) == [], (where, text)
    assert SHOWN in shown["status said"] and SHOWN in shown["widget"] and SHOWN in shown["jobs table"]


def test_a_notification_says_what_the_script_raised_readable():
    """The notifier runs alone, on the job's python3, with wording.py's code before its own."""
    from jupyter_trainer.backends.base import notifier_source

    tail = f"Traceback (most recent call last):\n  File \"train.py\", line 1\nValueError: {REVERSED}\n"
    run_alone = {"__name__": "notifier"}
    exec(compile(notifier_source(), "notify", "exec"), run_alone)
    message = run_alone["build_message"]({"name": "j", "run": 1, "backend": "host"}, 1, "exited", 0.0, 60.0, tail)
    assert message["reason"] == f"ValueError: {SHOWN}" and directed(message["text"]) == [], message


def test_what_slurm_says_of_a_job_is_kept_and_shown_readable():
    """A pending job's reason, its partition and nodes: in the record's runtime, its reason, and
    where the views say it runs."""
    from jupyter_trainer.backends.base import SupervisorFacts
    from jupyter_trainer.backends.slurm import states
    from jupyter_trainer.backends.slurm.queue import SlurmJob
    from jupyter_trainer.view.words import where

    waiting = SlurmJob("7", "PENDING", "\u202eytiroirP", partition="gpu\u2066s", submitted_at=time.time())
    seen = states.observe(waiting, SupervisorFacts(), stop_requested=False, job_id="7")
    record = JobRecord(name="queued", backend="slurm", runtime={"job_id": "7", "submitted_at": time.time()})
    assert resolve(record, seen).reason == "ytiroirP"
    assert seen.details["pending_reason"] == "ytiroirP" and seen.details["partition"] == "gpus"
    # a runtime an older version kept as Slurm said it
    record.runtime.update({"pending_reason": "\u202eytiroirP", "node_list": "n\u202e1"})
    assert directed(where(record, Backends())) == []


OWN_TRAIN = """#!/usr/bin/env python3
import os, sys
os.makedirs("/opt/ml/output", exist_ok=True)
with open("/opt/ml/output/failure", "w") as handle:
    handle.write({reason!r})
sys.exit(1)
"""


@pytest.fixture
def failing_train_image(docker_client, tmp_path):
    """An image whose own `train` writes /opt/ml/output/failure and fails, as a SageMaker image does."""
    context = tmp_path / "image"
    context.mkdir()
    (context / "train").write_text(OWN_TRAIN.format(reason=f"AlgorithmError: {REVERSED}"))
    (context / "Dockerfile").write_text(f"FROM {TEST_IMAGE}\nCOPY train /opt/program/train\nRUN chmod +x /opt/program/train\nENV PATH=/opt/program:$PATH\n")
    tag = "jupyter-trainer-direction-controls:test"
    docker_client.images.build(path=str(context), tag=tag, rm=True, network_mode="none")
    yield tag
    docker_client.images.remove(tag, force=True)  # the test's own image


def test_a_failure_file_that_reverses_its_words_in_local_mode_is_shown_readable(failing_train_image, home, tmp_path, monkeypatch):
    """SageMaker local mode: the reason the image's own train wrote, in `status`, `status --json`,
    `list` and the widget."""
    from conftest import IN_CI

    __import__("sagemaker") if IN_CI else pytest.importorskip("sagemaker")
    from jupyter_trainer.jobs.job import Job

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    output = tmp_path / "output"
    output.mkdir()
    line = f"--name rtl --role arn:aws:iam::123456789012:role/SageMakerRole --instance-type local --output-path file://{output} --no-widget --image-uri {failing_train_image}"
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "--quick", "--no-banner", "-c", f"%load_ext jupyter_trainer\n%sagemaker_fit {line}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "rtl: " in done.stdout, done.stdout + done.stderr
    job = Job.load("rtl")
    assert job.wait(timeout=300) is Status.FAILED, job.logs()
    assert SHOWN in job.reason and directed(job.reason) == [], job.reason
    shown = {}
    for words in (["status", "rtl"], ["status", "rtl", "--json"], ["list", "--all"]):
        said = cli(*words, timeout=120)
        assert said.returncode == 0, said.stderr
        shown[" ".join(words)] = said.stdout
    assert SHOWN in json.loads(shown["status rtl --json"])["reason"]
    shown["widget"] = widget_of(Job.load("rtl"), monkeypatch).header.value
    for where, text in shown.items():
        assert directed(text) == [], (where, text)
    assert SHOWN in shown["status rtl"] and SHOWN in shown["widget"]


def test_metric_names_a_job_forged_into_the_metrics_cache_are_never_shown(store, fake_backend, backends):
    """The charts and tables show metric names: the reader's are printable ASCII, and the cache
    beside the record (which a job can write) is not taken when it names others."""
    from jupyter_trainer.metrics import cache as metrics_cache
    from jupyter_trainer.spec.job_spec import DetachedSpec
    from jupyter_trainer.view.monitor import JobMonitor

    job = submit_detached(DetachedSpec(script="x", backend="fake", workdir=os.getcwd()), name="forged", store=store, backends=backends).job
    with open(job.run_dir / "output.log", "a") as log:
        log.write("".join(f"step {step} loss: {1 / step}\n" for step in range(1, 101)))
    first = JobMonitor(job, read_budget=1 << 30)
    first.start()
    while not first.caught_up:
        first.read_log()
    metrics_cache.save(job.run_dir, first.metric_options, first.cursor.line_start, job.log_source(), first.metrics, first.reader)
    cache = job.run_dir / "metrics.json"
    cache.write_text(cache.read_text().replace('"loss"', '"\\u202essol"'))  # "loss", as it would read
    again = JobMonitor(job, read_budget=1 << 30)
    again.start()
    while not again.caught_up:
        again.read_log()
    assert again.metrics.names() == ["loss"] and again.metrics.counts == {"loss": 100}
