"""A slow Slurm controller against the other views of a kernel: the log lag of a host job's view
on a poller that also serves a Slurm job's view whose `squeue` takes 10 s, side by side with the
same host job's view on a poller of its own.

    python benchmarks/slow_status.py                      # this checkout
    python benchmarks/slow_status.py --against OLD_DIR    # and another checkout, one after the other

Each checkout is measured in a fresh interpreter, with a store of its own. A stand-in `squeue` on
PATH (a script that sleeps --squeue-seconds, then lists the Slurm job as running) plays an
overloaded controller; no cluster runs the job. The Slurm job's view is opened first (how long
that takes is reported too), then two host jobs print the same time-stamped lines (lag.py's job,
a random 0.1 to 0.6 s apart) at the same time: one view on a poller alone, the other on the
poller that serves the Slurm view. A line counts as shown once the log pane's model has it.

The goal: with squeue taking 10 s, the host job's view still shows each line within 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOAL = 0.5  # seconds: every line of the host job shown within this

# One measurement, in its own interpreter with the checkout to measure first on sys.path. The lag
# job and the line counting are this checkout's (benchmarks/lag.py), whichever code is measured.
ROUND = r"""
import json, os, sys, tempfile, threading, time
checkout, benchmarks, lines, squeue_seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
sys.path[:0] = [benchmarks, checkout]
from lag import LAG_JOB, HeldLines
import comm
comm.create_comm = lambda *a, **k: comm.DummyComm(*a, **k)
os.environ["JUPYTER_TRAINER_HOME"] = tempfile.mkdtemp(prefix="jt-bench-slow-status-")
from pathlib import Path
stand_in = Path(tempfile.mkdtemp(prefix="jt-bench-squeue-"))
(stand_in / "squeue").write_text(SQUEUE.replace("PYTHON", sys.executable).replace("SECONDS", str(squeue_seconds)))
(stand_in / "squeue").chmod(0o755)
os.environ["PATH"] = f"{stand_in}:{os.environ['PATH']}"

import jupyter_trainer
assert jupyter_trainer.__file__.startswith(checkout), jupyter_trainer.__file__
from jupyter_trainer.backends.slurm.backend import output_option
from jupyter_trainer.jobs.job import Job
from jupyter_trainer.core.record import JobRecord, Status
from jupyter_trainer.backends import build_spec
from jupyter_trainer.core.store import JobStore
from jupyter_trainer.jobs.submit import submit_detached
from jupyter_trainer.view.job_widget import JobWidget
from jupyter_trainer.view.poller import Poller

store = JobStore()
store.create(JobRecord(name="on-slurm", backend="slurm"))
def launched(record):
    record.runtime = {"job_id": "4242", "submitted_at": time.time()}
    record.status, record.started_at = Status.RUNNING, time.time()
slurm = Job(store.update("on-slurm", 1, launched), store)
(slurm.run_dir / "output.log").write_text("started on node1\n")  # a running Slurm job's log: its view is watched
(stand_in / "job.json").write_text(json.dumps({"id": "4242", "submitted_at": slurm.record.runtime["submitted_at"],
                                              "log": output_option(slurm.run_dir), "name": "on-slurm"}))
opened = time.monotonic()
slurm_view = JobWidget(slurm)
open_seconds = time.monotonic() - opened
asking = []
slurm_view.header.observe(lambda change: asking.append("asking Slurm" in change["new"]), names="value")

script = LAG_JOB.format(settle=3, lines=lines, pause_min=0.1, pause_max=0.6)
work = tempfile.mkdtemp(prefix="jt-bench-work-")
spec = build_spec(script, host=True, image=None, container=None, workdir=work, gpus=None)
arms = {}
for arm in ("alone", "beside"):
    job = submit_detached(spec, name=f"host-{arm}").job
    view = JobWidget(job)
    held = HeldLines()
    view.log.observe(lambda change, held=held: held.saw(change["new"]), names="value")
    arms[arm] = (job, view, held, Poller())
arms["alone"][3].watch(arms["alone"][1])
arms["beside"][3].watch(arms["beside"][1], slurm_view)
deadline = time.monotonic() + 120 + lines * 2
while any(len(held.lags) < lines for _, _, held, _ in arms.values()) and time.monotonic() < deadline:
    time.sleep(0.2)
for job, _, _, poller in arms.values():
    job.stop(wait=0)
    with poller._lock:
        poller.widgets = []
calls = (stand_in / "calls").read_text().count("start") if (stand_in / "calls").exists() else 0
print(json.dumps({"open_seconds": open_seconds, "squeue_calls": calls, "said_asking": any(asking),
                  **{arm: [held.lags[n] for n in sorted(held.lags)] for arm, (_, _, held, _) in arms.items()}}))
"""

SQUEUE = r"""#!PYTHON
import json, os, sys, time
from pathlib import Path

here = Path(__file__).parent
with open(here / "calls", "a") as calls:
    calls.write("start\n")
time.sleep(SECONDS)
fields = sys.argv[sys.argv.index("-O") + 1]
separator = fields[len("JobID:") : fields.index(",State:")]
job = json.loads((here / "job.json").read_text())
submitted = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job["submitted_at"]))
values = [job["id"], "RUNNING", "None", "node1", "debug", submitted, "0", "UNLIMITED", str(os.getuid()), job["log"], job["name"]]
sys.stdout.write(separator.join(values) + separator + "\n")
"""


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def measure(checkout: Path, lines: int, squeue_seconds: float) -> dict:
    code = f"SQUEUE = {SQUEUE!r}\n" + ROUND
    done = subprocess.run(
        [sys.executable, "-c", code, str(checkout), str(HERE), str(lines), str(squeue_seconds)],
        capture_output=True, text=True, timeout=600 + lines * 4,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(label: str, found: dict) -> list[str]:
    alone, beside = found["alone"], found["beside"]
    rows = [f"{label}: opening the Slurm view took {found['open_seconds']:.2f} s; {found['squeue_calls']} squeue calls; "
            f"the Slurm view said 'asking Slurm…': {'yes' if found['said_asking'] else 'no'}"]  # fmt: skip
    rows.append(f"  {'':>6}  {'beside the Slurm view':>22}  {'alone':>9}  {'ratio':>7}   ({len(beside)} and {len(alone)} lines)")
    for name, share in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        ours, theirs = percentile(beside, share), percentile(alone, share)
        rows.append(f"  {name:>6}  {ours * 1000:>19.1f} ms  {theirs * 1000:>6.1f} ms  {ours / theirs if theirs else float('inf'):>6.2f}x")
    worst = max(beside) if beside else float("inf")
    rows.append(f"  goal, every line within {GOAL} s beside the slow Slurm view: {'met' if worst <= GOAL else 'NOT met'} (max {worst:.3f} s)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=100, help="lines each host job prints (a random 0.1-0.6 s apart)")
    parser.add_argument("--squeue-seconds", type=float, default=10.0, help="how long the stand-in squeue takes to answer")
    parser.add_argument("--against", type=Path, help="a checkout of another version, measured after this one")
    args = parser.parse_args()
    checkouts = {"this checkout": HERE.parent} | ({f"against {args.against}": args.against.resolve()} if args.against else {})
    for label, checkout in checkouts.items():
        print("\n".join(report(label, measure(checkout, args.lines, args.squeue_seconds))), flush=True)


if __name__ == "__main__":
    main()
