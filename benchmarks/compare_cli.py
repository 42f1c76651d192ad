"""`jupyter-trainer compare` of hundreds of finished jobs, as a user runs it, against reading their
logs once, side by side.

    python benchmarks/compare_cli.py                       # this checkout against reading the logs
    python benchmarks/compare_cli.py --against OLD_DIR     # and a checkout of another version

The store holds JOBS finished host jobs (their records written as a submission leaves them once
the job ended, no process started), each log LINES metric lines of one SHAPE:

* `steps`: `step 000123 loss: 0.4333 lr: 0.00099 ...`, lines the reader reads a run at a time;
* `epochs`: `epoch 0 step 123 loss: ... lr: ... acc: ...`, two markers a line: read one by one;
* `hf`: Hugging Face's `{'loss': 0.4333, 'grad_norm': ..., 'learning_rate': ..., 'epoch': 0.04}`.

Each arm is a fresh process of this environment's interpreter, writing to a file:

* `compare NAME...` (`python -m jupyter_trainer`, the checkout first on the path);
* the baseline: the same interpreter reading each log once with this checkout's MetricReader and
  sinks that keep nothing (the reader's own speed: what the command cannot do without);
* `cat` of the logs, for scale.

Arms alternate, round after round; the tables give the medians of the wall-clock and of the CPU
time of the arm's process (user and system: on a machine shared with other work, the steadier). Every checkout's output (the text
table, and `--json`) is compared: it must be the same.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # common.py, and this checkout's package
from common import Comparison, table  # noqa: E402

SHAPES = {
    "steps": lambda job, step, lines: b"step %06d loss: %.6f lr: %.5f some more text to make a realistic line\n"
    % (step, 1 / (1 + step) + job / 1e4, 0.001 * (1 - step / lines)),
    "epochs": lambda job, step, lines: b"epoch %d step %d loss: %.6f lr: %.5f acc: %.4f\n"
    % (step * 10 // lines, step, 1 / (1 + step) + job / 1e4, 0.001 * (1 - step / lines), step / lines),
    "hf": lambda job, step, lines: b"{'loss': %.4f, 'grad_norm': %.5f, 'learning_rate': %.6g, 'epoch': %.4g}\n"
    % (1 / (1 + step) + job / 1e4, 1 + (step * 7919 % 1000) / 1000, 5e-5 * (1 - step / lines), 3 * (step + 1) / lines),
}

# the baseline: every log read once by the metrics reader, nothing kept of what it finds
READ_ONCE = """
import sys
from jupyter_trainer.metrics.reader import MetricReader
for path in sys.argv[1:]:
    reader = MetricReader(lambda point: None, bulk=lambda *batch: None)
    with open(path, "rb") as log:
        reader.feed(log.read())
    reader.flush()
"""


def finished_jobs(home: Path, jobs: int, lines: int, shape: str) -> list[Path]:
    """`jobs` finished host jobs in the store at `home`, each with a log of `lines` lines of
    `shape`; their logs' paths."""
    os.environ["JUPYTER_TRAINER_HOME"] = str(home)
    from jupyter_trainer.core.record import JobRecord, Status
    from jupyter_trainer.core.store import LOG_FILE, JobStore

    store, make, now = JobStore(home), SHAPES[shape], time.time()
    logs = []
    for index in range(jobs):
        record = JobRecord(
            name=f"{shape}-{index}", backend="host", status=Status.COMPLETED, exit_code=0,
            created_at=now - 3600 + index, started_at=now - 3600 + index, ended_at=now - 60,
        )  # fmt: skip
        log = store.create(record) / LOG_FILE
        log.write_bytes(b"".join(make(index, step, lines) for step in range(lines)))
        logs.append(log)
    return logs


def command(checkout: Path, home: Path, names: list[str], *more: str) -> tuple[list[str], dict]:
    """`jupyter-trainer compare` with `checkout`'s package, run as `python -m jupyter_trainer` (an
    installed script names the entry point of the version installed, which may have moved since)."""
    return [sys.executable, "-m", "jupyter_trainer", "compare", *names, *more], {**os.environ, "PYTHONPATH": str(checkout), "JUPYTER_TRAINER_HOME": str(home)}


