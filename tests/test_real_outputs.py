"""Metrics read from what real training loggers print, not from imitations of it.

The scripts in real_loggers/ run the real libraries: tqdm (the project's own), and in a virtualenv
this module builds once and keeps (pinned releases from PyPI, PyTorch's CPU build from the file
this machine keeps on disk) Keras 3's model.fit, Hugging Face's Trainer and PyTorch Lightning 2's
Trainer; PyTorch Lightning 1.9 runs in the Debian bookworm image with python3-torch 1.13 (wheels
downloaded here, installed in the container without a network). Each log is read three ways: fed to
a MetricReader whole, fed in pieces ending at every \\r and \\n, and through the job that wrote it
(`Job.metrics()`, `Job.metric_axes()`); all three must give the expected series.

What is expected comes from what each library was given (the script records the values it handed
its progress bar or logger) and from where the log says training was: the step when it prints one,
else the epoch (`Epoch 3/10` counts from 1, `Epoch 3:` from 0, a bar's n/total adds a fraction of
an epoch), else a bare bar's n. A bar redrawn at the same x replaces that x's value.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import IN_CI

from jupyter_trainer.jobs.job import get_job
from jupyter_trainer.metrics.reader import MetricReader

SCRIPTS = Path(__file__).resolve().parent / "real_loggers"

# The loggers' virtualenv. torch is the CPU build this machine keeps on disk (pip's find-links):
# from PyPI, torch is a CUDA build of several GB.
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-*.whl"
LOGGER_REQUIREMENTS = (
    "keras==3.15.1",
    "transformers==5.24.0",
    "accelerate==1.15.0",
    "pytorch-lightning==2.6.6",
    "tqdm==4.70.1",
    "numpy==2.4.6",
    "rich==15.0.0",  # Lightning 2 draws its RichProgressBar by default when rich is installed (keras brings it)
)
# PyTorch Lightning 1.9 for Debian's torch 1.13 (which has numpy, PyYAML and typing_extensions already)
LIGHTNING_1_9 = (
    "pytorch-lightning==1.9.5",
    "torchmetrics==0.11.4",
    "lightning-utilities==0.8.0",
    "fsspec==2023.3.0",
    "tqdm==4.70.1",
    "packaging==23.0",
)
CACHE = Path(tempfile.gettempdir()) / "jupyter-trainer-test-loggers"
JOB_TIMEOUT = 240

# how precisely each library prints a value
KERAS_PRINTS = {"rel": 1e-3, "abs": 5.1e-5}  # f"{v:.4f}", or f"{v:.4e}" below 1e-3
HF_PRINTS = {"rel": 6e-4, "abs": 0.0}  # f"{v:.4g}"
LIGHTNING_PRINTS = {"rel": 5.1e-3, "abs": 5.1e-4}  # tqdm's f"{v:.3g}" padded with zeros ("1.690"); rich: f"{v:.3f}"
TQDM_PRINTS = {"rel": 6e-3, "abs": 0.0}  # f"{v:.3g}"


# -- what is expected ------------------------------------------------------------------------


def redrawn(drawn):
    """The series a sequence of drawn (x, value) gives: a redraw at the same x replaces the value."""
    series = []
    for x, value in drawn:
        if series and math.isclose(series[-1][0], x, abs_tol=1e-9):
            series[-1] = (x, value)
        else:
            series.append((x, value))
    return series


def series_of(draws):
    """{name: series} from draws, each (x, {name: value}) as one redraw shows them."""
    drawn = {}
    for x, values in draws:
        for name, value in values.items():
            drawn.setdefault(name, []).append((x, value))
    return {name: redrawn(points) for name, points in drawn.items()}


def same_series(read, expected, rel, abs):
    return len(read) == len(expected) and all(
        math.isclose(x, ex, abs_tol=1e-9) and math.isclose(value, ev, rel_tol=rel, abs_tol=abs)
        for (x, value), (ex, ev) in zip(read, expected)
    )


def check(what, read, axes, expected, axis, tolerance):
    """`read`/`axes` as `Job.metrics()`/`metric_axes()` give them; `expected` {name: series}, all on `axis`."""
    shown = lambda series: [(round(x, 4), value) for x, value in series]  # noqa: E731
    assert sorted(read) == sorted(expected), f"{what}: metric names {sorted(read)}, expected {sorted(expected)}"
    for name in expected:
        assert axes[name] == axis, f"{what}: {name} is read on the {axes[name]!r} axis, expected {axis!r}"
        assert same_series(read[name], expected[name], **tolerance), (
            f"{what}: {name} read as\n  {shown(read[name])}\nexpected\n  {shown(expected[name])}"
        )


def read_log(data: bytes, pieces: bool):
    points = []
    reader = MetricReader(points.append)
    if pieces:  # as a log is followed: each piece ends at a \r or \n
        for piece in re.split(rb"(?<=[\r\n])", data):
            if piece:
                reader.feed(piece)
    else:
        reader.feed(data)
    reader.flush()
    read, axes = {}, {}
    for name, axis, x, value in points:
        read.setdefault(name, []).append((x, value))
        axes.setdefault(name, axis)
    return read, axes


def check_log(what, data, expected, axis, tolerance):
    for pieces, how in ((False, "fed whole"), (True, "fed in pieces ending at \\r and \\n")):
        read, axes = read_log(data, pieces)
        check(f"{what} ({how})", read, axes, expected, axis, tolerance)
    check_any_reading(what, data)


def check_any_reading(what, data, seeds=range(3)):
    """The points read from `data` whatever its reads' boundaries (random, inside redraws, lines and
    characters), and with the reading handed over to another reader through the metrics cache
    halfway (a new kernel catching up), are the points of one read."""
    from test_one_series import difference, points_of, points_read_in_pieces

    whole = points_of(data)
    for seed in seeds:
        differs = difference(points_read_in_pieces(data, seed), whole)
        assert differs is None, f"{what}: read in random pieces (seed {seed}): {differs}"


def check_job(name, expected, axis, tolerance):
    """The job's log read by MetricReader and by the job itself."""
    job = get_job(name)
    source = job.log_source()
    check_log(f"job {name}'s log", source.read(0, source.size()), expected, axis, tolerance)
    check(f"job {name}", job.metrics(), job.metric_axes(), expected, axis, tolerance)


