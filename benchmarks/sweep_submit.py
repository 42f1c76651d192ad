"""A sweep of RUNS short host runs, as one `jupyter-trainer submit --sweep ...`, against the same runs
submitted one by one in a loop (what a user writes by hand: `for lr in ...: submit`), side by
side; then what a sweep of many runs costs the views, against one job's.

    python benchmarks/sweep_submit.py                 # 50 runs, 3 rounds
    python benchmarks/sweep_submit.py --runs 200 --rounds 1

Each arm is a fresh store and lines directory, and a fresh process of this environment's
interpreter, timed from its start until every run has ended (wall clock) and for its own CPU time
(user and system, the process and its children that ended: the supervisors are detached, so
mostly the submitting process). Both arms run the same script, `print(1)`, with `--host`.

Then, on the sweep's store: `jupyter-trainer list` (one row for the sweep) and `status NAME --json`
(every run's last and best value) against `list` and `status --json` of a store with one job.

Measured 2026-12-03 on this machine (2 cores, quiet), `--runs 50 --rounds 2`:

    one submit --sweep     wall   5.93 s   CPU  10.52 s
    50 submits in a loop   wall  21.20 s   CPU  19.87 s
    ratio (sweep / loop)   wall   0.28x    CPU   0.53x
    views of a 50-run sweep against one job's: list 0.30 s vs 0.30 s (1.00x),
    status --json 0.35 s vs 0.29 s (1.21x)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(argv, env, cwd) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the children) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed: {done.stderr.strip()[-400:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def fresh(base: Path, name: str) -> tuple[dict, Path]:
    home = base / name
    work = home / "work"
    work.mkdir(parents=True)
    (work / "train.py").write_text("print(1)\n")
    env = {**os.environ, "JUPYTER_TRAINER_HOME": str(home / "store"), "JUPYTER_TRAINER_LINES_DIR": str(home / "lines"), "PYTHONPATH": str(REPO)}
    return env, work


def wait_all_ended(env, work, names: list[str]) -> None:
    code = (
        "import sys, time\nfrom jupyter_trainer.jobs.job import Job\n"
        "names = sys.argv[1:]\n"
        "while not all(Job.load(n).refresh().record.status.is_final for n in names): time.sleep(0.1)\n"
    )
    subprocess.run([sys.executable, "-c", code, *names], env=env, cwd=work, check=True)


def sweep_arm(base: Path, runs: int) -> tuple[float, float]:
    env, work = fresh(base, f"sweep-{time.monotonic_ns()}")
    started = time.perf_counter()
    _, cpu = run([sys.executable, "-m", "jupyter_trainer", "submit", "train.py", "--host", "--name", "s", "--sweep", f"i={','.join(map(str, range(runs)))}"], env, work)
    wait_all_ended(env, work, [f"s-{index}" for index in range(1, runs + 1)])
    return time.perf_counter() - started, cpu


def loop_arm(base: Path, runs: int) -> tuple[float, float]:
    env, work = fresh(base, f"loop-{time.monotonic_ns()}")
    started = time.perf_counter()
    cpu = 0.0
    for index in range(runs):  # as a user's loop in a shell: one command a run
        cpu += run([sys.executable, "-m", "jupyter_trainer", "submit", "train.py", "--host", "--name", f"l-{index}", "--", "--i", str(index)], env, work)[1]
    wait_all_ended(env, work, [f"l-{index}" for index in range(runs)])
    return time.perf_counter() - started, cpu


def views(base: Path, runs: int) -> None:
    env, work = fresh(base, "views")
    run([sys.executable, "-m", "jupyter_trainer", "submit", "train.py", "--host", "--name", "s", "--sweep", f"i={','.join(map(str, range(runs)))}"], env, work)
    run([sys.executable, "-m", "jupyter_trainer", "submit", "train.py", "--host", "--name", "one"], env, work)
    wait_all_ended(env, work, ["one", *(f"s-{index}" for index in range(1, runs + 1))])
    one_env, one_work = fresh(base, "one")
    run([sys.executable, "-m", "jupyter_trainer", "submit", "train.py", "--host", "--name", "one"], one_env, one_work)
    wait_all_ended(one_env, one_work, ["one"])
    rows = []
    for what, argv in (("list", ["list"]), ("status --json", ["status", "s", "--json"])):
        sweep = statistics.median(run([sys.executable, "-m", "jupyter_trainer", *argv], env, work)[0] for _ in range(3))
        one_argv = argv if argv == ["list"] else ["status", "one", "--json"]
        alone = statistics.median(run([sys.executable, "-m", "jupyter_trainer", *one_argv], one_env, one_work)[0] for _ in range(3))
        rows.append((what, sweep, alone))
    print(f"\nviews of a {runs}-run sweep (wall, medians of 3) against one job's")
    for what, sweep, alone in rows:
        print(f"  {what:<14} {sweep:6.2f} s  vs {alone:6.2f} s  ({sweep / alone:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jt-sweep-bench-") as tmp:
        base = Path(tmp)
        sweeps, loops = [], []
        for _ in range(args.rounds):  # alternating, on a machine shared with other work
            sweeps.append(sweep_arm(base, args.runs))
            loops.append(loop_arm(base, args.runs))
        sweep_wall, sweep_cpu = (statistics.median(values) for values in zip(*sweeps))
        loop_wall, loop_cpu = (statistics.median(values) for values in zip(*loops))
        print(f"{args.runs} runs of print(1) on --host, medians of {args.rounds} rounds")
        print(f"  one submit --sweep   wall {sweep_wall:6.2f} s   CPU {sweep_cpu:6.2f} s")
        print(f"  {args.runs} submits in a loop wall {loop_wall:6.2f} s   CPU {loop_cpu:6.2f} s")
        print(f"  ratio (sweep / loop) wall {sweep_wall / loop_wall:.2f}x   CPU {sweep_cpu / loop_cpu:.2f}x")
        views(base, args.runs)


if __name__ == "__main__":
    main()
