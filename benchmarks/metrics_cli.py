"""`jupyter-trainer metrics NAME --json` as a user runs it, against `LC_ALL=C grep -oE` pulling the
losses and learning rates out of the same log, side by side.

    python benchmarks/metrics_cli.py                       # this checkout against grep
    python benchmarks/metrics_cli.py --against OLD_DIR     # and a checkout of another version

The log is a finished host job's: LINES lines of a training loop (`step 000123 loss: 0.433333 lr:
0.00099`, 500,000 lines make 38 MB). Each arm is a fresh process, the command being the
environment's `jupyter-trainer` script with the checkout first on the path, so that its time is
the interpreter's start, the imports, the reading and the JSON of every value; both write to a
file (grep stops at its first match when it writes to /dev/null). Arms alternate, round after
round, and the table gives the medians. The JSON of every checkout is compared: it must be the same.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # common.py, and this checkout's package
from common import Comparison, table, timed  # noqa: E402

GREP_PATTERN = "(loss|lr): [0-9.]+"
WRITER = """
import sys
out = sys.stdout.buffer
for start in range(0, {lines}, 10000):
    out.write(b"".join(
        b"step %06d loss: %.6f lr: %.5f some more text to make a realistic line\\n" % (step, 1 / (1 + step % 9973), 0.001 * (1 - step % 100000 / 1e5))
        for step in range(start, min(start + 10000, {lines}))
    ))
"""


def finished_job(home: Path, lines: int) -> Path:
    """A host job that printed `lines` lines, run to its end; its log's path."""
    os.environ["JUPYTER_TRAINER_HOME"] = str(home)
    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.jobs.submit import submit_detached

    workdir = home / "work"
    workdir.mkdir()
    spec = build_spec(WRITER.format(lines=lines), host=True, image=None, container=None, workdir=str(workdir), gpus=None)
    job = submit_detached(spec, name="printed").job
    if job.wait(timeout=600).value != "completed":
        raise SystemExit(f"the job that prints the log ended {job.status.value}: {job.reason}")
    return job.run_dir / "output.log"


def command(checkout: Path, output: Path) -> tuple[list[str], Path, dict]:
    """How a user runs `jupyter-trainer metrics` from this environment, with `checkout`'s package
    (its arguments for run_to)."""
    script = Path(sys.executable).parent / "jupyter-trainer"
    runner = [str(script)] if script.exists() else [sys.executable, "-m", "jupyter_trainer"]
    return runner + ["metrics", "printed", "--json"], output, {**os.environ, "PYTHONPATH": str(checkout)}


def run_to(argv: list[str], output: Path, env: dict) -> None:
    with open(output, "wb") as out:
        subprocess.run(argv, stdout=out, env=env, check=True)


def alternating(arms: dict, rounds: int) -> dict:
    """Each arm's median seconds, the arms run in turn each round, the first one moving on a place
    each time (common.interleaved for more than two)."""
    times: dict = {label: [] for label in arms}
    labels = list(arms)
    for index in range(rounds):
        for label in labels[index % len(labels) :] + labels[: index % len(labels)]:
            times[label].append(arms[label]())
    return {label: statistics.median(seconds) for label, seconds in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--lines", type=int, default=500_000)
    parser.add_argument("--against", type=Path, help="a checkout of another version, measured in the same rounds")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="jt-bench-cli-"))
    try:
        log = finished_job(home, args.lines)
        checkouts = {"this checkout": HERE.parent} | ({str(args.against): args.against.resolve()} if args.against else {})
        grep_env = {**os.environ, "LC_ALL": "C"}
        arms = {"grep": timed(partial(run_to, ["grep", "-oE", GREP_PATTERN, str(log)], home / "grep.txt", grep_env))}
        outputs = {label: home / f"metrics-{index}.json" for index, label in enumerate(checkouts)}
        for label, checkout in checkouts.items():
            arms[label] = timed(partial(run_to, *command(checkout, outputs[label])))
        medians = alternating(arms, args.rounds)
        size = f"{log.stat().st_size >> 20} MB, {args.lines:,} lines"
        print(table([
            Comparison(f"{label}: metrics --json vs LC_ALL=C grep -oE ({size})", medians[label], medians["grep"], "<= 1.0x", 1.0)
            for label in checkouts
        ]))  # fmt: skip
        if len(outputs) > 1:
            first, *others = outputs.values()
            same = all(filecmp.cmp(first, other, shallow=False) for other in others)
            print(f"the same JSON from every checkout: {'yes' if same else 'NO'}")
            if not same:
                return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