def run_to(argv: list[str], output: Path, env: dict, cwd: Path) -> None:
    """Run `argv` in `cwd` (`python -m` puts its working directory before PYTHONPATH: a checkout's
    arm runs in that checkout), writing to `output`."""
    with open(output, "wb") as out:
        subprocess.run(argv, stdout=out, env=env, cwd=cwd, check=True)


def wall_and_cpu(function) -> tuple[float, float]:
    """The wall-clock and the CPU time (of the processes it waited for) of `function()`."""
    def cpu() -> float:
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        return used.ru_utime + used.ru_stime

    start, start_cpu = time.perf_counter(), cpu()
    function()
    return time.perf_counter() - start, cpu() - start_cpu


def alternating(arms: dict, rounds: int) -> tuple[dict, dict]:
    """Each arm's median wall-clock and median CPU seconds, the arms run in turn each round, the
    first one moving on a place each time."""
    times: dict = {label: [] for label in arms}
    labels = list(arms)
    for index in range(rounds):
        for label in labels[index % len(labels) :] + labels[: index % len(labels)]:
            times[label].append(wall_and_cpu(arms[label]))
    walls = {label: statistics.median(wall for wall, _ in found) for label, found in times.items()}
    cpus = {label: statistics.median(cpu for _, cpu in found) for label, found in times.items()}
    return walls, cpus


def bench_shape(home: Path, shape: str, args, checkouts: dict[str, Path]) -> tuple[list[Comparison], bool]:
    logs = finished_jobs(home, args.jobs, args.lines, shape)
    names = [f"{shape}-{index}" for index in range(args.jobs)]
    size = sum(log.stat().st_size for log in logs)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    arms = {
        "cat": partial(run_to, ["cat", *map(str, logs)], home / "cat.txt", env, home),
        "read once": partial(run_to, [sys.executable, "-c", READ_ONCE, *map(str, logs)], home / "read.txt", env, HERE.parent),
    }
    outputs = {}
    for index, (label, checkout) in enumerate(checkouts.items()):
        argv, checkout_env = command(checkout, home, names)
        outputs[label] = home / f"compare-{shape}-{index}.txt"
        arms[label] = partial(run_to, argv, outputs[label], checkout_env, checkout)
    walls, cpus = alternating(arms, args.rounds)
    what = f"{args.jobs} jobs x {args.lines:,} lines ({shape}, {size / 1e6:.0f} MB)"
    results = []
    for label in checkouts:
        for kind, medians in (("wall", walls), ("CPU", cpus)):
            results.append(Comparison(f"{label}: compare vs reading the logs once ({kind}), {what}", medians[label], medians["read once"], "<= 1.2x", 1.2))
        results.append(Comparison(f"{label}: compare vs cat (wall), {what}", walls[label], walls["cat"], "for scale", None))
    same = True
    if len(checkouts) > 1:  # the same table, and the same JSON, from every checkout
        first, *others = outputs.values()
        same = all(filecmp.cmp(first, other, shallow=False) for other in others)
        as_json = []
        for index, checkout in enumerate(checkouts.values()):
            argv, checkout_env = command(checkout, home, names, "--json")
            as_json.append(home / f"compare-{shape}-{index}.json")
            run_to(argv, as_json[-1], checkout_env, checkout)
        same = same and all(filecmp.cmp(as_json[0], other, shallow=False) for other in as_json[1:])
    return results, same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--shapes", nargs="*", choices=sorted(SHAPES), default=["epochs", "hf", "steps"])
    parser.add_argument("--against", type=Path, help="a checkout of another version, measured in the same rounds")
    args = parser.parse_args()
    checkouts = {"this checkout": HERE.parent} | ({str(args.against): args.against.resolve()} if args.against else {})
    results, alike = [], []
    for shape in args.shapes:
        home = Path(tempfile.mkdtemp(prefix="jt-bench-compare-"))
        try:
            found, same = bench_shape(home, shape, args, checkouts)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        results += found
        alike.append(same)
    print(table(results))
    if len(checkouts) > 1:
        print(f"the same table and JSON from every checkout: {'yes' if all(alike) else 'NO'}")
    return 0 if all(alike) else 1


if __name__ == "__main__":
    sys.exit(main())