# -- running the loggers -----------------------------------------------------------------------


def unavailable(message):
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _cache_dir(name, key):
    digest = hashlib.sha256(repr((key, sys.version, sys.platform)).encode()).hexdigest()[:16]
    path = CACHE / f"{name}-{digest}"
    CACHE.mkdir(parents=True, exist_ok=True)
    return path


class _Locked:
    """Holds an exclusive lock beside `path` (another pytest process may build the same cache)."""

    def __init__(self, path):
        self.path = Path(f"{path}.lock")

    def __enter__(self):
        self.file = open(self.path, "w")
        fcntl.flock(self.file, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def _run(command, what, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        unavailable(f"{what} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done


def _local_torch_wheel():
    """PyTorch's CPU wheel in one of pip's find-links folders, or None."""
    config = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    folders = [Path(folder) for line in config.splitlines() if ".find-links=" in line
               for folder in line.split("=", 1)[1].strip("'\"").split()]
    for folder in folders:
        found = sorted(folder.glob(TORCH_WHEEL)) if folder.is_dir() else []
        if found:
            return found[-1]
    return None


@pytest.fixture(scope="session")
def logger_python():
    """The interpreter of a virtualenv with the loggers' libraries, built once and kept."""
    venv = _cache_dir("venv", LOGGER_REQUIREMENTS + (TORCH_WHEEL,))
    python = venv / "bin" / "python"
    ready = venv / "ready"
    with _Locked(venv):
        if not ready.exists():
            wheel = _local_torch_wheel()
            if wheel is None:
                unavailable(f"no {TORCH_WHEEL} in pip's find-links folders: PyTorch's CPU build (2.13.0) is "
                            "kept on this kind of machine, and from PyPI torch is a CUDA build of several GB")
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], "creating the loggers' virtualenv")
            _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel),
                  *LOGGER_REQUIREMENTS], "installing the loggers (keras, transformers, pytorch-lightning)",
                 timeout=1200)
            ready.write_text("\n".join(LOGGER_REQUIREMENTS) + "\n")
    return str(python)


