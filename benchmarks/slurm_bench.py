"""The --slurm backend's costs, on a one-node cluster of the tests' own (tests/slurm_cluster.py):

* submit latency: `%%train_detached --slurm` (its run files, sbatch) against a hand-written sbatch
  of the same script;
* a poll of 200 followed jobs (every one refreshed, as `jupyter-trainer list` does): the Slurm
  commands it runs (the goal: one squeue, at most one accounting query), and its time against one
  plain `squeue` of them.

Run by `python benchmarks/run.py --only slurm` (needs root, slurm-wlm, munge, slurmdbd, mariadb-server).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Comparison, interleaved, timed

TESTS = Path(__file__).resolve().parent.parent / "tests"
FOLLOWED = 200


def bench_slurm(rounds: int, followed: int = FOLLOWED) -> list[Comparison]:
    sys.path.insert(0, str(TESTS))
    import slurm_cluster

    problem = slurm_cluster.missing(accounting=True)
    if problem:
        print(f"slurm benchmarks skipped: {problem}", file=sys.stderr)
        return []
    cluster = slurm_cluster.SlurmCluster(accounting=True, cluster="jtbench")
    home = Path(tempfile.mkdtemp(prefix="jt-bench-slurm-"))
    try:
        cluster.start()
        os.environ.update(cluster.env())
        return _measure(cluster, home, rounds, followed)
    finally:
        cluster.close()
        shutil.rmtree(home, ignore_errors=True)


def _measure(cluster, home: Path, rounds: int, followed: int) -> list[Comparison]:
    from jupyter_trainer.backends import build_spec
    from jupyter_trainer.backends.slurm import commands
    from jupyter_trainer.backends.slurm.queue import QUEUE
    from jupyter_trainer.core.store import JobStore
    from jupyter_trainer.jobs.job import refreshed_records
    from jupyter_trainer.jobs.submit import submit_detached

    os.environ["JUPYTER_TRAINER_HOME"] = str(home)
    store = JobStore(home)
    work = home / "work"
    work.mkdir()
    script = "print('hello')\n"
    (work / "script.py").write_text(script)
    (work / "batch.sh").write_text("#!/bin/sh\nexec python3 script.py\n")
    counter = iter(range(10**6))
    # held, so that nothing runs on this machine while it is timed
    spec = lambda: build_spec(script, workdir=str(work), slurm=True, sbatch_args=["--hold"])  # noqa: E731

    def ours():
        submit_detached(spec(), name=f"bench-{next(counter)}", store=store)

    def by_hand():
        subprocess.run(
            ["sbatch", "--parsable", "--hold", f"--job-name=hand-{next(counter)}", f"--chdir={work}", f"--output={work}/hand.log", str(work / "batch.sh")],
            check=True, capture_output=True,
        )  # fmt: skip

    submit = interleaved(timed(ours), timed(by_hand), rounds)
    cluster.run("scancel", "--user=root", "--name=" + ",".join(f"hand-{i}" for i in range(next(counter))))
    for index in range(followed - rounds):
        ours()
    # a tenth of them end and leave the controller (MinJobAge), so that accounting must be asked too
    ended = [record for record in store.records() if not isinstance(record, Exception)][: followed // 10]
    cluster.run("scancel", *[record.runtime["job_id"] for record in ended])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        listed = set(cluster.run("squeue", "--me", "--states=all", "-h", "-o", "%i").stdout.split())
        if not listed & {record.runtime["job_id"] for record in ended}:
            break
        time.sleep(1)
    calls = []
    QUEUE.forget()
    before = dict(commands.CALLS)
    refreshed_records(store)  # the first poll after they ended: accounting says how, in one query for all
    calls.append({name: commands.CALLS[name] - before.get(name, 0) for name in ("squeue", "sacct", "scontrol")})
    print(f"slurm: the first poll after {len(ended)} of {followed} jobs left the queue ran {calls[0]}", file=sys.stderr)

    def poll():
        QUEUE.forget()  # every poll asks squeue afresh, as one a few seconds after the last does
        before = dict(commands.CALLS)
        start = time.perf_counter()
        records = refreshed_records(store)
        took = time.perf_counter() - start
        assert len(records) >= followed, len(records)
        calls.append({name: commands.CALLS[name] - before.get(name, 0) for name in ("squeue", "sacct", "scontrol")})
        return took

    def plain():
        start = time.perf_counter()
        subprocess.run(["squeue", "--me", "-h"], check=True, capture_output=True)
        return time.perf_counter() - start

    polled = interleaved(poll, plain, rounds)
    worst = {name: max(call[name] for call in calls) for name in ("squeue", "sacct", "scontrol")}
    cluster.run("scancel", "--user=root")
    return [
        Comparison("slurm: submit (run files + sbatch) vs a hand-written sbatch", *submit, "<= 3x", 3.0),
        Comparison(f"slurm: a poll of {followed} followed jobs vs one plain squeue", *polled, "for scale", None),
        Comparison(f"slurm: squeue calls per poll of {followed} jobs (most seen)", worst["squeue"], 1, "<= 1", 1.0, unit="calls"),
        Comparison("slurm: sacct + scontrol calls per poll (most seen)", float(worst["sacct"] + worst["scontrol"]), 1, "<= 1", 1.0, unit="calls"),
    ]