@pytest.fixture(scope="module")
def jobs_home(tmp_path_factory):
    """One store for this module's jobs, as JUPYTER_TRAINER_HOME."""
    home = tmp_path_factory.mktemp("real-outputs") / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_TRAINER_HOME", str(home))
        patch.setenv("OMP_NUM_THREADS", "1")  # the jobs run side by side
        yield home


def submit(name, script, *args, interpreter=None, workdir):
    """`jupyter-trainer submit --host` from a shell, as a user would."""
    cli = Path(sys.executable).with_name("jupyter-trainer")
    command = [str(cli)] if cli.exists() else [sys.executable, "-m", "jupyter_trainer"]
    command += ["submit", str(SCRIPTS / script), "--host", "--name", name, "--workdir", str(workdir)]
    if interpreter:
        command += ["--interpreter", interpreter]
    done = subprocess.run([*command, "--", *map(str, args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"submitting {name} failed: {done.stdout}{done.stderr}"


def finished(name):
    job = get_job(name)
    status = job.wait(timeout=JOB_TIMEOUT)
    source = job.log_source()
    log = source.read(0, source.size()).decode("utf-8", "replace")
    assert status.value == "completed", f"job {name} is {status.value}; its log ends:\n{log[-3000:]}"
    return job


@pytest.fixture(scope="module")
def logger_jobs(logger_python, jobs_home, tmp_path_factory):
    """The loggers' jobs, submitted together (they run side by side); {job: its record file}."""
    work = tmp_path_factory.mktemp("logger-jobs")
    records = {}
    for name, script, *args in (
        ("keras-progbar", "keras_fit.py", "auto"),
        ("keras-verbose-2", "keras_fit.py", "2"),
        ("keras-evaluate", "keras_fit.py", "auto", "evaluate"),
        ("hf-progress", "hf_train.py", work / "hf-progress", "bar"),
        ("hf-printer", "hf_train.py", work / "hf-printer", "printer"),
        ("lightning-tqdm", "lightning_fit.py", "tqdm"),
        ("lightning-default", "lightning_fit.py", "default"),
    ):
        records[name] = work / f"{name}.json"
        submit(name, script, records[name], *args, interpreter=logger_python, workdir=work)
    yield records
    for name in records:  # none is left running after a failure
        get_job(name).stop()


def record_of(logger_jobs, name):
    finished(name)
    return json.loads(logger_jobs[name].read_text())


# -- tqdm ----------------------------------------------------------------------------------------


def run_tqdm_to_file(kind, tmp_path):
    log = tmp_path / f"tqdm-{kind}.log"
    subprocess.run([sys.executable, str(SCRIPTS / "tqdm_bars.py"), kind, str(log)], check=True, timeout=60)
    return log.read_bytes()


def test_tqdm_bar_updated_by_hand_into_a_file(tmp_path):
    data = run_tqdm_to_file("update", tmp_path)
    # a non-tty file gets every redraw after a \r: "\r 40%|████      | 2/5 [00:00<00:00, 6947.60it/s, loss=0.5, lr=6e-5]"
    assert b"\r" in data and b"loss=0.5, lr=6e-5]" in data, data
    draws = [(k, {"loss": round(1.0 / k, 3), "lr": 3e-05 * k}) for k in range(1, 6)]
    check_log("tqdm's bar updated by hand", data, series_of(draws), "step", TQDM_PRINTS)


def tqdm_loop_expected():
    # `for k in tqdm(range(5))`: step k's loss is drawn at n = k (before the loop counts it), then again
    # at n = k + 1 until the next step's replaces it; the bar closes at n = 5 with the last loss
    losses = [round(2.0 / (k + 1), 3) for k in range(5)]
    draws = [(n, {"loss": loss}) for k, loss in enumerate(losses) for n in (k, k + 1)]
    return series_of(draws)


def test_tqdm_at_its_own_pace_keeps_every_value_however_the_log_is_read(tmp_path):
    """tqdm draws n at most every 0.1 s but the postfix at every set_postfix: 1,140 steps over three
    bars, each of more than 64 KB of redraws; every value set is read, in order, at the epoch where
    its bar was, whether the log is read whole or poll by poll."""
    data = run_tqdm_to_file("lagging", tmp_path)
    assert max(len(line) for line in data.split(b"\n")) > 64 << 10
    read, axes = read_log(data, pieces=False)
    assert axes == {"loss": "epoch", "accuracy": "epoch", "lr": "epoch"}
    # and the last bar closes at its total with the last value, as tqdm draws it
    assert [value for _, value in read["loss"]] == [1000.0 + step for step in range(1140)] + [2139.0]
    xs = [x for x, _ in read["loss"]]
    assert xs == sorted(xs) and xs[0] == 0.0 and xs[-1] <= 3.0 and len(set(xs)) > 1100, xs[:20]
    check_any_reading("tqdm at its own pace", data)


def test_nested_tqdm_bars_read_the_same_however_the_log_is_read(tmp_path):
    data = run_tqdm_to_file("nested", tmp_path)
    assert b"\x1b[A" in data  # the inner bar moves the cursor between the two lines
    read, _ = read_log(data, pieces=False)
    assert [value for _, value in read["loss"]] == [1.0, 0.5, 0.333, 0.333]  # the bar closes at n=3 with the last
    assert len(read["val_loss"]) >= 20  # the inner bar's first run at least (its n starts again each epoch)
    check_any_reading("nested tqdm bars", data)


def test_a_bar_over_the_epochs_puts_its_nested_bars_values_along_the_run(tmp_path):
    """`for epoch in tqdm(range(3), desc="Epochs")` around a batches' bar: the outer bar's n is the
    epochs done, the inner bar's n/total how far into the next one, so each epoch's values follow
    the last one's instead of starting again at 0."""
    data = run_tqdm_to_file("epochs-bar", tmp_path)
    read, axes = read_log(data, pieces=False)
    assert axes == {"loss": "epoch"}
    xs = [x for x, _ in read["loss"]]
    assert xs == sorted(xs) and xs[0] == 0.0 and xs[-1] == 3.0, xs
    # every batch's value, at its batch: epoch e's k-th at e + k/10 (its last drawn again as the bar closes)
    expected = [(epoch + k / 10, round(3.0 - epoch - k / 10, 3)) for epoch in range(3) for k in range(10)]
    assert [(round(x, 4), value) for x, value in read["loss"]][: len(expected)] == expected
    check_any_reading("a bar over the epochs", data)


def test_tqdm_loop_into_a_file(tmp_path):
    data = run_tqdm_to_file("loop", tmp_path)
    check_log("tqdm's bar over a loop", data, tqdm_loop_expected(), "step", TQDM_PRINTS)


def test_tqdm_bars_described_by_epoch_into_a_file(tmp_path):
    data = run_tqdm_to_file("epochs", tmp_path)
    assert b"\rEpoch 2/2:  25%|" in data, data
    # "Epoch 1/2" counts from 1: its bar's n/4 is x = 0 + n/4; the loss of step k is drawn at n = k and
    # n = k + 1. The next epoch's first redraw (n = 0 of "Epoch 2/2", x = 1.0) replaces the last
    # epoch's closing value at that same x.
    draws = [
        (epoch + n / 4, {"loss": round(epoch + (k + 1) / 10, 3)})
        for epoch in range(2)
        for k in range(4)
        for n in (k, k + 1)
    ]
    check_log("tqdm's bars described 'Epoch 1/2'", data, series_of(draws), "epoch", TQDM_PRINTS)


def test_tqdm_loop_through_a_host_job(jobs_home, tmp_path):
    submit("tqdm-loop", "tqdm_bars.py", "loop", interpreter=sys.executable, workdir=tmp_path)
    finished("tqdm-loop")
    check_job("tqdm-loop", tqdm_loop_expected(), "step", TQDM_PRINTS)


# -- Keras 3 -------------------------------------------------------------------------------------


def keras_expected(record):
    steps, epochs = record["steps"], record["epochs"]
    assert len(steps) == 12 and len(epochs) == 3, record
    # "Epoch 2/3" above the bar, then "\r2/4 ━━━━━━━━━━━━━━━━━━━━ 0s 61ms/step - accuracy: 0.5417 - loss: 0.6783"
    # at x = 1 + 2/4, and at the epoch's end its 4/4 again with the validation values: x = 2.0
    draws = []
    for epoch in range(3):
        draws += [(epoch + (k + 1) / 4, steps[epoch * 4 + k]) for k in range(4)]
        draws.append((epoch + 1.0, epochs[epoch]))
    return series_of(draws)


@pytest.mark.timeout(1500)
def test_keras_fit_progress_bar(logger_jobs):
    check_job("keras-progbar", keras_expected(record_of(logger_jobs, "keras-progbar")), "epoch", KERAS_PRINTS)


@pytest.mark.timeout(1500)
def test_keras_evaluate_after_fit_leaves_the_training_values(logger_jobs):
    """model.evaluate after fit draws a bar of its own below the last epoch's, with no heading and
    unprefixed names: "\r1/1 ━━━━━━━━━━━━━━━━━━━━ 0s 3ms/step - accuracy: 0.3750 - loss: 0.7261".
    Those are the validation data's values, not training's: whatever series they are read into, the
    training loss and accuracy of epoch 3 (x = 3.0) stay what fit printed."""
    record = record_of(logger_jobs, "keras-evaluate")
    expected = keras_expected(record)
    assert set(record["evaluated"]) == {"loss", "accuracy"}, record
    assert not math.isclose(record["evaluated"]["loss"], expected["loss"][-1][1], abs_tol=1e-3), record
    job = get_job("keras-evaluate")
    source = job.log_source()
    for what, (read, _) in (
        ("fed whole", read_log(source.read(0, source.size()), pieces=False)),
        ("fed in pieces", read_log(source.read(0, source.size()), pieces=True)),
        ("the job's metrics()", (job.metrics(), None)),
    ):
        for name in ("loss", "accuracy"):
            training = read[name][: len(expected[name])]
            assert same_series(training, expected[name], **KERAS_PRINTS), (
                f"keras-evaluate ({what}): {name} read as\n  {training}\nexpected fit's\n  {expected[name]}"
            )


@pytest.mark.timeout(1500)
def test_keras_fit_verbose_2(logger_jobs):
    record = record_of(logger_jobs, "keras-verbose-2")
    # "Epoch 2/3" then "4/4 - 0s - 65ms/step - accuracy: 0.5208 - loss: 0.6924 - val_accuracy: ...": x = 2.0
    draws = [(epoch + 1.0, values) for epoch, values in enumerate(record["epochs"])]
    assert len(draws) == 3, record
    check_job("keras-verbose-2", series_of(draws), "epoch", KERAS_PRINTS)


# -- Hugging Face transformers ---------------------------------------------------------------------

# what the Trainer logs that is a metric; the rest (runtimes, samples per second, flos) is not
HF_METRICS = {"loss", "grad_norm", "learning_rate", "eval_loss", "train_loss"}


def hf_expected(history):
    # each log is printed as one dict, "{'loss': '0.873', 'grad_norm': '1.26', 'learning_rate':
    # '0.04375', 'epoch': '0.5'}", at its own 'epoch' (the history's "step" is not printed)
    draws = [(entry["epoch"], {k: v for k, v in entry.items() if k in HF_METRICS}) for entry in history]
    assert {name for _, values in draws for name in values} == HF_METRICS, history
    return series_of(draws)


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("name", ["hf-progress", "hf-printer"])
def test_hugging_face_trainer(logger_jobs, name):
    check_job(name, hf_expected(record_of(logger_jobs, name)), "epoch", HF_PRINTS)


# -- PyTorch Lightning ---------------------------------------------------------------------------


def lightning_tqdm_expected(record, validation_in_main_bar):
    """The TQDMProgressBar's series: "Epoch 0:  50%|█████     | 2/4 [..., train_loss=0.709]" is x = 0 + 2/4.
    Lightning 1.x counts the validation batches in the main bar (2 + 4 batches: 6), redrawing it with
    the last training values as they run; at the epoch's end (n = total) the validation values join."""
    train_batches, val_batches = 4, 2
    total = train_batches + val_batches if validation_in_main_bar else train_batches
    steps, epochs = record["steps"], record["epochs"]
    assert len(steps) == 2 * train_batches and len(epochs) == 2, record
    draws = []
    for epoch in range(2):
        last = steps[epoch * train_batches + train_batches - 1]
        draws += [(epoch + (k + 1) / total, steps[epoch * train_batches + k]) for k in range(train_batches)]
        if validation_in_main_bar:
            draws += [(epoch + (train_batches + j) / total, last) for j in range(1, val_batches + 1)]
        draws.append((epoch + 1.0, epochs[epoch]))
    return series_of(draws)


@pytest.mark.timeout(1500)
def test_lightning_2_tqdm_progress_bar(logger_jobs):
    record = record_of(logger_jobs, "lightning-tqdm")
    assert record["version"].startswith("2."), record
    check_job("lightning-tqdm", lightning_tqdm_expected(record, validation_in_main_bar=False), "epoch",
              LIGHTNING_PRINTS)


@pytest.mark.timeout(1500)
def test_lightning_2_default_progress_bar(logger_jobs):
    """With rich installed, Lightning 2 draws a RichProgressBar. Into a file it prints its last state
    once: "Epoch 1/1  ━━━━━━━━━━━━━━━━━━ 4/4 0:00:00 • 0:00:00 43.53it/s train_loss: 0.166" with
    "val_loss: 0.119" on the next line. Its "Epoch 1/1" is the epoch's index over the last index
    (f"Epoch {current_epoch}/{max_epochs - 1}"): the second and last of two, at its end: x = 2.0."""
    record = record_of(logger_jobs, "lightning-default")
    job = get_job("lightning-default")
    log = job.log_source().read(0, job.log_source().size())
    assert "Epoch 1/1 ".encode() in log and "━".encode() in log and b"\r" not in log, log[-600:]
    check_job("lightning-default", series_of([(2.0, record["epochs"][-1])]), "epoch", LIGHTNING_PRINTS)


@pytest.fixture(scope="session")
def lightning_1_9_site(torch_image, docker_client):
    """PyTorch Lightning 1.9 installed for the torch image's Python, in a folder kept here (the
    container installs the wheels downloaded here, without a network)."""
    folder = _cache_dir("lightning-1.9", LIGHTNING_1_9 + (torch_image,))
    wheels, site, ready = folder / "wheels", folder / "site", folder / "ready"
    with _Locked(folder):
        if not ready.exists():
            shutil.rmtree(folder, ignore_errors=True)
            wheels.mkdir(parents=True)
            site.mkdir()
            _run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                  "--only-binary=:all:", "-d", str(wheels), *LIGHTNING_1_9],
                 "downloading PyTorch Lightning 1.9's wheels", timeout=600)
            names = [requirement.split("==")[0] for requirement in LIGHTNING_1_9]
            output = docker_client.containers.run(
                torch_image,
                ["python3", "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--find-links", "/wheels",
                 "--target", "/site", *names],
                volumes={str(wheels): {"bind": "/wheels", "mode": "ro"}, str(site): {"bind": "/site", "mode": "rw"}},
                user=f"{os.getuid()}:{os.getgid()}", environment={"HOME": "/tmp"}, network_disabled=True,
                remove=True, stderr=True,
            )
            if not (site / "pytorch_lightning").is_dir():
                unavailable(f"installing PyTorch Lightning 1.9 in {torch_image} failed: {output[-3000:]!r}")
            ready.write_text("\n".join(LIGHTNING_1_9) + "\n")
    return site


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_lightning_1_9_tqdm_progress_bar(lightning_1_9_site, torch_image, docker_client, tmp_path):
    """Lightning 1.9's bar, from Debian's python3-torch 1.13, as a job's log gets it (stdout and stderr
    into a file). Its bar shows the running "loss" beside the logged values, and counts the validation
    batches: "Epoch 0:  83%|████████▎ | 5/6 [00:00<00:00, 46.78it/s, loss=0.809, train_loss=0.310]"."""
    out = tmp_path / "out"
    out.mkdir()
    docker_client.containers.run(
        torch_image,
        ["sh", "-c", "python3 /scripts/lightning_fit.py /out/record.json tqdm >/out/log 2>&1; echo $? >/out/exit"],
        volumes={
            str(SCRIPTS): {"bind": "/scripts", "mode": "ro"},
            str(lightning_1_9_site): {"bind": "/site", "mode": "ro"},
            str(out): {"bind": "/out", "mode": "rw"},
        },
        working_dir="/out", environment={"PYTHONPATH": "/site", "HOME": "/tmp", "OMP_NUM_THREADS": "1"},
        user=f"{os.getuid()}:{os.getgid()}", network_disabled=True, remove=True,
    )
    data = (out / "log").read_bytes()
    assert (out / "exit").read_text().strip() == "0", data.decode("utf-8", "replace")[-3000:]
    record = json.loads((out / "record.json").read_text())
    assert record["version"] == "1.9.5" and all("loss" in step for step in record["steps"]), record
    check_log("Lightning 1.9's log", data, lightning_tqdm_expected(record, validation_in_main_bar=True), "epoch",
              LIGHTNING_PRINTS)


# -- the log as a terminal shows it ------------------------------------------------------------------


@pytest.mark.parametrize("name, inner_bar", [("hf-progress", rb"\| 2/2 \["), ("lightning-tqdm", rb"Validation")])
def test_evaluation_and_validation_bars_show_as_on_a_terminal(logger_jobs, name, inner_bar):
    """Hugging Face's evaluation bar and Lightning's validation bar are nested bars (position 1,
    leave=False): the log holds their every stroke, the views show what a terminal (pyte) shows."""
    from terminal_oracle import terminal_view

    job = finished(name)
    source = job.log_source()
    data = source.read(0, source.size())
    assert b"\x1b[A" in data and re.search(inner_bar, data), data[-2000:]
    expected = terminal_view(data)
    assert not any(re.search(inner_bar.decode(), line) for line in expected), expected  # erased when done
    assert job.logs().splitlines() == expected
    for count in (1, 4, 12):
        assert job.logs(tail=count).splitlines() == expected[-count:], count


# -- scikit-learn's searches -------------------------------------------------------------------------


@pytest.mark.docker
def test_scikit_learn_grid_search_scores_each_split_its_series(sklearn_image, docker_client, tmp_path):
    """GridSearchCV(verbose=3, return_train_score=True) from Debian's python3-sklearn prints each
    fit's scores inside parentheses: "score=(train=0.920, test=0.880)", and with two scorers
    "accuracy: (train=..., test=...) f1_macro: (train=..., test=...)". Each split of each scorer is
    a series of its own, a value per fit in the order the search printed them."""
    out = tmp_path / "out"
    out.mkdir()
    docker_client.containers.run(
        sklearn_image,
        ["sh", "-c", "python3 /scripts/sklearn_search.py /out/record.json >/out/log 2>&1; echo $? >/out/exit"],
        volumes={str(SCRIPTS): {"bind": "/scripts", "mode": "ro"}, str(out): {"bind": "/out", "mode": "rw"}},
        environment={"HOME": "/tmp", "OMP_NUM_THREADS": "1"}, user=f"{os.getuid()}:{os.getgid()}",
        network_disabled=True, remove=True,
    )
    data = (out / "log").read_bytes()
    assert (out / "exit").read_text().strip() == "0", data.decode("utf-8", "replace")[-3000:]
    record = json.loads((out / "record.json").read_text())
    expected = {}
    for kind in ("single", "multi"):
        for fit in record[kind]:
            for name, scores in fit.items():
                for split, score in zip(("train", "test"), scores):
                    expected.setdefault(f"{split}_{name}", []).append(score)
    assert sorted(expected) == ["test_accuracy", "test_f1_macro", "test_score", "train_accuracy", "train_f1_macro", "train_score"]
    for pieces in (False, True):
        found, _ = read_log(data, pieces)
        assert sorted(found) == sorted(expected), found
        for name, scores in expected.items():
            values = [value for _, value in found[name]]
            assert values == pytest.approx(scores, abs=5.1e-4), name  # printed f"{score:.3f}"
    check_any_reading("scikit-learn's search", data)
